"""The Debian source package of a `--target deb` build, which rebuilds the split with
Debian's tools alone: format 3.0 (quilt), the upstream wheel of each architecture in the
orig tarball, and debian/ with debhelper rules that unzip the wheel of the architecture being
built and put each file where the binary packages have it: install-split replays the install
plan splitter staged (splitter.targets.replay: the list of each architecture, the generated
files, patchelf for the RUNPATHs). `dpkg-source -x` then
`dpkg-buildpackage -b` builds the same packages with the same files, offline, on Launchpad
or in a clean chroot; dpkg-source itself writes the .dsc and the debian tarball
(reproducible from SOURCE_DATE_EPOCH, the changelog's date)."""

from __future__ import annotations

import posixpath
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import UsageError
from splitter.model import Plan
from splitter.plan.layout import Layout
from splitter.plan.report import record_name
from splitter.platforms import SupportedPlatform
from splitter.targets.archive import reproducible_tar_gz
from splitter.targets.distro import debmeta, dep5
from splitter.targets.distro.common import (
    DEVELOPMENT,
    DistroPackage,
    across_arches,
    covering_paths,
    distro_of,
    external_requirements,
    origin_sentence,
)
from splitter.targets.install import InstallFile, InstallPlan
from splitter.targets.replay import Replay, install_split, render_replay
from splitter.tools import need_tool, run_tool

FORMAT = "3.0 (quilt)"
STANDARDS = "4.6.2"  # the Debian Policy version lintian 2.116 (Debian 12) knows
COMPAT = "13"  # debhelper-compat: ${DEB_HOST_MULTIARCH} in .install files, dh_missing
MULTIARCH = "${DEB_HOST_MULTIARCH}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchSource:
    """What the source package needs of one architecture's build, taken before its staging
    is removed: the packages and the installed paths each holds, and install-split's list
    and generated files (the install plan's, and the exclusivity records and lintian
    overrides the .debs carry)."""

    arch: SupportedPlatform
    plan: Plan
    packages: tuple[tuple[DistroPackage, tuple[str, ...]], ...]  # package, its root paths
    replay: Replay


def arch_source(
    plan: Plan,
    arch: SupportedPlatform,
    layout: Layout,
    packages: list[DistroPackage],
    install: InstallPlan,
) -> ArchSource:
    """The architecture's part of the source package: the install plan the .debs were
    staged from, and the .deb's own documentation files (debmeta.package_docs, which read
    the staged files) as generated files."""
    prefix = layout.prefix.strip("/")
    added = []
    owned = []
    for package in packages:
        paths = [posixpath.join(prefix, f.path) for f in package.files]
        for path, data in debmeta.package_docs(plan, package, arch.deb):
            relative = posixpath.relpath(path, prefix)
            added.append(InstallFile(package=package.package.name, path=relative, data=data))
            paths.append(path)
        owned.append((package, tuple(sorted(paths))))
    replay = render_replay([*install.files, *added], prefix)
    return ArchSource(arch=arch, plan=plan, packages=tuple(owned), replay=replay)


def write_source_package(arches: list[ArchSource], build: Path, epoch: int) -> list[str]:
    """Write <source>_<version>.orig.tar.gz, .debian.tar.xz and .dsc into `build`; returns
    their names."""
    dpkg_source = need_tool("dpkg-source", "dpkg-dev")
    first = arches[0].plan
    distro = distro_of(first, "deb")
    source = first.recipe.project
    upstream = first.wheel.version
    version = f"{upstream}-{distro.revision}"
    scratch = Path(tempfile.mkdtemp(prefix=".debsrc-", dir=build))
    try:
        tree = scratch / f"{source}-{upstream}"
        tree.mkdir()
        for item in arches:
            shutil.copyfile(item.plan.wheel.path, tree / item.plan.wheel.filename)
        orig = f"{source}_{upstream}.orig.tar.gz"
        _orig_tarball(scratch / orig, tree, [a.plan for a in arches], epoch)
        _write_debian(tree / "debian", arches, epoch)
        run_tool(
            "dpkg-source could not build the source package",
            [dpkg_source, "--build", tree.name],
            cwd=scratch,
            env={"SOURCE_DATE_EPOCH": str(epoch)},
        )
        names = [orig, f"{source}_{version}.debian.tar.xz", f"{source}_{version}.dsc"]
        for name in names:
            shutil.move(scratch / name, build / name)
    finally:
        shutil.rmtree(scratch)
    return names


