"""Stage every package of a plan as an installed FHS tree, relocated and checked.

Shared by the tree target (one DESTDIR per package) and the conda target (prefix `$PREFIX`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from splitter.binaries.relocate import (
    ORIGIN,
    compute_runpath,
    external_dirs,
    set_macho_rpaths,
    set_runpath,
)
from splitter.binaries.resolve import check_resolved
from splitter.errors import UsageError
from splitter.input.payload import extract
from splitter.input.safepath import check_member_name, safe_join
from splitter.model import BinaryInfo, Plan, Rpath
from splitter.plan.layout import Layout, install_path
from splitter.targets.generated.files import generated_files
from splitter.targets.generated.guard import guard_files

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedFile:
    """One installed file: prefix-relative path, where it is on disk, and its mode."""

    path: str
    real: str  # a string: staging makes one per wheel file, too many to pay for Path objects
    executable: bool
    source: str = ""  # the wheel path it was copied from unchanged; "" when generated


@dataclass(frozen=True, slots=True, kw_only=True)
class Staged:
    """What stage() wrote: per package, its files (sorted by path)."""

    layout: Layout
    packages: Mapping[str, tuple[StagedFile, ...]]  # read-only, as are the mappings below
    runpaths: Mapping[str, tuple[str, ...]]  # installed path of each shipped ELF -> its RUNPATH
    # package not staged here (stage's `only`) -> the installed paths of its wheel files
    elsewhere: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def paths(self, package: str) -> tuple[str, ...]:
        """The installed paths of `package`, staged here or not."""
        if package in self.packages:
            return tuple(f.path for f in self.packages[package])
        return self.elsewhere[package]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reusable:
    """Files another wheel's staging wrote exactly as that wheel holds them (not generated,
    replaced by the guard or relocated), which a later staging of a wheel with the same
    files points at instead of writing them again: wheel path -> (sha256, executable, file
    on disk). Built by `reusable`; the staging it comes from must outlive every use."""

    files: Mapping[str, tuple[str, bool, str]]


def reusable(plan: Plan, staged: Staged, packages: Iterable[str]) -> Reusable:
    """The files of `packages` that `staged` holds unchanged from `plan`'s wheel."""
    digests = {e.path: e.sha256 for e in plan.wheel.entries}
    return Reusable(
        files=MappingProxyType(
            {
                item.source: (digests[item.source], item.executable, item.real)
                for name in packages
                for item in staged.packages[name]
                if item.source and item.path not in staged.runpaths
            }
        )
    )


