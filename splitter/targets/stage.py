"""Stage every package of a plan as an installed FHS tree, relocated and checked.

Shared by the tree target (one DESTDIR per package) and the conda target (prefix `$PREFIX`).
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from splitter.binaries.relocate import compute_runpath, external_dirs, set_runpath
from splitter.binaries.resolve import check_resolved
from splitter.cmake import (
    BASE_DEFINITIONS,
    CONFIG,
    FRAGMENT,
    RUNTIME_COMPONENT,
    VERSION,
    CMakeLayout,
    render_config,
    render_exclusive,
    render_fragment,
    render_pkgconfig,
    render_version,
)
from splitter.errors import SplitterError
from splitter.guard import guard_files
from splitter.layout import Layout, install_path
from splitter.model import BinaryInfo, PackagePlan, Plan
from splitter.report import verdict_json
from splitter.wheel import safe_join

RUNTIME_SONAME = "libexecutorch.so"
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedFile:
    """One installed file: prefix-relative path, where it is on disk, and its mode."""

    path: str
    real: Path
    executable: bool


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
    rpath: str = "relative",
    progress: Progress | None = None,
    guard: bool = False,
) -> Staged:
    """Write each package under `root_of(package)` (the prefix directory), then relocate."""
    if rpath not in ("relative", "strip"):
        raise SplitterError(f"--rpath must be 'relative' or 'strip', not {rpath!r}")
    if rpath == "strip" and not layout.system_libdir():
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
    total = len(destinations)
    with zipfile.ZipFile(plan.wheel.path) as archive:
        for count, (path, dest) in enumerate(sorted(destinations.items()), start=1):
            owner = plan.owners[path][0]
            real = safe_join(root_of(owner), dest)
            make_parents(real)
            if path in replaced:
                real.write_bytes(replaced[path])
            else:
                with archive.open(path) as source, real.open("wb") as target:
                    while chunk := source.read(1 << 20):
                        target.write(chunk)
            executable = entries[path].executable or plan.binary(path) is not None
            staged[owner].append(StagedFile(path=dest, real=real, executable=executable))
            if progress is not None and count % 200 == 0:
                progress("stage", count, total)

    for path, data in added.items():
        owner = plan.owners[posixpath.join(posixpath.dirname(path), "__init__.py")][0]
        dest = install_path(path, layout, plan.wheel.dist_info)
        assert dest is not None
        real = safe_join(root_of(owner), dest)
        real.write_bytes(data)
        staged[owner].append(StagedFile(path=dest, real=real, executable=False))

    for package in plan.packages:
        for dest, text, executable in generated_files(plan, package, layout):
            real = safe_join(root_of(package.name), dest)
            make_parents(real)
            real.write_text(text, encoding="utf-8")
            staged[package.name].append(StagedFile(path=dest, real=real, executable=executable))

    runpaths = relocate(plan, layout, destinations, root_of, rpath)
    union = {f.path: f.real for files in staged.values() for f in files}
    allowed = frozenset(plan.recipe.system_sonames) | frozenset(
        s for e in plan.recipe.externals for s in e.sonames
    )
    default_dirs = (layout.libdir,) if rpath == "strip" else ()
    check_resolved(union, allowed, default_dirs)
    for files in staged.values():
        for item in files:
            item.real.chmod(0o755 if item.executable else 0o644)
            os.utime(item.real, (plan.wheel.timestamp, plan.wheel.timestamp))
    return Staged(
        layout=layout,
        packages={
            name: tuple(sorted(files, key=lambda f: f.path)) for name, files in staged.items()
        },
        runpaths=runpaths,
    )


def make_parents(path: Path) -> None:
    """`mkdir -p` of the parent of `path`, each new directory 0755 whatever the umask: a tree
    staged under umask 077 must not ship 0700 directories."""
    missing = []
    parent = path.parent
    while not parent.is_dir():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(0o755)


def relocate(
    plan: Plan,
    layout: Layout,
    destinations: dict[str, str],
    root_of: Callable[[str], Path],
    rpath: str,
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
        if rpath == "strip":
            system = posixpath.relpath(layout.libdir, posixpath.dirname(dest) or ".")
            drop = {"$ORIGIN" if system == "." else f"$ORIGIN/{system}"}
            runpath = tuple(e for e in runpath if e not in drop)
        set_runpath(root_of(plan.owners[binary.path][0]) / dest, runpath)
        written[dest] = runpath
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


def generated_files(
    plan: Plan, package: PackagePlan, layout: Layout
) -> list[tuple[str, str, bool]]:
    """CMake config, pkg-config and console scripts for one package: (path, text, executable)."""
    out: list[tuple[str, str, bool]] = []
    libraries = library_names(plan)
    providers = {
        c: p.name for p in plan.packages for c in p.cmake_components if c != RUNTIME_COMPONENT
    }
    cmake_layout = CMakeLayout(
        to_libdir=posixpath.relpath(layout.libdir, layout.cmakedir),
        to_includedir=posixpath.relpath(layout.includedir, layout.cmakedir),
        libdir_from_bindir=posixpath.relpath(layout.libdir, layout.bindir),
    )
    for component in package.cmake_components:
        if component == RUNTIME_COMPONENT:
            out.append(
                (
                    f"{layout.cmakedir}/{CONFIG}",
                    render_config(
                        build_version=plan.build_version,
                        runtime_library=libraries[component],
                        runtime_package=package.name,
                        providers=providers,
                        layout=cmake_layout,
                    ),
                    False,
                )
            )
            out.append(
                (
                    f"{layout.cmakedir}/{VERSION}",
                    render_version(plan.wheel.version, plan.build_version),
                    False,
                )
            )
        else:
            out.append(
                (
                    f"{layout.cmakedir}/{FRAGMENT.format(name=component)}",
                    render_fragment(
                        component,
                        libraries[component],
                        package.name,
                        render_exclusive(component, exclusive_pairs(plan, libraries[component])),
                    ),
                    False,
                )
            )
    to_prefix = posixpath.relpath(".", layout.pkgconfigdir)
    if RUNTIME_COMPONENT in package.cmake_components:
        retained = tuple(
            _link_name(libraries[c]) for c in package.cmake_components if c != RUNTIME_COMPONENT
        )
        definitions = BASE_DEFINITIONS + (
            ("ET_USE_THREADPOOL",) if "threadpool" in package.cmake_components else ()
        )
        out.append(
            (
                f"{layout.pkgconfigdir}/executorch.pc",
                render_pkgconfig(
                    name="executorch",
                    description=package.summary,
                    version=plan.wheel.version,
                    to_prefix=to_prefix,
                    libdir=layout.libdir,
                    includedir=layout.includedir,
                    libs=(_link_name(libraries[RUNTIME_COMPONENT]),),
                    retained=retained,
                    definitions=definitions,
                ),
                False,
            )
        )
    elif package.cmake_components:
        out.append(
            (
                f"{layout.pkgconfigdir}/{package.name}.pc",
                render_pkgconfig(
                    name=package.name,
                    description=package.summary,
                    version=plan.wheel.version,
                    to_prefix=to_prefix,
                    libdir=layout.libdir,
                    includedir=layout.includedir,
                    libs=(),
                    retained=tuple(_link_name(libraries[c]) for c in package.cmake_components),
                    requires=f"executorch = {plan.wheel.version}",
                    cflags=False,
                ),
                False,
            )
        )
    if package.python:
        for name, target in plan.wheel.console_scripts:
            out.append(
                (f"{layout.bindir}/{name}", console_script(target, layout.interpreter), True)
            )
    return out


def exclusive_pairs(plan: Plan, library: str) -> list[tuple[str, bool, str, str]]:
    """Verdicts touching the shipped library `library`, in render_exclusive's form."""
    pairs = []
    for verdict in plan.exclusive:
        names = (verdict.first.rsplit("/", 1)[-1], verdict.second.rsplit("/", 1)[-1])
        if library not in names:
            continue
        other = names[1] if names[0] == library else names[0]
        operator = verdict.operators[0] if verdict.operators else ""
        data = json.dumps(verdict_json(verdict), sort_keys=True, separators=(",", ":"))
        pairs.append((other, verdict.in_effect, operator, data))
    return pairs


def library_names(plan: Plan) -> dict[str, str]:
    """CMake component -> library file name, from the recipe and the shipped files."""
    shipped = {p.rsplit("/", 1)[-1] for p in plan.owners if p.startswith("executorch/lib/")}
    return {c.name: c.library for c in plan.recipe.components if c.library in shipped}


def _link_name(library: str) -> str:
    stem = library.split(".so", 1)[0]
    return stem[3:] if stem.startswith("lib") else stem


def console_script(target: str, interpreter: str) -> str:
    """A console-script launcher like pip's, for `module:function`."""
    module, _, function = target.partition(":")
    head = function.split(".")[0]
    return (
        f"#!{interpreter}\n"
        "import sys\n"
        f"from {module} import {head}\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit({function}())\n"
    )


def mode_of(executable: bool) -> int:
    """The normalised permission bits of a staged file."""
    return stat.S_IFREG | (0o755 if executable else 0o644)
