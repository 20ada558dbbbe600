"""A static loader: walk each staged ELF's NEEDED through its RUNPATH inside the install tree."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path

from splitter.binaries.elf import analyse_elf, is_elf
from splitter.binaries.relocate import ORIGIN
from splitter.errors import BinaryError


def find_unresolved(
    files: Mapping[str, str | Path],
    allowed: frozenset[str],
    default_dirs: tuple[str, ...] = (),
    elves: frozenset[str] | None = None,
    elsewhere: frozenset[str] = frozenset(),
) -> list[str]:
    """Every `file NEEDS name` not found via RUNPATH (or `default_dirs`) in the union of trees.

    `files` maps prefix-relative paths of the installed union to real files; `allowed` are
    system and mapped external sonames, which the target system provides. `elves` are the
    paths already known to be ELF (the plan read every file's magic); without it, every file
    is opened to read its magic. `elsewhere` are installed paths whose files were staged (and
    checked) in another tree: they satisfy a NEEDED but are not read.
    """
    present = set(files) | elsewhere
    problems = []
    for relative, real in sorted(files.items()):
        if elves is not None:
            if relative not in elves:
                continue
        else:
            with open(real, "rb") as handle:
                if not is_elf(handle.read(4)):
                    continue
        with open(real, "rb") as handle:
            info = analyse_elf(relative, handle.read(), registrations=False)
        here = posixpath.dirname(relative)
        search = []
        for entry in (*info.rpath, *info.runpath):
            if entry.startswith(ORIGIN):
                entry = posixpath.normpath(posixpath.join(here, entry[len(ORIGIN) :].lstrip("/")))
                search.append(entry)
        search += default_dirs
        for name in info.needed:
            if name in allowed:
                continue
            if not any(posixpath.join(d, name) in present for d in search):
                problems.append(
                    f"{relative} NEEDS {name} (searched: {', '.join(search) or 'nothing'})"
                )
    return problems


def check_resolved(
    files: Mapping[str, str | Path],
    allowed: frozenset[str],
    default_dirs: tuple[str, ...] = (),
    elves: frozenset[str] | None = None,
    elsewhere: frozenset[str] = frozenset(),
) -> None:
    """Raise BinaryError naming every staged file whose NEEDED does not resolve."""
    problems = find_unresolved(files, allowed, default_dirs, elves, elsewhere)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise BinaryError(
            f"NEEDED entries do not resolve in the installed layout ({len(problems)}):\n{lines}\n"
            "this is a relocation bug or a broken input; nothing was written"
        )
