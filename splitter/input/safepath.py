"""Paths from archives made safe to join onto a directory: no absolute paths, no `..`, no
backslashes or drive letters, and no way out through a link already under the root."""

from __future__ import annotations

import os
from pathlib import Path

from splitter.errors import InvalidWheel


def check_member_name(name: str) -> str:
    """Return `name` if it is a safe relative archive path, else raise naming it."""
    if not name or "\\" in name or "\x00" in name:
        raise InvalidWheel(f"unsafe path in wheel (empty, backslash or NUL): {name!r}")
    if name.startswith("/"):
        raise InvalidWheel(f"unsafe path in wheel (absolute): {name}")
    if ".." in name.split("/"):
        raise InvalidWheel(f"unsafe path in wheel (contains '..'): {name}")
    if len(name) > 1 and name[1] == ":":
        raise InvalidWheel(f"unsafe path in wheel (drive letter): {name}")
    return name


def safe_join(root: Path, relative: str) -> Path:
    """Join an archive path onto `root`, refusing anything that would land outside it."""
    check_member_name(relative)
    base = str(_real_dir(str(root)))
    target = os.path.normpath(os.path.join(base, relative))
    parent = os.path.dirname(target)
    while parent.startswith(base + os.sep) and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    real = str(_real_dir(parent))  # a symlink planted under root could still lead out
    inside = target.startswith(base + os.sep)
    if not inside or (real != base and not real.startswith(base + os.sep)):
        raise InvalidWheel(f"path escapes the destination {root}: {relative}")
    return Path(target)


def _real_dir(directory: str) -> Path:
    # Resolved afresh on every call: a cached answer would miss a directory that was replaced
    # by a link since. Hot paths (staging the wheel's own files) join checked names instead.
    return Path(directory).resolve()
