"""The RPM spec of a build (pure text), self-contained: Source0 is the upstream
wheel (one Source per architecture in a release), checked against its sha256 in %prep; %install
runs install-split (splitter.targets.replay) with the install plan splitter staged, as a list
and the generated files, further Sources; one binary package per library, development and
Python package, rpm's own generators for the ELF dependencies. `rpmbuild --rebuild` of the
.src.rpm, offline, gives the packages splitter builds from it."""

from __future__ import annotations

import posixpath
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass

from splitter.model import Distro, Plan
from splitter.plan import declared
from splitter.plan.conclude import join_all
from splitter.plan.layout import Layout, install_path
from splitter.plan.licences import UNKNOWN
from splitter.plan.report import RECORD
from splitter.platforms import SupportedPlatform
from splitter.targets.distro.common import (
    DEVELOPMENT,
    PYTHON,
    DistroPackage,
    across_arches,
    covering_paths,
    exclusivity_sentence,
    external_requirements,
    has_bare_executable,
    has_env_script,
    origin_sentence,
)
from splitter.targets.distro.debmeta import moved_sentence, synopsis
from splitter.targets.generated.files import SPLIT_FROM
from splitter.targets.stage import parents, standard_dirs

# Macros every build of the spec needs, whoever runs it: upstream's binaries are shipped as
# split (RUNPATHs edited, nothing else), so nothing strips, byte-compiles or splits debug info,
# and the build is reproducible from SOURCE_DATE_EPOCH.
SPEC_MACROS = (
    ("debug_package", "%{nil}"),
    ("__strip", "/bin/true"),
    ("__os_install_post", "%{nil}"),
    ("_build_id_links", "none"),
    # SOURCE_DATE_EPOCH from the %changelog's date where the builder sets none (rpmbuild
    # --rebuild): splitter sets that same time, so a rebuild gives the same bytes
    ("source_date_epoch_from_changelog", "1"),
    ("use_source_date_epoch_as_buildtime", "1"),
    ("clamp_mtime_to_source_date_epoch", "1"),
    ("_buildhost", "reproducible"),
    ("_binary_payload", "w3.zstdio"),  # zstd level 3, one thread: depends on nothing else
    ("_source_payload", "w3.zstdio"),
    # rpm's Python dist generator reads the dist-info with whatever `packaging` the build
    # machine's /usr/bin/python3 has (Debian's has none: it fails and adds nothing), so its
    # output would depend on the machine. The Python requirements stay in the shipped METADATA.
    ("__pythondist_provides", "%{nil}"),
    ("__pythondist_requires", "%{nil}"),
)


