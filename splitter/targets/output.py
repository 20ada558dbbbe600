"""Atomic outputs: build in a temporary directory beside OUT, publish only complete results."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from splitter.errors import OutputError

LOCK_TIMEOUT_ENV = "SPLITTER_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0


def lock_timeout() -> float:
    """Seconds to wait for another build's lock: $SPLITTER_LOCK_TIMEOUT, read when a build
    locks (not at import), else DEFAULT_LOCK_TIMEOUT."""
    text = os.environ.get(LOCK_TIMEOUT_ENV)
    if not text:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise OutputError(
            f"${LOCK_TIMEOUT_ENV} is not a number of seconds: {text!r}; "
            f"set it to one (e.g. 600) or unset it"
        )
    return value


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `directory` itself, so no lock file is ever left behind."""
    timeout = lock_timeout()
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"another splitter build holds {directory} (waited {timeout:.0f} s): "
                        "wait for it or choose another -o"
                    ) from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


@contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """Yield an empty staging directory; on success move each of its entries into `out`."""
    out = out.absolute()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"cannot create the output's parent ({exc.strerror}): {out.parent}"
        ) from exc
    if out.exists() and not out.is_dir():
        raise OutputError(f"output exists and is not a directory: {out}")
    with locked(out.parent):
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed build; we hold the lock
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            build = staging / "build"
            build.mkdir()
            yield build
            normalise_modes(build)
            publish(build, out, staging / "old")
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def normalise_modes(root: Path) -> None:
    """0755 directories, 0644 files (0755 when executable): outputs must not depend on the
    builder's umask (077 would otherwise ship private files and directories)."""
    for directory, subdirs, files in os.walk(root):
        for name in subdirs:
            os.chmod(os.path.join(directory, name), 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o111
                os.chmod(path, 0o755 if executable else 0o644)


def publish(build: Path, out: Path, trash: Path) -> None:
    """Move every top-level entry of `build` into `out`, replacing what was there.

    Killed at any point, `out` never shows a file beside a directory it does not describe
    (`<pkg>.install` beside `<pkg>/`): old files leave first, directories are swapped next,
    new files arrive last, each by one rename.
    """
    if not out.exists():
        out.mkdir()
        out.chmod(0o755)
    trash.mkdir(exist_ok=True)
    entries = sorted(build.iterdir())
    directories = [e for e in entries if e.is_dir() and not e.is_symlink()]
    files = [e for e in entries if e not in directories]
    for entry in files if directories else []:
        _discard(out / entry.name, trash)
    for entry in directories:
        _discard(out / entry.name, trash)  # os.replace cannot replace a directory
        os.replace(entry, out / entry.name)
    for entry in files:
        destination = out / entry.name
        if destination.is_dir() and not destination.is_symlink():
            _discard(destination, trash)
        os.replace(entry, destination)  # atomic over an existing file


def _discard(path: Path, trash: Path) -> None:
    if path.exists() or path.is_symlink():
        os.replace(path, trash / path.name)
