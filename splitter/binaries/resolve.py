"""A static loader: walk each staged binary's dependencies inside the install tree, as ld.so
(NEEDED through RUNPATH) or dyld (`@rpath/` through LC_RPATH, `@loader_path/`) would."""

from __future__ import annotations

import fnmatch
import mmap
import posixpath
from collections.abc import Mapping
from pathlib import Path

from splitter.binaries.detect import analyse_binary, is_binary
from splitter.binaries.macho import is_macho
from splitter.binaries.relocate import LOADER_PATH, ORIGIN
from splitter.errors import BinaryError
from splitter.model import BinaryInfo

RPATH_PREFIX = "@rpath/"


def find_unresolved(
    files: Mapping[str, str | Path],
    allowed: frozenset[str],
    default_dirs: tuple[str, ...] = (),
    elves: frozenset[str] | None = None,
    system_paths: tuple[str, ...] = (),
    elsewhere: frozenset[str] = frozenset(),
) -> list[str]:
    """Every `file NEEDS name` not found via RUNPATH (or `default_dirs`) in the union of trees.

    `files` maps prefix-relative paths of the installed union to real files; `allowed` are
    system and mapped external sonames (and install names), which the target system
    provides; `system_paths` are globs over the absolute install names macOS provides. `elves`
    are the paths already known to be ELF or Mach-O (the plan read every file's magic);
    without it, every file is opened to read its magic. `elsewhere` are installed paths whose
    files were staged (and checked) in another tree: they satisfy a NEEDED but are not read.
    """
    present = set(files) | elsewhere
    problems = []
    for relative, real in sorted(files.items()):
        if elves is not None:
            if relative not in elves:
                continue
        else:
            with open(real, "rb") as handle:
                if not is_binary(handle.read(4)):
                    continue
        info = _linkage_of(relative, real)
        if info.macho:
            problems += _unresolved_macho(relative, info, present, allowed, system_paths)
            continue
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


def _linkage_of(relative: str, real: str | Path) -> BinaryInfo:
    """The dynamic-linking facts of the staged file `real`. An ELF file is mapped, not read:
    its program headers, dynamic table and strings are a few pages of a file of megabytes
    (the export's _C extension), and the union is checked on every build. A Mach-O file is
    read whole, as its reader takes it."""
    with open(real, "rb") as handle:
        head = handle.read(4)
        if is_macho(head) or not head:
            return analyse_binary(relative, head + handle.read(), registrations=False)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            # the ELF reader slices, unpacks and hashes its input: an mmap serves all three
            return analyse_binary(relative, mapped, registrations=False)  # type: ignore[arg-type]


def _unresolved_macho(
    relative: str,
    info: BinaryInfo,
    present: set[str],
    allowed: frozenset[str],
    system_paths: tuple[str, ...],
) -> list[str]:
    """dyld's search for one Mach-O file: `@rpath/` names through each `@loader_path` LC_RPATH,
    `@loader_path/` names from the file's directory; absolute names must be the system's."""
    here = posixpath.dirname(relative)

    def at_loader(path: str) -> str:
        return posixpath.normpath(posixpath.join(here, path[len(LOADER_PATH) :].lstrip("/")))

    search = [at_loader(e) for e in info.runpath if e.startswith(LOADER_PATH)]
    problems = []
    for name in info.needed:
        if name in allowed or name in info.weak:
            continue  # weak: dyld loads on without it
        if name.startswith(RPATH_PREFIX):
            leaf = name[len(RPATH_PREFIX) :]
            if any(posixpath.join(d, leaf) in present for d in search):
                continue
            where = ", ".join(search) or "nothing"
        elif name.startswith(LOADER_PATH):
            if at_loader(name) in present:
                continue
            where = at_loader(name)
        elif name.startswith("/") and any(fnmatch.fnmatchcase(name, p) for p in system_paths):
            continue
        else:
            where = "not a system library"
        problems.append(f"{relative} NEEDS {name} (searched: {where})")
    return problems


def check_resolved(
    files: Mapping[str, str | Path],
    allowed: frozenset[str],
    default_dirs: tuple[str, ...] = (),
    elves: frozenset[str] | None = None,
    system_paths: tuple[str, ...] = (),
    elsewhere: frozenset[str] = frozenset(),
) -> None:
    """Raise BinaryError naming every staged file whose NEEDED does not resolve."""
    problems = find_unresolved(files, allowed, default_dirs, elves, system_paths, elsewhere)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise BinaryError(
            f"NEEDED entries do not resolve in the installed layout ({len(problems)}):\n{lines}\n"
            "this is a relocation bug or a broken input; nothing was written"
        )
