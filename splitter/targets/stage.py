"""Stage every package of a plan as an installed FHS tree, relocated and checked.

Shared by the tree target (one DESTDIR per package) and the conda target (prefix `$PREFIX`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import threading
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from splitter.binaries.relocate import compute_runpath, external_dirs, set_runpath
from splitter.binaries.resolve import check_resolved
from splitter.errors import SplitterError
from splitter.guard import guard_files
from splitter.layout import Layout, install_path
from splitter.model import BinaryInfo, Plan, Rpath, WheelEntry
from splitter.targets.generated import generated_files
from splitter.wheel import check_member_name, read_verified, safe_join

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedFile:
    """One installed file: prefix-relative path, where it is on disk, and its mode."""

    path: str
    real: str  # a string: 4,605 Path objects cost more than staging's renames (profiled)
    executable: bool
    source: str = ""  # the wheel path it was copied from unchanged; "" when generated


@dataclass(frozen=True, slots=True, kw_only=True)
class Staged:
    """What stage() wrote: per package, its files (sorted by path)."""

    layout: Layout
    packages: dict[str, tuple[StagedFile, ...]]
    runpaths: dict[str, tuple[str, ...]]  # installed path of each shipped ELF -> its RUNPATH


def stage(
    plan: Plan,
    layout: Layout,
    root_of: Callable[[str], Path],
    rpath: Rpath = Rpath.RELATIVE,
    progress: Progress | None = None,
    guard: bool = False,
    unpacked: Path | None = None,
) -> Staged:
    """Write each package under `root_of(package)` (the prefix directory), then relocate.

    Files come from the wheel, or, with `unpacked` (the verified tree make_plan wrote, on the
    same file system as the roots), are moved out of that tree."""
    if rpath == Rpath.STRIP and not layout.system_libdir():
        raise SplitterError(
            f"--rpath strip needs a libdir the dynamic linker searches by default, not "
            f"{layout.prefix}/{layout.libdir}: use --prefix /usr (Debian policy) "
            "or --rpath relative"
        )
    destinations = {
        path: dest
        for path in plan.owners
        if (dest := install_path(path, layout, plan.wheel.dist_info)) is not None
    }
    entries = {e.path: e for e in plan.wheel.entries}
    replaced, added = guard_files(plan) if guard else ({}, {})
    staged: dict[str, list[StagedFile]] = {p.name: [] for p in plan.packages}
    jobs: list[tuple[str, str]] = []
    elf_paths = {b.path for b in plan.binaries}
    roots = {p.name: str(root_of(p.name)) for p in plan.packages}
    for path, dest in sorted(destinations.items()):
        owner = plan.owners[path][0]
        # A fresh root: no links to follow. Strings, not Path joins: pathlib was half of
        # staging's time over 4,605 files (measured).
        joined = f"{roots[owner]}/{check_member_name(dest)}"
        executable = entries[path].executable or path in elf_paths
        source = "" if path in replaced else path
        staged[owner].append(
            StagedFile(path=dest, real=joined, executable=executable, source=source)
        )
        jobs.append((path, joined))
    if unpacked is None:
        for parent in sorted({os.path.dirname(real) for _, real in jobs}):
            make_dirs(parent)
        extract(plan.wheel.path, jobs, replaced, entries, progress)
    else:
        move(str(unpacked), jobs, replaced, [e.path for e in plan.wheel.entries])

    for path, data in added.items():
        owner = plan.owners[posixpath.join(posixpath.dirname(path), "__init__.py")][0]
        dest = install_path(path, layout, plan.wheel.dist_info)
        assert dest is not None
        real = safe_join(root_of(owner), dest)
        real.write_bytes(data)
        staged[owner].append(StagedFile(path=dest, real=str(real), executable=False))

    for package in plan.packages:
        for dest, text, executable in generated_files(plan, package, layout):
            real = safe_join(root_of(package.name), dest)
            make_parents(real)
            real.write_text(text, encoding="utf-8")
            staged[package.name].append(
                StagedFile(path=dest, real=str(real), executable=executable)
            )

    runpaths = relocate(plan, layout, destinations, root_of, rpath)
    union = {f.path: f.real for files in staged.values() for f in files}
    allowed = frozenset(plan.recipe.system_sonames) | frozenset(
        s for e in plan.recipe.externals for s in e.sonames
    )
    default_dirs = (layout.libdir,) if rpath == Rpath.STRIP else ()
    elves = frozenset(destinations[b.path] for b in plan.binaries)
    check_resolved(union, allowed, default_dirs, elves)
    for files in staged.values():
        for item in files:
            os.chmod(item.real, 0o755 if item.executable else 0o644)
            os.utime(item.real, (plan.wheel.timestamp, plan.wheel.timestamp))
    return Staged(
        layout=layout,
        packages={
            name: tuple(sorted(files, key=lambda f: f.path)) for name, files in staged.items()
        },
        runpaths=runpaths,
    )


WORKERS = 2


def extract(
    wheel: Path,
    jobs: list[tuple[str, str]],
    replaced: dict[str, bytes],
    entries: dict[str, WheelEntry],
    progress: Progress | None,
) -> None:
    """Write each (wheel path, destination), verified again against the plan's digests (the
    wheel is read a second time here); inflating and hashing release the GIL, so two workers
    with their own handle on the zip halve the wall time on two cores (measured)."""
    buckets: list[list[tuple[str, str]]] = [[] for _ in range(WORKERS)]
    load = [0] * WORKERS
    for job in sorted(jobs, key=lambda j: -entries[j[0]].size):
        lightest = load.index(min(load))
        buckets[lightest].append(job)
        load[lightest] += entries[job[0]].size
    done = [0]
    lock = threading.Lock()

    def work(bucket: list[tuple[str, str]]) -> None:
        with zipfile.ZipFile(wheel) as archive:
            for path, real in bucket:
                if path in replaced:
                    Path(real).write_bytes(replaced[path])
                else:
                    read_verified(archive, entries[path], real)
                with lock:
                    done[0] += 1
                    if progress is not None and done[0] % 200 == 0:
                        progress("stage", done[0], len(jobs))

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(work, buckets))


def move(
    unpacked: str, jobs: list[tuple[str, str]], replaced: dict[str, bytes], present: list[str]
) -> None:
    """Rename each (wheel path, destination) out of the unpacked tree (read_wheel wrote it,
    from checked member names, holding the files `present`). A directory whose every file
    goes to one place, keeping its layout, is renamed whole: 1.5.1 stages with 27 renames
    instead of 4,605 (the export side's Python packages keep their shape)."""
    whole, single = subtree_moves(dict(jobs), replaced, present)
    for tree in whole:
        if os.path.lexists(tree.target):  # another directory lands there too: file by file
            inside = f"{tree.directory}/"
            single += [(path, real) for path, real in jobs if path.startswith(inside)]
            continue
        make_dirs(os.path.dirname(tree.target))
        os.rename(os.path.join(unpacked, tree.directory), tree.target)
        for inner in ("", *tree.subdirectories):  # made under the build's umask
            os.chmod(tree.target + inner, 0o755)
    for parent in sorted({os.path.dirname(real) for _, real in single}):
        make_dirs(parent)
    for path, real in single:
        if path in replaced:
            Path(real).write_bytes(replaced[path])
        else:
            os.replace(os.path.join(unpacked, path), real)


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeMove:
    """A directory of the unpacked tree renamed whole to `target`."""

    directory: str
    target: str
    subdirectories: tuple[str, ...]  # "/a", "/a/b", ... below it, to normalise their modes


def subtree_moves(
    jobs: dict[str, str], replaced: dict[str, bytes], present: list[str]
) -> tuple[list[TreeMove], list[tuple[str, str]]]:
    """Split (wheel path -> destination) into whole-directory renames and single files. A
    directory qualifies when each file under it is a job, is not replaced, and lands at one
    common target plus its path inside the directory; the outermost such directories win."""
    targets: dict[str, str | None] = {}  # directory -> its common target, None if there is none
    for path in present:
        dest = jobs.get(path) if path not in replaced else None
        cut = path.rfind("/")
        while cut > 0:
            inner = path[cut:]  # "/name..." below the directory path[:cut]
            target = dest[: -len(inner)] if dest is not None and dest.endswith(inner) else None
            if targets.setdefault(path[:cut], target) != target:
                targets[path[:cut]] = None
            cut = path.rfind("/", 0, cut)
    chosen = {
        directory: target
        for directory, target in sorted(targets.items())
        if target is not None and targets.get(posixpath.dirname(directory)) is None
    }
    below: dict[str, list[str]] = {directory: [] for directory in chosen}
    for directory in sorted(targets):
        top = directory
        while top and top not in chosen:
            top = posixpath.dirname(top)
        if top and top != directory:
            below[top].append(directory[len(top) :])
    whole = [
        TreeMove(directory=d, target=t, subdirectories=tuple(below[d])) for d, t in chosen.items()
    ]
    moved = tuple(f"{directory}/" for directory in chosen)
    single = [(path, real) for path, real in jobs.items() if not path.startswith(moved)]
    return whole, sorted(single)


def make_parents(path: Path) -> None:
    """`mkdir -p` of the parent of `path`, each new directory 0755 whatever the umask: a tree
    staged under umask 077 must not ship 0700 directories."""
    make_dirs(str(path.parent))


def make_dirs(directory: str) -> None:
    """`mkdir -p directory`, each new directory 0755 whatever the umask."""
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(new)
        os.chmod(new, 0o755)


def relocate(
    plan: Plan,
    layout: Layout,
    destinations: dict[str, str],
    root_of: Callable[[str], Path],
    rpath: Rpath,
) -> dict[str, tuple[str, ...]]:
    """Give every shipped ELF a RUNPATH that reaches its NEEDED files in the new layout."""
    written: dict[str, tuple[str, ...]] = {}
    targets = {b.provides: destinations[b.path] for b in plan.binaries}
    externals = frozenset(s for e in plan.recipe.externals for s in e.sonames)
    site_dirs = tuple(d for e in plan.recipe.externals for d in e.site_dirs)
    ext_dirs = external_dirs(site_dirs, layout.sitedir, layout.libdir)
    for binary in plan.binaries:
        dest = destinations[binary.path]
        runpath = runpath_for(binary, dest, targets, ext_dirs, externals)
        if rpath == Rpath.STRIP:
            system = posixpath.relpath(layout.libdir, posixpath.dirname(dest) or ".")
            drop = {"$ORIGIN" if system == "." else f"$ORIGIN/{system}"}
            runpath = tuple(e for e in runpath if e not in drop)
        written[dest] = runpath
    files = {
        dest: root_of(plan.owners[b.path][0]) / dest
        for b in plan.binaries
        if (dest := destinations[b.path])
    }
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:  # one patchelf process per file
        list(pool.map(lambda dest: set_runpath(files[dest], written[dest]), sorted(written)))
    return written


def runpath_for(
    binary: BinaryInfo,
    dest: str,
    targets: dict[str, str],
    ext_dirs: tuple[str, ...],
    externals: frozenset[str],
) -> tuple[str, ...]:
    """The RUNPATH to write; a module-level hook so a test can break it and see the build fail."""
    return compute_runpath(binary, dest, targets, ext_dirs, externals)
