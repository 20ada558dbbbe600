"""Scratch space for intermediate trees that are not outputs (the conda target's staged
payload and rattler-build's own copy of it).

rattler-build's assembler copies every staged file into a temporary directory before
archiving, so on a disk-backed /tmp each package's files are created twice more, and the
assembly waits on the disk. Scratch therefore goes to $SPLITTER_SCRATCH, else /dev/shm when
it is a tmpfs with room for four times the payload and that is at most a quarter of the
available memory, else the system temporary directory. A build that is killed leaves its
scratch directory behind; each directory is flocked by its build, and the next build removes
the ones whose lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from splitter.errors import OutputError

SCRATCH_ENV = "SPLITTER_SCRATCH"
SHM = Path("/dev/shm")
LIVE = "splitter-scratch-"
NEW = ".splitter-new-"  # earlier splitters created scratch under this name, then renamed it
MARGIN = 64 << 20
# Peak scratch of a conda build, as a multiple of the payload: the unpacked tree,
# rattler-build's copy of it and its temporary archives, with some room to spare.
PEAK_FACTOR = 4
# tmpfs pages are RAM: use it only when the peak is at most a quarter of what is available,
# so a large wheel falls back to disk instead of pressing the machine's memory.
MEMORY_SHARE = 4
ABANDONED_AFTER = 3600.0  # seconds


def scratch_base(need: int) -> Path:
    """Where scratch goes for a build that stages about `need` bytes."""
    configured = os.environ.get(SCRATCH_ENV)
    if configured:
        base = Path(configured)
        if not base.is_dir() or not os.access(base, os.W_OK):
            raise OutputError(
                f"${SCRATCH_ENV} is not a writable directory: {base} "
                f"(create it, or unset {SCRATCH_ENV} to use /dev/shm or the temporary directory)"
            )
        return base
    peak = PEAK_FACTOR * need + MARGIN
    if (
        _is_tmpfs(SHM)
        and os.access(SHM, os.W_OK)
        and _free(SHM) >= peak
        and _available_memory() >= MEMORY_SHARE * peak
    ):
        return SHM
    return Path(tempfile.gettempdir())


@contextmanager
def scratch_dir(need: int) -> Iterator[Path]:
    """A private directory, locked while it lives and removed after (also after SIGKILL,
    by the next build)."""
    base = scratch_base(need)
    reap(base)
    directory, fd = _create_locked(base)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        os.close(fd)


def _create_locked(base: Path) -> tuple[Path, int]:
    """A new directory under `base` and a descriptor holding its flock.

    The directory is created with its final name, so a build killed at any instant leaves
    nothing the next build's reap would not remove. Between mkdir and flock another build's
    reap may take the unheld lock and remove the empty directory; the creator then finds its
    descriptor pointing at a removed directory and makes another.
    """
    while True:
        directory = Path(tempfile.mkdtemp(prefix=LIVE, dir=base))
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # reaped before we opened it
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = os.fstat(fd)
        try:
            named = directory.stat()
        except FileNotFoundError:
            named = None
        if held.st_nlink and named and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            return directory, fd
        os.close(fd)  # reaped before we locked it


def reap(base: Path) -> list[Path]:
    """Remove scratch directories of builds that died (their lock is free); return them.

    A NEW directory (an earlier splitter's, killed before renaming it) goes once it is an
    hour old: that splitter took its lock only after creating it.
    """
    removed = []
    for stale in sorted(base.glob(LIVE + "*")):
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a running build holds it
        else:
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
        finally:
            os.close(fd)
    now = time.time()
    for abandoned in sorted(base.glob(NEW + "*")):
        with contextlib.suppress(OSError):
            if now - abandoned.stat().st_mtime > ABANDONED_AFTER:
                shutil.rmtree(abandoned, ignore_errors=True)
                removed.append(abandoned)
    return removed


def _is_tmpfs(path: Path) -> bool:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            return any(
                fields[1] == str(path) and fields[2] == "tmpfs"
                for fields in (line.split() for line in mounts)
                if len(fields) > 2
            )
    except OSError:
        return False


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize
