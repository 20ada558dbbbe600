"""Scratch directories: where they go, and that a killed build's scratch is reaped while a
running build's is not (real processes, real SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from splitter.errors import OutputError
from splitter.targets import scratch

HOLD = """
import sys, time
from pathlib import Path
from splitter.targets.scratch import scratch_dir
with scratch_dir(0) as directory:
    (directory / "payload").write_bytes(b"x" * 4096)
    print(directory, flush=True)
    time.sleep(600)
"""


def hold(env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    """A process inside scratch_dir, and its directory."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    directory = Path(process.stdout.readline().strip())
    process.stdout.close()
    return process, directory


def test_killed_builds_scratch_is_reaped_and_a_live_one_is_not(tmp_path: Path) -> None:
    env = {**os.environ, scratch.SCRATCH_ENV: str(tmp_path)}
    dead, dead_dir = hold(env)
    live, live_dir = hold(env)
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        assert (dead_dir / "payload").is_file()  # SIGKILL left it behind

        assert scratch.reap(tmp_path) == [dead_dir]
        assert not dead_dir.exists()
        assert (live_dir / "payload").is_file()
    finally:
        live.kill()
        live.wait()


def test_scratch_is_removed_on_exit_and_on_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(scratch.SCRATCH_ENV, str(tmp_path))
    with scratch.scratch_dir(0) as directory:
        assert directory.parent == tmp_path and directory.name.startswith(scratch.LIVE)
    with pytest.raises(RuntimeError), scratch.scratch_dir(0) as directory:
        (directory / "half-written").write_bytes(b"x")
        raise RuntimeError("build failed")
    assert list(tmp_path.iterdir()) == []


def test_configured_scratch_must_be_a_writable_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(scratch.SCRATCH_ENV, str(tmp_path / "missing"))
    with pytest.raises(OutputError, match=r"SPLITTER_SCRATCH is not a writable directory.*missing"):
        scratch.scratch_base(0)


def test_tmpfs_only_when_it_has_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(scratch.SCRATCH_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)  # gettempdir re-reads TMPDIR
    if scratch._is_tmpfs(scratch.SHM) and os.access(scratch.SHM, os.W_OK):
        assert scratch.scratch_base(1 << 20) == scratch.SHM
    assert scratch.scratch_base(1 << 60) == tmp_path  # no tmpfs has room for 1 EiB twice
    monkeypatch.setattr(scratch, "_available_memory", lambda: 2 * scratch.MARGIN)
    assert scratch.scratch_base(1 << 20) == tmp_path  # room on the tmpfs, not in memory
    monkeypatch.setattr(scratch, "SHM", tmp_path / "not-a-mount")
    assert scratch.scratch_base(0) == tmp_path


@pytest.mark.parametrize("race_at", ["open", "flock"])
def test_a_directory_reaped_before_its_build_locked_it_is_replaced(
    race_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another build's reap can run after mkdir and before the flock (before the directory is
    opened, or between open and flock) and remove the unlocked, empty directory: the build
    must notice and work in a new one, never in a removed directory."""
    monkeypatch.setenv(scratch.SCRATCH_ENV, str(tmp_path))
    made: list[Path] = []
    raced: list[Path] = []
    mkdtemp, flock = scratch.tempfile.mkdtemp, scratch.fcntl.flock

    def other_build_reaps() -> None:
        if not raced:
            raced.extend(scratch.reap(tmp_path))

    def racing_mkdtemp(prefix: str, dir: Path) -> str:
        made.append(Path(mkdtemp(prefix=prefix, dir=dir)))
        if race_at == "open":
            other_build_reaps()
        return str(made[-1])

    def racing_flock(fd: int, operation: int) -> None:
        if race_at == "flock" and operation == scratch.fcntl.LOCK_EX:  # the build, blocking
            other_build_reaps()
        flock(fd, operation)

    monkeypatch.setattr(scratch.tempfile, "mkdtemp", racing_mkdtemp)
    monkeypatch.setattr(scratch.fcntl, "flock", racing_flock)
    with scratch.scratch_dir(0) as directory:
        assert raced == made[:1] and directory == made[1]
        (directory / "payload").write_bytes(b"x")
        assert scratch.reap(tmp_path) == []  # locked: left alone
        assert (directory / "payload").is_file()
    assert list(tmp_path.iterdir()) == []


KILLED_AFTER_MKDIR = """
import os, signal, tempfile
from splitter.targets import scratch
mkdtemp = tempfile.mkdtemp
def mkdtemp_then_die(**kwargs):
    mkdtemp(**kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
tempfile.mkdtemp = mkdtemp_then_die
with scratch.scratch_dir(0):
    pass
"""


def test_a_build_killed_right_after_mkdir_leaves_only_reapable_scratch(tmp_path: Path) -> None:
    """SIGKILL in the instant after the directory exists and before it is locked (where the
    CI run of 2026-12-04 left a directory no reap removed): the next reap removes it."""
    env = {**os.environ, scratch.SCRATCH_ENV: str(tmp_path)}
    process = subprocess.run([sys.executable, "-c", KILLED_AFTER_MKDIR], env=env, check=False)
    assert process.returncode == -signal.SIGKILL
    (left,) = tmp_path.iterdir()
    assert scratch.reap(tmp_path) == [left]
    assert list(tmp_path.iterdir()) == []
