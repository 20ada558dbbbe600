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

LOCK_TIMEOUT = float(os.environ.get("SPLITTER_LOCK_TIMEOUT", "600"))


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `directory` itself, so no lock file is ever left behind."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"another splitter build holds {directory} (waited {LOCK_TIMEOUT:.0f} s): "
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
            publish(build, out, staging / "old")
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def publish(build: Path, out: Path, trash: Path) -> None:
    """Move every top-level entry of `build` into `out`, replacing what was there."""
    out.mkdir(exist_ok=True)
    trash.mkdir(exist_ok=True)
    for entry in sorted(build.iterdir()):
        destination = out / entry.name
        if destination.exists() or destination.is_symlink():
            os.replace(destination, trash / entry.name)
        os.replace(entry, destination)