# rpmlint errors the packages keep, each (package role, check, reason); written as the
# rpmlintrc beside the spec. rpmlint reports a filter that matches nothing
# (unused-rpmlintrc-filter), so the list cannot drift silently. Roles: "library" (a package
# holding public shared libraries), "python" (a package the recipe marks python), "any".
RPMLINT_FILTERS = (
    ("any", "no-signature", "the packages are signed by whoever publishes them (rpmsign)"),
    (
        "library",
        "invalid-soname",
        "upstream's sonames carry no version (libexecutorch.so); splitter ships upstream's "
        "binaries and does not invent a soname",
    ),
    (
        "library",
        "non-versioned-file-in-library-package",
        "upstream's sonames carry no version, so the library package's name has none "
        "(no libexecutorch1); its licence and exclusivity record stay with the libraries, "
        "the headers, CMake and pkg-config files are in the -devel package",
    ),
    (
        "library",
        "missing-hash-section",
        "upstream links with GNU hash only (--hash-style=gnu); the binaries are shipped as built",
    ),
    (
        "python",
        "non-executable-script",
        "upstream modules keep their #! line but are imported, not run; kept as in the wheel",
    ),
    (
        "python",
        "env-script-interpreter",
        "upstream scripts call /usr/bin/env python3; kept byte for byte as in the wheel",
    ),
    (
        "python",
        "script-without-shebang",
        "upstream ships this helper executable without a #! line; kept as in the wheel",
    ),
    (
        "python",
        "files-duplicated-waste",
        "upstream's wheel holds identical files at several paths (tests and examples, which "
        "12 modules import); each stays where upstream imports it from",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecArch:
    """One architecture's part of the spec: its wheel and the Sources install-split reads
    (by file name: its list and the generated files' tar), its packages with their installed
    paths, and the linter facts read from the staged files (which are gone by the time the
    spec is written)."""

    arch: SupportedPlatform
    plan: Plan
    layout: Layout
    wheel: str  # the Source file names
    list: str
    generated: str
    licences: Mapping[str, tuple[str, ...]]  # package -> its licence texts' file names
    packages: tuple[tuple[DistroPackage, tuple[str, ...]], ...]  # package, its /usr paths
    bare: frozenset[str]  # packages with an executable neither ELF nor script
    env: frozenset[str]  # packages with a script run through /usr/bin/env


def spec_arch(
    plan: Plan,
    arch: SupportedPlatform,
    layout: Layout,
    packages: list[DistroPackage],
    sources: tuple[str, str, str],
    licences: Mapping[str, tuple[str, ...]],
) -> SpecArch:
    """The architecture's part of the spec, read while its staged files exist."""
    root = "/" + layout.prefix.strip("/")
    return SpecArch(
        arch=arch,
        plan=plan,
        layout=layout,
        wheel=sources[0],
        list=sources[1],
        generated=sources[2],
        licences=licences,
        packages=tuple((p, tuple(posixpath.join(root, f.path) for f in p.files)) for p in packages),
        bare=frozenset(p.name for p in packages if has_bare_executable(p.files)),
        env=frozenset(p.name for p in packages if has_env_script(p.files)),
    )


def rpmlintrc(arches: list[SpecArch]) -> str:
    """The rpmlintrc of the packages: each kept error filtered after a comment with its
    reason, only where it applies (rpmlint reports a filter that matches nothing)."""
    first = arches[0].plan
    lines = [f"# rpmlint filters for the {first.recipe.project} packages split by splitter"]
    packages = _packages(arches)
    for role, check, reason in RPMLINT_FILTERS:
        for name, (package, _) in packages.items():
            if check == "script-without-shebang" and not any(name in a.bare for a in arches):
                continue
            if check == "env-script-interpreter" and not any(name in a.env for a in arches):
                continue
            if (
                role == "any"
                or (role == "python" and package.role == PYTHON)
                or (role == "library" and package.libraries)
            ):
                pattern = name.replace(".", "\\.").replace("+", "\\+")
                lines += [f"# {reason}", f'addFilter("^{pattern}\\.[^:]+: E: {check}( |$)")']
    return "\n".join(lines) + "\n"


def spec_name(plan: Plan) -> str:
    """The spec's Name: the project (the source package of every binary package)."""
    return plan.recipe.project


def _packages(arches: list[SpecArch]) -> dict[str, tuple[DistroPackage, list[str]]]:
    """Each binary package, in build order, with the architectures having it."""
    return across_arches((a.arch.machine, (p for p, _ in a.packages)) for a in arches)


def render_spec(arches: list[SpecArch], distro: Distro, install_split: str) -> str:
    """The spec of a release's Linux wheels (one per architecture)."""
    first = arches[0].plan
    name = spec_name(first)
    machines = [a.arch.machine for a in arches]
    lines = [
        f"# Generated by splitter from {', '.join(a.plan.wheel.filename for a in arches)}.",
        "# Self-contained: rpmbuild --rebuild the .src.rpm (BuildRequires: unzip, patchelf).",
        "",
        *(f"%global {key} {value}" for key, value in SPEC_MACROS),
        "",
        f"Name: {name}",
        f"Version: {first.wheel.version}",
        f"Release: {distro.revision}",
        f"Packager: {distro.maintainer}",
        # the main package's licence (the header's is its own), else every package's
        f"License: {_licence(arches, name if name in _packages(arches) else None)}",
    ]
    if first.wheel.home:
        lines.append(f"URL: {first.wheel.home}")
    lines.append(f"ExclusiveArch: {' '.join(machines)}")
    sources = [a.wheel for a in arches] + [install_split]
    sources += [s for a in arches for s in (a.list, a.generated)]
    number = {source: index for index, source in enumerate(sources)}
    lines += [f"Source{index}: {source}" for index, source in enumerate(sources)]
    lines += ["BuildRequires: unzip", "BuildRequires: patchelf"]
    packages = _packages(arches)
    # The package named like the spec is the main one: its Summary and %description are the
    # spec's own; without one, the spec's come from the wheel (and no main package is built).
    if name not in packages:
        summary = synopsis(first.wheel.summary or name)
        lines += [f"Summary: {summary}", "", "%description", _wrap(summary), ""]
    order = sorted(packages, key=lambda n: n != name)
    for package_name in order:
        package, where = packages[package_name]
        lines += _package_section(arches, package, where, machines, name)
    lines += ["%prep", "%setup -q -c -T"]
    for item in arches:
        lines += [
            f"%ifarch {item.arch.machine}",
            f'echo "{item.plan.wheel.sha256}  %{{SOURCE{number[item.wheel]}}}" '
            "| sha256sum --check --strict -",
            f"unzip -q %{{SOURCE{number[item.wheel]}}} -d wheel",
            "mkdir generated",
            f"tar -xf %{{SOURCE{number[item.generated]}}} -C generated",
            "%endif",
        ]
    lines += ["", "%build", "", "%install"]
    for item in arches:
        lines += [
            f"%ifarch {item.arch.machine}",
            f"sh %{{SOURCE{number[install_split]}}} wheel %{{SOURCE{number[item.list]}}} "
            "generated %{buildroot}",
            "%endif",
        ]
    lines.append("")
    for package_name in order:
        lines += _files_section(arches, packages[package_name][0], name)
    lines += ["%changelog", *changelog(first, distro, arches)]
    return "\n".join(lines) + "\n"


def _suffix(rpm_name: str, spec: str) -> str:
    """`-n name` for a subpackage; nothing for the package the spec itself names."""
    return "" if rpm_name == spec else f" -n {rpm_name}"


def _licence(arches: list[SpecArch], rpm_name: str | None) -> str:
    """The SPDX expression of binary package `rpm_name` (None: of every package) in every
    architecture: the project's and the concluded licence of each file it holds
    (splitter.plan.conclude), in any architecture's wheel; a generated file is the project's."""
    first = arches[0].plan
    found = [first.wheel.license or UNKNOWN]
    for item in arches:
        concluded = {f.path: f.concluded for f in item.plan.licences}
        # a file staged from other bytes than its wheel member's (the guard's) is still that
        # member's code: its installed path names it
        member = {
            dest: path
            for path in item.plan.owners
            if (dest := install_path(path, item.layout, item.plan.wheel.dist_info)) is not None
        }
        for package, _ in item.packages:
            if rpm_name not in (None, package.name):
                continue
            for staged in package.files:
                path = staged.source or member.get(staged.path, "")
                if path in concluded:
                    found.append(concluded[path])
    return join_all(found)


def _package_section(
    arches: list[SpecArch],
    package: DistroPackage,
    where: list[str],
    machines: list[str],
    spec: str,
) -> list[str]:
    plan = arches[0].plan
    lines = []
    if package.name != spec:
        lines.append(f"%package -n {package.name}")
    if package.role == DEVELOPMENT:
        summary = f"{package.requires[0]} development files: headers, CMake and pkg-config"
        group = "Development/Libraries"
    else:
        summary = synopsis(package.package.summary)
        group = "Development/Languages/Python" if package.role == PYTHON else "System/Libraries"
    lines += [f"Summary: {summary}", f"Group: {group}"]
    if package.name != spec:  # Fedora: each subpackage states the licences of its code
        lines.append(f"License: {_licence(arches, package.name)}")
    if where != machines:
        lines.append(f"ExclusiveArch: {' '.join(where)}")
    # %{?_isa}: the sibling of this package's own architecture, as on a multilib system
    lines += [f"Requires: {r}%{{?_isa}} = %{{version}}-%{{release}}" for r in package.requires]
    if package.role != DEVELOPMENT:
        lines += [f"Requires: {r}" for r in external_requirements(plan, package.package, "rpm")]
    record = f"/usr/share/doc/{package.name}/{RECORD}"
    origin = origin_sentence(plan, RECORD)
    if package.role == DEVELOPMENT:
        text = (
            f"The headers, the CMake package config (find_package(executorch)) and the "
            f"pkg-config files of {package.requires[0]}: what building against it needs. {origin}"
        )
    else:
        text = " ".join(
            t
            for t in (
                f"{package.package.summary}.",
                moved_sentence(package),
                origin,
                exclusivity_sentence(plan, package.package, record),
            )
            if t
        )
    lines += ["", f"%description{_suffix(package.name, spec)}", _wrap(text), ""]
    return lines


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, width=79, break_long_words=False, break_on_hyphens=False))


