"""Atomic outputs: build in a temporary directory beside OUT, publish only complete results."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from splitter.errors import OutputError
from splitter.manifest import NAME as MANIFEST

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
    """Yield an empty staging directory beside `out`; on success publish its files into
    `out` (see publish): a failed or killed build leaves `out` as it was."""
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


def files_under(root: Path) -> set[str]:
    """Every file (and link) under `root`, relative POSIX paths."""
    found = set()
    for directory, subdirs, files in os.walk(root):
        base = os.path.relpath(directory, root)
        for name in files + [d for d in subdirs if os.path.islink(os.path.join(directory, d))]:
            found.add(name if base == "." else f"{base}/{name}")
    return found


def previous_files(out: Path) -> set[str]:
    """What the previous splitter build of `out` wrote, as its manifest lists it (the
    manifest itself included); nothing when `out` holds no manifest."""
    path = out / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(f) for f in data["files"]} | {MANIFEST}
    except FileNotFoundError:
        return set()
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise OutputError(
            f"unreadable manifest of a previous build ({exc}): {path}\n"
            "remove the output directory (or that file) and build again"
        ) from exc


def conflicts(new: set[str], previous: set[str], out: Path) -> list[str]:
    """The paths in `out` that a build writing `new` would overwrite or put a directory in
    place of, and that no splitter build wrote (`previous`): a user's files."""
    found = set()
    for path in new:
        parts = path.split("/")
        for depth in range(1, len(parts)):  # a user's file where the build needs a directory
            ancestor = "/".join(parts[:depth])
            target = out / ancestor
            taken = (target.is_symlink() or target.exists()) and not target.is_dir()
            if taken and ancestor not in previous:
                found.add(ancestor)
        target = out / path
        if target.is_dir() and not target.is_symlink():
            found |= {f"{path}/{f}" for f in files_under(target) if f"{path}/{f}" not in previous}
        elif (target.exists() or target.is_symlink()) and path not in previous:
            found.add(path)
    return sorted(found)


def publish(build: Path, out: Path, trash: Path) -> None:
    """Move the files of `build` into `out`, replacing what the previous splitter build of
    `out` wrote (its manifest's files) and nothing else.

    A file in `out` that no splitter build wrote and that this one would overwrite stops the
    build before `out` changes, naming it; every other file a user keeps there stays. The
    manifest of `out` is first rewritten to list both builds' files, so that a build killed
    while publishing leaves nothing unlisted for the next one to refuse. Then at each level
    of the tree old files that are replaced leave first, directories are swapped whole
    (merged where a user's files are inside) and new files arrive last, each by one rename:
    killed at any point, `out` never shows a file beside a directory it does not describe
    (`<pkg>.install` beside `<pkg>/`). Then the previous build's files that this one did not
    write leave, and the new manifest arrives.
    """
    previous = previous_files(out) if out.is_dir() else set()
    new = files_under(build)
    if found := conflicts(new - {MANIFEST}, previous, out):
        raise OutputError(
            f"{out} holds {len(found)} file(s) that splitter did not write and this build "
            "would overwrite:\n"
            + "\n".join(f"  {out / f}" for f in found)
            + "\nmove them away, or build into another -o"
        )
    if not out.exists():
        out.mkdir()
        out.chmod(0o755)
    trash.mkdir(exist_ok=True)
    if previous and MANIFEST in new:
        _write_listing(out, build / MANIFEST, previous | new, trash.parent / "listing")
    _merge(build, out, "", previous, trash)
    # Last, what only the previous build wrote, shallowest first (a list before its tree).
    for stale in sorted(previous - new - {MANIFEST}, key=lambda p: (p.count("/"), p)):
        _remove_stale(out, stale)
    if MANIFEST in new:
        os.replace(build / MANIFEST, out / MANIFEST)


def _write_listing(out: Path, manifest: Path, files: set[str], interim: Path) -> None:
    """The new manifest, listing `files`, written at `interim` (beside OUT) and moved over
    OUT's by one rename."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["files"] = sorted(files - {MANIFEST})
    interim.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    interim.chmod(0o644)
    os.replace(interim, out / MANIFEST)


def _remove_stale(out: Path, path: str) -> None:
    """Remove a file of the previous build and the directories it leaves empty."""
    target = out / path
    if target.is_symlink() or target.is_file():
        target.unlink()
    parent = target.parent
    while parent != out and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def _merge(source: Path, destination: Path, base: str, previous: set[str], trash: Path) -> None:
    entries = sorted(source.iterdir())
    directories = [e for e in entries if e.is_dir() and not e.is_symlink()]
    files = [e for e in entries if e not in directories and not (not base and e.name == MANIFEST)]
    for entry in files if directories else []:
        _discard(destination / entry.name, trash)
    for entry in directories:
        target = destination / entry.name
        relative = f"{base}{entry.name}"
        if target.is_dir() and not target.is_symlink() and _theirs(target, relative, previous):
            _merge(entry, target, f"{relative}/", previous, trash)  # keep the user's files
            continue
        _discard(target, trash)  # os.replace cannot replace a directory
        os.replace(entry, target)
    for entry in files:
        target = destination / entry.name
        if target.is_dir() and not target.is_symlink():
            _discard(target, trash)
        os.replace(entry, target)  # atomic over an existing file


def _theirs(directory: Path, relative: str, previous: set[str]) -> bool:
    """Whether `directory` holds a file no splitter build wrote."""
    return any(f"{relative}/{f}" not in previous for f in files_under(directory))


def _discard(path: Path, trash: Path) -> None:
    if path.exists() or path.is_symlink():
        destination = trash / path.name
        if destination.exists() or destination.is_symlink():
            destination = Path(tempfile.mkdtemp(dir=trash)) / path.name
        os.replace(path, destination)