def stage(
    plan: Plan,
    layout: Layout,
    root_of: Callable[[str], Path],
    rpath: Rpath = Rpath.RELATIVE,
    progress: Progress | None = None,
    guard: bool = False,
    only: frozenset[str] | None = None,
    names: Mapping[str, str] | None = None,
    reuse: Reusable | None = None,
) -> Staged:
    """Write each package under `root_of(package)` (the prefix directory), then relocate.
    Files come from the wheel, verified against the plan's digests (splitter.input.payload);
    `names` are the package names the generated CMake config tells users to install.

    `only` stages those packages alone (a release stages its Python-independent packages
    once, from one wheel): the others' files count as installed where the layout puts them,
    so the resolver still sees the libraries they provide, but are not written.

    `reuse` (a release: the files its platform's first wheel staged) is not written again
    where this wheel holds the same bytes (same wheel path and sha256, verified against RECORD
    by both plans) with the same mode and no edit to make: the file points at that copy. The
    export of every Python but the first is then mostly its extension modules: the Python
    sources, data and flatc are the same in every wheel of a platform. Packagers read these
    files and never change them, so a shared copy gives the same packages."""
    if rpath == Rpath.STRIP and not layout.system_libdir():
        raise UsageError(
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
    wanted = [p for p in plan.packages if only is None or p.name in only]
    staged: dict[str, list[StagedFile]] = {p.name: [] for p in wanted}
    jobs: list[tuple[str, str]] = []
    elf_paths = {b.path for b in plan.binaries}
    roots = {p.name: str(root_of(p.name)) for p in wanted}
    elsewhere: dict[str, list[str]] = {}  # package not staged here -> its installed paths
    shared = reuse.files if reuse is not None else {}
    digests = {e.path: e.sha256 for e in plan.wheel.entries}
    reused: set[str] = set()  # the staged paths that point at another wheel's copy
    for path, dest in sorted(destinations.items()):
        owner = plan.owners[path][0]
        if owner not in staged:
            elsewhere.setdefault(owner, []).append(dest)
            continue
        # A fresh root: no links to follow. Strings, not Path joins: one join per wheel file,
        # where pathlib's per-object cost would be a large share of staging.
        joined = f"{roots[owner]}/{check_member_name(dest)}"
        executable = entries[path].executable or path in elf_paths
        source = "" if path in replaced else path
        same = shared.get(path)
        if (
            same is not None
            and source
            and path not in elf_paths
            and same[:2]
            == (
                digests[path],
                executable,
            )
        ):
            staged[owner].append(
                StagedFile(path=dest, real=same[2], executable=executable, source=path)
            )
            reused.add(dest)
            continue
        staged[owner].append(
            StagedFile(path=dest, real=joined, executable=executable, source=source)
        )
        jobs.append((path, joined))
    for parent in sorted({os.path.dirname(real) for _, real in jobs}):
        make_dirs(parent)
    extract(plan.wheel, [job for job in jobs if job[0] not in replaced], progress)
    for path, joined in jobs:
        if path in replaced:
            Path(joined).write_bytes(replaced[path])

    for path, data in added.items():
        owner = plan.owners[posixpath.join(posixpath.dirname(path), "__init__.py")][0]
        if owner not in staged:
            continue
        dest = install_path(path, layout, plan.wheel.dist_info)
        assert dest is not None
        real = safe_join(root_of(owner), dest)
        make_parents(real)  # its __init__.py, replaced too, is there; said, not assumed
        real.write_bytes(data)
        staged[owner].append(StagedFile(path=dest, real=str(real), executable=False))

    for package in wanted:
        for dest, text, executable in generated_files(plan, package, layout, names):
            real = safe_join(root_of(package.name), dest)
            make_parents(real)
            real.write_text(text, encoding="utf-8")
            staged[package.name].append(
                StagedFile(path=dest, real=str(real), executable=executable)
            )

    runpaths = relocate(plan, layout, destinations, root_of, rpath, frozenset(staged))
    union = {f.path: f.real for files in staged.values() for f in files}
    allowed = frozenset(plan.recipe.system_sonames) | frozenset(
        s for e in plan.recipe.externals for s in e.sonames
    )
    default_dirs = (layout.libdir,) if rpath == Rpath.STRIP else ()
    elves = frozenset(destinations[b.path] for b in plan.binaries) & union.keys()
    installed_elsewhere = frozenset(d for paths in elsewhere.values() for d in paths)
    check_resolved(
        union,
        allowed,
        default_dirs,
        elves,
        system_paths=plan.recipe.system_paths,
        elsewhere=installed_elsewhere,
    )
    for files in staged.values():
        for item in files:
            if item.path in reused:
                continue  # another staging's file, its mode already this one
            os.chmod(item.real, 0o755 if item.executable else 0o644)
            os.utime(item.real, (plan.wheel.timestamp, plan.wheel.timestamp))
    return Staged(
        layout=layout,
        packages=MappingProxyType(
            {name: tuple(sorted(files, key=lambda f: f.path)) for name, files in staged.items()}
        ),
        runpaths=MappingProxyType(runpaths),
        elsewhere=MappingProxyType({name: tuple(paths) for name, paths in elsewhere.items()}),
    )


def own_directories(staged: Staged, package: str, dependencies: Iterable[str]) -> set[str]:
    """The directories `package` creates that neither a dependency nor the layout's standard
    install directories own: what an RPM %files section lists as %dir."""
    taken = standard_dirs(staged.layout)
    for dependency in dependencies:
        taken |= {d for path in staged.paths(dependency) for d in parents(path)}
    return {d for path in staged.paths(package) for d in parents(path)} - taken


def standard_dirs(layout: Layout) -> set[str]:
    """The layout's install directories (libdir, includedir, site-packages, bindir, pkgconfig,
    cmake) and their parents, prefix-relative: the system owns them, no package does."""
    taken: set[str] = set()
    for base in (
        layout.libdir,
        layout.includedir,
        layout.sitedir,
        layout.bindir,
        layout.pkgconfigdir,
        f"{layout.libdir}/cmake",
    ):
        taken |= {base, *parents(base)}
    return taken


def parents(path: str) -> list[str]:
    """The directories above `path`, nearest first, relative (a/b) or absolute (/a/b)."""
    found = []
    parent = posixpath.dirname(path)
    while parent not in ("", "/"):
        found.append(parent)
        parent = posixpath.dirname(parent)
    return found


WORKERS = 2


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
    packages: frozenset[str],
) -> dict[str, tuple[str, ...]]:
    """Give every shipped ELF of `packages` a RUNPATH that reaches its NEEDED files in the
    new layout."""
    written: dict[str, tuple[str, ...]] = {}
    targets = {b.provides: destinations[b.path] for b in plan.binaries}
    externals = frozenset(s for e in plan.recipe.externals for s in e.sonames)
    site_dirs = tuple(d for e in plan.recipe.externals for d in e.site_dirs)
    ext_dirs = external_dirs(site_dirs, layout.sitedir, layout.libdir)
    for binary in plan.binaries:
        if plan.owners[binary.path][0] not in packages:
            continue
        dest = destinations[binary.path]
        runpath = runpath_for(binary, dest, targets, ext_dirs, externals)
        # dyld has no default directory for @rpath names: a Mach-O file keeps its LC_RPATHs
        if rpath == Rpath.STRIP and not binary.macho:
            system = posixpath.relpath(layout.libdir, posixpath.dirname(dest) or ".")
            drop = {ORIGIN if system == "." else f"{ORIGIN}/{system}"}
            runpath = tuple(e for e in runpath if e not in drop)
        written[dest] = runpath
    files = {
        dest: root_of(plan.owners[b.path][0]) / dest
        for b in plan.binaries
        if (dest := destinations[b.path]) in written
    }
    current = {destinations[b.path]: b.runpath for b in plan.binaries if b.macho}

    def apply(dest: str) -> None:
        if dest in current:
            set_macho_rpaths(files[dest], current[dest], written[dest])
        else:
            set_runpath(files[dest], written[dest])

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:  # one tool process per file
        list(pool.map(apply, sorted(written)))
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
