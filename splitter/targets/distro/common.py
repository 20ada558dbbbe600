"""What the deb and rpm targets share: names from the recipe, staging under a root, the cut
of each split package into library and development packages, the documentation files every
distro package carries, and clamped times. A source package redoes the split with the
distribution's tools by replaying the install plan (splitter.targets.replay)."""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import RecipeError, UsageError
from splitter.model import Distro, Limits, PackagePlan, Plan, Rpath, Target
from splitter.plan.facts import arch_of
from splitter.plan.layout import Layout
from splitter.plan.report import exclusivity_record
from splitter.platforms import SupportedPlatform, supported
from splitter.targets.generated.files import SPLIT_FROM
from splitter.targets.generated.guard import guard_files
from splitter.targets.generated.sbom import SbomPackage, slug
from splitter.targets.install import EXECUTABLE, NO_GUARD, make_install_plan
from splitter.targets.stage import Naming, Progress, Staged, StagedFile, apply, doc_sbom

LIBRARY = "library"  # a split package's shared libraries (and everything not development)
DEVELOPMENT = "development"  # its headers, CMake config and pkg-config files
PYTHON = "python"  # a Python package, whole


def distro_limits(target: Target, architecture: Callable[[SupportedPlatform], str]) -> Limits:
    """What a .deb or .rpm build refuses: a platform with no `architecture` in the
    distribution, and several Pythons of one platform (a distribution has one python3)."""
    return Limits(
        target=target,
        platforms=frozenset(p.subdir for p in supported() if architecture(p)),
        one_python_per_platform=True,
        advice="give a manylinux wheel, or use --target wheel or conda for this platform",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DistroPackage:
    """One binary package of the deb or rpm target, cut from a split package: a package with
    headers, CMake config or pkg-config files gets a development package holding them (Debian
    policy 8.4, Fedora's -devel), so that a device image installs only what runs."""

    name: str  # the distro's name: libexecutorch, libexecutorch-dev, python3-executorch
    package: PackagePlan  # the split package it comes from
    role: str  # LIBRARY, DEVELOPMENT or PYTHON
    files: tuple[StagedFile, ...]
    requires: tuple[str, ...]  # packages of the split it needs at exactly this version
    development: str = ""  # a library package's development package, where it has one

    @property
    def libraries(self) -> bool:
        """Whether it holds public shared libraries (in the libdir), not just modules."""
        return self.role == LIBRARY and bool(self.package.sonames)


def across_arches(
    parts: Iterable[tuple[str, Iterable[DistroPackage]]],
) -> dict[str, tuple[DistroPackage, list[str]]]:
    """Each binary package of a release (architecture, its packages), in build order, with
    the architectures that have it (the first architecture's package stands for all)."""
    found: dict[str, tuple[DistroPackage, list[str]]] = {}
    for arch, packages in parts:
        for package in packages:
            found.setdefault(package.name, (package, []))[1].append(arch)
    return found


def development_dirs(layout: Layout) -> tuple[str, ...]:
    """The prefix-relative directories whose files go into development packages."""
    return (f"{layout.includedir}/", f"{layout.cmakedir}/", f"{layout.pkgconfigdir}/")


def distro_packages(plan: Plan, staged: Staged, distro: Distro) -> list[DistroPackage]:
    """Each split package as the distro ships it: a Python package whole; any other as its
    library package and, when it has development files, its development package, which
    needs the library package and the development packages of the library's dependencies.
    A library or Python package needs the library packages of its dependencies, never a
    development package."""
    names = dict(distro.names)
    dev_names = dict(distro.dev_names)
    dirs = development_dirs(staged.layout)
    development = {
        p.name: ()
        if p.python
        else tuple(f for f in staged.packages[p.name] if f.path.startswith(dirs))
        for p in plan.packages
    }
    out = []
    for package in plan.packages:
        files = staged.packages[package.name]
        dev = development[package.name]
        libraries = tuple(names[d.name] for d in package.depends)
        role = PYTHON if package.python else LIBRARY
        if not dev:
            out.append(
                DistroPackage(
                    name=names[package.name],
                    package=package,
                    role=role,
                    files=files,
                    requires=libraries,
                )
            )
            continue
        moved = set(dev)
        out.append(
            DistroPackage(
                name=names[package.name],
                package=package,
                role=LIBRARY,
                files=tuple(f for f in files if f not in moved),
                requires=libraries,
                development=dev_names[package.name],
            )
        )
        out.append(
            DistroPackage(
                name=dev_names[package.name],
                package=package,
                role=DEVELOPMENT,
                files=dev,
                requires=(
                    names[package.name],
                    *(dev_names[d.name] for d in package.depends if development[d.name]),
                ),
            )
        )
    return out


def cmake_names(plan: Plan, distro: Distro) -> dict[str, str]:
    """The package the generated CMake config tells users to install for a split package's
    component: its development package, which holds every CMake file (a Python package has
    none, and keeps its name)."""
    names = dict(distro.names)
    dev_names = dict(distro.dev_names)
    return {p.name: names[p.name] if p.python else dev_names[p.name] for p in plan.packages}


def origin_sentence(plan: Plan, record: str) -> str:
    """Where the packages come from, in words that are the same for every architecture (a
    Multi-Arch: same package's copyright and changelog must be): the upstream release and
    Python, and where the wheel of each architecture is named."""
    major, minor = plan.platform.python
    return (
        f"{SPLIT_FROM} upstream's {plan.wheel.name} {plan.wheel.version} wheel for CPython "
        f"{major}.{minor} of each architecture; {record} in the documentation of the library "
        "and Python packages names that wheel and its sha256."
    )


def distro_of(plan: Plan, kind: str) -> Distro:
    """The recipe's [deb] or [rpm] table; a recipe without it cannot name the packages."""
    distro = plan.recipe.deb if kind == "deb" else plan.recipe.rpm
    if distro is None:
        raise RecipeError(
            f"the recipe has no [{kind}] table (--target {kind} needs the revision and a "
            f"{kind} name for each package): {plan.recipe.path}\n"
            f'add [{kind}] with {"revision" if kind == "deb" else "release"} = "1" and '
            f"[{kind}.names] mapping {', '.join(p.name for p in plan.packages)}"
        )
    return distro


def external_requirements(plan: Plan, package: PackagePlan, kind: str) -> list[str]:
    """The package's externals in deb or rpm spelling; an external the recipe does not map
    for this ecosystem is an error, never dropped."""
    by_name = {e.name: e for e in plan.recipe.externals}
    missing = []
    found = []
    for dep in package.externals:
        value = by_name[dep.name].deb if kind == "deb" else by_name[dep.name].rpm
        if value:
            found.append(value)
        else:
            missing.append(dep.name)
    if missing:
        raise RecipeError(
            f"{package.name} links against {', '.join(missing)}, which the recipe does not "
            f"map for {kind} (externals.{missing[0]}.{kind} is missing): {plan.recipe.path}\n"
            f'add {kind} = "<dependency>" under [externals.{missing[0]}]'
        )
    return found


def stage_under(
    plan: Plan,
    layout: Layout,
    roots: Mapping[str, Path],
    progress: Progress | None,
    guard: bool,
    names: Mapping[str, str],
    library_mode: int = EXECUTABLE,
    sbom: Naming | None = None,
) -> Staged:
    """Stage every package of the plan as installed under `roots[name]` + the prefix, with
    no RUNPATH where the libdir is the system's (Debian policy, Fedora's check-rpaths); the
    CMake config names the distro packages; shared objects get `library_mode`
    (splitter.targets.install.make_install_plan)."""
    prefix = layout.prefix.strip("/")
    guarded = guard_files(plan) if guard else NO_GUARD
    install = make_install_plan(
        plan, layout, Rpath.STRIP, guarded, names=names, library_mode=library_mode
    )
    return apply(plan, install, lambda name: roots[name] / prefix, progress, sbom=sbom)


def sbom_naming(plan: Plan, distro: Distro, kind: str) -> Naming:
    """Each split package's SBOMs as the distro ships them: named and purl'd as its library (or
    Python) package, which holds them; in Debian under an architecture's own name, as
    Multi-Arch: same packages of two architectures must not ship one path with two contents.

    The purl's namespace is the packager's (the maintainer's name, slugged), not a distro's:
    purl reads pkg:deb/debian/... as a package Debian built and ships (and pkg:rpm/fedora/...
    as Fedora's), which these are not; a scanner looking one up in Debian's archive or
    security tracker would match another package of the same name."""
    names = dict(distro.names)
    version = f"{plan.wheel.version}-{distro.revision}"
    arch = arch_of(plan)
    vendor = slug(distro.maintainer.partition("<")[0]) or slug(plan.recipe.project)

    def naming(package: str) -> tuple[SbomPackage, str]:
        name = names[package]
        if kind == "deb":
            purl = f"pkg:deb/{vendor}/{name}@{version}?arch={arch.deb}"
            subject = SbomPackage(package=package, name=name, version=version, purl=purl)
            return subject, f"share/doc/{name}/sbom-{arch.deb}.cdx.json"
        purl = f"pkg:rpm/{vendor}/{name}@{version}?arch={arch.rpm}"
        return doc_sbom(package, name, version, purl)

    return naming


def record_json(plan: Plan, package: PackagePlan, name: str, development: str = "") -> str:
    """The exclusivity record a distro package ships, under its distro name too, and the
    name of the development package that holds the split package's CMake files."""
    record = exclusivity_record(plan, package)
    record["distro_package"] = name
    if development:
        record["development_package"] = development
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def exclusivity_sentence(plan: Plan, package: PackagePlan, path: str) -> str:
    """One sentence for the description: which pairs the record lists and their verdicts."""
    pairs = [v for v in plan.exclusive if package.name in (v.first_package, v.second_package)]
    if not pairs:
        return f"The process-exclusivity record {path} lists no pair for this package."
    states = "; ".join(f"{v.first} with {v.second}: {v.state}" for v in pairs)
    return (
        f"The process-exclusivity record {path} says which files must not share a process "
        f"({states}); installing both packages is fine either way."
    )


def clamp_times(root: Path, epoch: int) -> None:
    """Every file and directory under `root` (itself too) gets mtime `epoch`, deepest first,
    so that the archives do not carry the build's wall clock."""
    for directory, subdirs, files in os.walk(root, topdown=False):
        for name in files + subdirs:
            os.utime(os.path.join(directory, name), (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))


def has_bare_executable(files: Sequence[StagedFile]) -> bool:
    """Whether the files hold an executable that is neither ELF nor has a #! line (the x86_64
    1.5.1 wheel has one, the aarch64 wheel none): the linters' overrides for it are written
    only when it is there, since an unused override is itself reported."""
    return any(not head.startswith((b"\x7fELF", b"#!")) for head in _executable_heads(files))


def has_env_script(files: Sequence[StagedFile]) -> bool:
    """Whether the files hold an executable script run through /usr/bin/env (the x86_64 1.5.1
    wheel has 21, the aarch64 wheel none executable); see has_bare_executable."""
    return any(
        head.replace(b" ", b"").startswith(b"#!/usr/bin/env") for head in _executable_heads(files)
    )


def _executable_heads(files: Sequence[StagedFile]) -> list[bytes]:
    heads = []
    for item in files:
        if item.executable:
            with open(item.real, "rb") as handle:
                heads.append(handle.read(32))
    return heads


def release_epoch(plans: Sequence[Plan]) -> int:
    """The one time of a release's distro packages (changelog, mtimes): its newest wheel's,
    so that the packages of every architecture say the same."""
    return max(p.wheel.timestamp for p in plans)


def covering_paths(
    arches: Mapping[str, Mapping[str, Sequence[str]]],
    may_cover: Callable[[str, str], bool] = lambda directory, package: True,
) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """For each package, the fewest paths that cover exactly its files: a directory whose
    every file, in every architecture, is the package's (and that `may_cover(directory,
    package)` allows) stands for all of them. `arches` maps architecture -> package -> paths,
    written the same in every architecture; each path comes with the architectures that
    have it (all of them when it is everywhere). A source package's file lists (debhelper's
    .install, RPM's %files) are made of these lines."""
    owner: dict[str, str] = {}
    where: dict[str, set[str]] = {}
    for arch, packages in arches.items():
        for name, paths in packages.items():
            for path in paths:
                previous = owner.setdefault(path, name)
                if previous != name:
                    raise UsageError(
                        f"{path} is in {previous} on one architecture and in {name} on "
                        f"{arch}\nmake the recipe's rules give it one package on every platform"
                    )
                where.setdefault(path, set()).add(arch)
    owners_under: dict[str, set[str]] = {}
    arches_under: dict[str, set[str]] = {}
    for path, name in owner.items():
        parent = posixpath.dirname(path)
        while parent not in ("", "/"):  # relative (usr/lib) or absolute (/usr/lib) paths
            owners_under.setdefault(parent, set()).add(name)
            arches_under.setdefault(parent, set()).update(where[path])
            parent = posixpath.dirname(parent)
    lines: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for path, name in owner.items():
        chosen, found = path, where[path]
        ancestors = []
        parent = posixpath.dirname(path)
        while parent not in ("", "/"):
            ancestors.append(parent)
            parent = posixpath.dirname(parent)
        for directory in reversed(ancestors):  # the highest first
            if owners_under[directory] == {name} and may_cover(directory, name):
                chosen, found = directory, arches_under[directory]
                break
        lines.setdefault(name, set()).add((chosen, tuple(sorted(found))))
    return {name: sorted(entries) for name, entries in lines.items()}