def _orig_tarball(path: Path, tree: Path, plans: list[Plan], epoch: int) -> None:
    """The orig tarball: <source>-<version>/ holding each architecture's wheel, byte for
    byte as upstream published it; sorted, owned by root, dated `epoch`, gzip without name
    or time, so that it is the same whoever builds it."""
    with reproducible_tar_gz(path, 6) as tar:
        top = tarfile.TarInfo(tree.name)
        top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, epoch
        tar.addfile(top)
        for plan in sorted(plans, key=lambda p: p.wheel.filename):
            info = tarfile.TarInfo(f"{tree.name}/{plan.wheel.filename}")
            info.mode, info.mtime = 0o644, epoch
            info.size = (tree / plan.wheel.filename).stat().st_size
            with open(tree / plan.wheel.filename, "rb") as handle:
                tar.addfile(info, handle)


def _write_debian(debian: Path, arches: list[ArchSource], epoch: int) -> None:
    """debian/: control, rules, changelog, copyright, source/format, the .install,
    .triggers and symbols files, install-split with each architecture's list, and the
    generated files of each architecture."""
    first = arches[0].plan
    distro = distro_of(first, "deb")
    version = f"{first.wheel.version}-{distro.revision}"
    origin = origin_sentence(first, record_name("<arch>"))
    files: dict[str, str] = {
        "source/format": f"{FORMAT}\n",
        "source/lintian-overrides": (
            "# debian/<package>.copyright (dh_installdocs installs it as that package's\n"
            "# copyright) names the files the binary package installs, not source files.\n"
            f"{first.recipe.project} source: superfluous-file-pattern\n"
        ),
        "changelog": debmeta.changelog_text(
            first.recipe.project, version, distro.maintainer, epoch, origin
        ),
        "copyright": dep5.copyright_file([a.plan for a in arches], None, origin),
        "control": _control(arches),
        "rules": _rules(arches),
        "clean": "debian/wheel/\n",
        "wheels.sha256": "".join(
            f"{a.plan.wheel.sha256}  {a.plan.wheel.filename}\n"
            for a in sorted(arches, key=lambda a: a.plan.wheel.filename)
        ),
        "install-split": install_split(),
    }
    for item in arches:
        files[f"split/{item.arch.deb}.list"] = item.replay.list
    plans = [a.plan for a in arches]
    for name, (package, _) in _packages(arches).items():
        # dh_installdocs installs debian/<package>.copyright as that package's copyright
        files[f"{name}.copyright"] = dep5.copyright_file(
            plans, package.package.name, origin, package.role
        )
        if package.libraries:
            files[f"{name}.triggers"] = debmeta.LDCONFIG_TRIGGER
            files[f"shlibs/{name}.symbols"] = debmeta.symbols(
                package.package.sonames, name, f"{name} (= {version})"
            )
    executable = {"rules"}
    for name, text in _install_files(arches).items():
        files[f"{name}.install"] = text
        if text.startswith("#!"):
            executable.add(f"{name}.install")
    for relative, text in sorted(files.items()):
        path = debian / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if relative in executable else 0o644)
    for item in arches:
        for installed, data, is_executable in item.replay.generated:
            path = debian / "generated" / item.arch.deb / installed
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(0o755 if is_executable else 0o644)


def _packages(arches: list[ArchSource]) -> dict[str, tuple[DistroPackage, list[str]]]:
    """Each binary package, in build order, with the architectures having it."""
    return across_arches((a.arch.deb, (p for p, _ in a.packages)) for a in arches)


def _control(arches: list[ArchSource]) -> str:
    """debian/control: the source stanza, then one stanza per binary package, whose
    Depends are the binary package's with debhelper's substitutions for what it computes."""
    plan = arches[0].plan
    distro = distro_of(plan, "deb")
    tools = [f"debhelper-compat (= {COMPAT})", "patchelf", "unzip"]
    if any(line.startswith("#!") for line in _install_files(arches).values()):
        tools.insert(1, "dh-exec")
    lines = [
        f"Source: {plan.recipe.project}",
        "Section: libs",
        "Priority: optional",
        f"Maintainer: {distro.maintainer}",
        f"Build-Depends: {', '.join(tools)}",
        f"Standards-Version: {STANDARDS}",
        "Rules-Requires-Root: no",
    ]
    if plan.wheel.home:
        lines.append(f"Homepage: {plan.wheel.home}")
    for name, (package, where) in _packages(arches).items():
        depends = ["${misc:Depends}"]
        if package.role != DEVELOPMENT:
            depends.insert(0, "${shlibs:Depends}")
        depends += [f"{r} (= ${{binary:Version}})" for r in package.requires]
        if package.role != DEVELOPMENT:
            depends += external_requirements(plan, package.package, "deb")
            depends += debmeta.python_depends(plan, package.package)
        lines += ["", f"Package: {name}", f"Architecture: {' '.join(where)}"]
        if multi := debmeta.multi_arch(package):
            lines.append(f"Multi-Arch: {multi}")
        if debmeta.SECTIONS[package.role] != "libs":  # the source's, which it inherits
            lines.append(f"Section: {debmeta.SECTIONS[package.role]}")
        lines += [
            f"Depends: {', '.join(depends)}",
            debmeta.description_field(
                debmeta.summary(package), debmeta.long_description(plan, package)
            ),
        ]
    return "\n".join(lines) + "\n"