def _files_section(arches: list[SpecArch], package: DistroPackage, spec: str) -> list[str]:
    """%files: the fewest paths that are exactly the package's files, a directory standing
    for its files where the package creates it (no dependency or standard directory: those
    stay unowned, as before), %dir for the other directories it creates, the licence and the
    exclusivity record; lines only some architectures have in %ifarch."""
    listed: dict[str, dict[str, list[str]]] = {}
    mine: dict[str, set[str]] = {}
    for item in arches:
        paths = {p.name: list(files) for p, files in item.packages}
        listed[item.arch.machine] = paths
        taken = _standard_dirs(item.layout)
        for dependency in package.requires:
            taken |= {d for path in paths.get(dependency, []) for d in parents(path)}
        own = {d for path in paths.get(package.name, []) for d in parents(path)} - taken
        mine[item.arch.machine] = own
    everywhere = tuple(sorted(a.arch.machine for a in arches))
    entries = covering_paths(
        listed, lambda directory, name: all(directory in m for m in mine.values())
    )[package.name]
    covered = {path for path, _ in entries}
    lines = [f"%files{_suffix(package.name, spec)}", "%defattr(-,root,root,-)"]
    # a licence text only some architectures' binaries need (KleidiAI: aarch64) in %ifarch
    texts: dict[str, list[str]] = {}
    for item in arches:
        for text in item.licences.get(package.name, ()):
            texts.setdefault(text, []).append(item.arch.machine)
    by_arch: dict[tuple[str, ...], list[str]] = {}
    for text, machines_of in sorted(texts.items()):
        line = f"%license %{{_licensedir}}/{package.name}/{text}"
        by_arch.setdefault(tuple(sorted(machines_of)), []).append(line)
    if package.role != DEVELOPMENT:
        lines.append(f"%doc %{{_docdir}}/{package.name}/{RECORD}")
    else:  # its list of undeclared functions, on the architectures whose libraries have some
        having = tuple(
            sorted(
                item.arch.machine
                for item in arches
                for p, _ in item.packages
                if p.name == package.name and p.package.undeclared
            )
        )
        if having:
            line = f"%doc %{{_docdir}}/{package.name}/{declared.doc_name()}"
            by_arch.setdefault(having, []).append(line)
    own_dirs = {d for m in mine.values() for d in m}
    dirs = sorted(d for d in own_dirs if not any(d == c or d.startswith(c + "/") for c in covered))
    for directory in dirs:
        found = tuple(sorted(a for a, m in mine.items() if directory in m))
        by_arch.setdefault(found, []).append(f'%dir "{directory}"')
    for path, found in entries:
        by_arch.setdefault(found, []).append(f'"{path}"')
    lines += by_arch.pop(everywhere, [])
    for found, group in sorted(by_arch.items()):
        lines += [f"%ifarch {' '.join(found)}", *group, "%endif"]
    return [*lines, ""]


def _standard_dirs(layout: Layout) -> set[str]:
    """The layout's standard directories (stage.standard_dirs) as absolute paths."""
    root = "/" + layout.prefix.strip("/")
    return {root, *parents(root)} | {posixpath.join(root, d) for d in standard_dirs(layout)}


def changelog_epoch(plans: list[Plan]) -> int:
    """The time of the packages: the start (UTC) of the day of the newest wheel, which the
    %changelog names, so that source_date_epoch_from_changelog gives the same time."""
    newest = max(p.wheel.timestamp for p in plans)
    return newest - newest % 86400


def changelog(plan: Plan, distro: Distro, arches: list[SpecArch]) -> list[str]:
    """One %changelog entry, dated by the newest wheel of the release."""
    epoch = changelog_epoch([a.plan for a in arches])
    date = time.strftime("%a %b %d %Y", time.gmtime(epoch))
    wheels = ", ".join(a.plan.wheel.filename for a in arches)
    return [
        f"* {date} {distro.maintainer} - {plan.wheel.version}-{distro.revision}",
        f"- {SPLIT_FROM} {wheels}",
    ]