def _rules(arches: list[ArchSource]) -> str:
    """debian/rules: dh, with the install step install-split and the steps that would change
    upstream's binaries (strip, dwz) left out."""
    wheels = "".join(f"WHEEL_{a.arch.deb} = {a.plan.wheel.filename}\n" for a in arches)
    supported = " ".join(a.arch.deb for a in arches)
    libraries = [name for name, (p, _) in _packages(arches).items() if p.libraries]
    symbols = "".join(
        f"\tinstall -D -m 0644 debian/shlibs/{n}.symbols debian/{n}/DEBIAN/symbols\n"
        for n in libraries
    )
    return f"""\
#!/usr/bin/make -f
# Generated by splitter. Nothing is compiled: the upstream wheel of the architecture being
# built (checked against debian/wheels.sha256) is unzipped and its files installed where the
# split packages have them by debian/install-split, with the list in debian/split/ and the
# generated files (CMake config, pkg-config, records) in debian/generated/.

include /usr/share/dpkg/architecture.mk

{wheels}WHEEL = $(WHEEL_$(DEB_HOST_ARCH))

%:
\tdh $@

# upstream's binaries are shipped as built: nothing to configure, build or test
override_dh_auto_configure override_dh_auto_build override_dh_auto_test:

override_dh_auto_install:
\t@test -n "$(WHEEL)" || {{ echo "no wheel for $(DEB_HOST_ARCH), only {supported}"; exit 1; }}
\tsha256sum --check --strict debian/wheels.sha256
\trm -rf debian/wheel
\tunzip -q $(WHEEL) -d debian/wheel
\tsh debian/install-split debian/wheel debian/split/$(DEB_HOST_ARCH).list \\
\t\tdebian/generated/$(DEB_HOST_ARCH) debian/tmp

# upstream's binaries are shipped as built, with no debug information to split off
override_dh_strip override_dh_dwz override_dh_strip_nondeterminism:

# the sonames carry no version (libexecutorch.so), so no shlibs file can name them: a symbols
# file maps each to its package at exactly this version, as in the packages splitter builds
override_dh_makeshlibs:
{symbols}
override_dh_missing:
\tdh_missing --fail-missing

# the exclusivity records stay readable JSON
override_dh_compress:
\tdh_compress -X.json
"""


def _install_files(arches: list[ArchSource]) -> dict[str, str]:
    """debian/<package>.install for each package: the fewest paths that take exactly its
    files from debian/tmp (splitter.targets.distro.common.covering_paths), the triplet
    written as ${DEB_HOST_MULTIARCH}; a path only some architectures have is marked with
    them, which dh-exec filters (the file then runs it)."""
    listed: dict[str, dict[str, list[str]]] = {}
    for item in arches:
        for package, paths in item.packages:
            for path in paths:
                if any(c in path for c in " \t*?[]\\"):
                    raise UsageError(
                        f"debhelper's .install files cannot list {path!r} "
                        f"(from {item.plan.wheel.filename})\n"
                        "report it: the wheel's file names are not expected to hold blanks or "
                        "wildcards"
                    )
            general = [p.replace(item.arch.triplet, MULTIARCH) for p in paths]
            listed.setdefault(item.arch.deb, {})[package.name] = general
    everywhere = tuple(sorted(a.arch.deb for a in arches))
    out = {}
    for name, entries in covering_paths(listed).items():
        lines = [
            path if found == everywhere else f"[{' '.join(found)}] {path}"
            for path, found in entries
        ]
        text = "".join(f"{line}\n" for line in lines)
        out[name] = (
            ("#!/usr/bin/dh-exec\n" + text) if text.startswith("[") or "\n[" in text else text
        )
    return out
