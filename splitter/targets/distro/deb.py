"""`--target deb`: one binary .deb per package, built by dpkg-deb from the staged trees.

Layout: prefix /usr, Debian's multiarch libdir lib/<triplet>, Python modules in
/usr/lib/python3/dist-packages, no RUNPATH where the libdir is the system's. Depends: the
siblings at the exact version (from the plan), the externals as the recipe maps them for
Debian, and the system libraries as dpkg-shlibdeps computes them (on this machine's
architecture, and on another whose system libraries dpkg's database holds (multiarch); else
the recipe's [deb.system] map). Reproducible: every time is the wheel's, owners are root,
compression is gzip (zlib's output depends on nothing else).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import RecipeError
from splitter.manifest import Artifact
from splitter.model import Distro, Limits, PackagePlan, Plan, Target
from splitter.plan.facts import arch_of
from splitter.plan.layout import Layout, deb_layout
from splitter.plan.release import ReleasePlanning, planned
from splitter.plan.report import record_name
from splitter.plan.request import check_planned
from splitter.platforms import SupportedPlatform
from splitter.targets.builder import artifact, source_artifact
from splitter.targets.distro import debmeta, dep5
from splitter.targets.distro.common import (
    DEVELOPMENT,
    DistroPackage,
    clamp_times,
    cmake_names,
    distro_limits,
    distro_of,
    distro_packages,
    external_requirements,
    origin_sentence,
    release_epoch,
    sbom_naming,
    stage_under,
)
from splitter.targets.distro.debsource import ArchSource, arch_source, write_source_package
from splitter.targets.install import REGULAR
from splitter.targets.stage import Progress
from splitter.tools import need_tool, run_tool

# gzip -9: deterministic whatever the machine, and several times faster than xz for a
# modestly larger export package (docs/performance.md).
COMPRESSION = ("-Zgzip", "-z9")
WORKERS = 2  # packages packed at once (dpkg-shlibdeps, md5sums, dpkg-deb)


@dataclass(frozen=True, slots=True, kw_only=True)
class DebBuilder:
    """`--target deb`: OUT/<name>_<version>_<arch>.deb for each library, development and
    Python package of each platform, and the source package that rebuilds them
    (splitter.targets.distro.debsource); a distribution has one python3, so one wheel per
    platform. Reproducible."""

    guard: bool = False
    target: Target = Target.DEB

    @property
    def limits(self) -> Limits:
        """Linux platforms, one Python each."""
        return distro_limits(self.target, lambda p: p.deb)

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        plans = one_wheel_per_platform(release, progress, self.limits)
        epoch = release_epoch(plans)
        artifacts = []
        arches = []
        for plan in plans:
            written, source = write_debs(plan, build, progress, self.guard, epoch, plans)
            artifacts += [artifact(path, plan, package) for package, path in written]
            arches.append(source)
        name = plans[0].recipe.project
        sources = write_source_package(arches, build, epoch)
        return artifacts + [source_artifact(path, name) for path in sources]


def one_wheel_per_platform(
    release: ReleasePlanning, progress: Progress | None, limits: Limits
) -> list[Plan]:
    """The plan of each platform's wheel, refused by the target's `limits` as the request
    was (several Pythons of one platform: the export package of a distribution is built for
    its one python3, and the packages of two Pythons would have one name and version)."""
    checked = planned(release, progress)
    check_planned([p for group in checked.groups for p in group.plans], limits)
    return [group.source for group in checked.groups]


def write_debs(
    plan: Plan,
    build: Path,
    progress: Progress | None,
    guard: bool,
    epoch: int,
    plans: Sequence[Plan] = (),
) -> tuple[list[tuple[PackagePlan, str]], ArchSource]:
    """Stage the plan, cut it into library, development and Python packages and write each
    .deb into `build`; returns (split package, file name) per .deb and what the source
    package needs of this architecture. `plans`: every architecture's, whose components
    each copyright names (the same file in every architecture; default: this plan's)."""
    arch = arch_of(plan)
    distro = distro_of(plan, "deb")
    dpkg_deb = need_tool("dpkg-deb", "dpkg")
    known = _host_arch() == arch.deb or _dpkg_knows(plan, arch.triplet)
    shlibdeps = need_tool("dpkg-shlibdeps", "dpkg-dev") if known else ""
    version = f"{plan.wheel.version}-{distro.revision}"
    layout = deb_layout(plan.wheel, arch.triplet)
    externals = {p.name: external_requirements(plan, p, "deb") for p in plan.packages}
    scratch = Path(tempfile.mkdtemp(prefix=".deb-", dir=build))
    try:
        stage_roots = {p.name: scratch / "stage" / p.name for p in plan.packages}
        # shared objects are 0644 in Debian (policy 8.1; lintian's shlib-with-executable-bit)
        names = cmake_names(plan, distro)
        staged = stage_under(
            plan,
            layout,
            stage_roots,
            progress,
            guard,
            names,
            REGULAR,
            sbom_naming(plan, distro, "deb"),
        )
        cut = distro_packages(plan, staged, distro)
        roots = {d.name: scratch / "pkg" / d.name for d in cut}
        packages = [_move(d, roots[d.name], layout) for d in cut]
        origin = origin_sentence(plan, record_name("<arch>"))
        # each binary package's own: a -dev package names the licences of its headers only
        copyrights = {
            d.name: dep5.copyright_file(plans or [plan], d.package.name, origin, d.role)
            for d in cut
        }
        changelog = debmeta.changelog_text(
            plan.recipe.project, version, distro.maintainer, epoch, origin
        )
        for package in packages:
            copyright_text = copyrights[package.name]
            _write_docs(plan, package, arch, roots, copyright_text, changelog)
            _write_library_control(package, version, roots)
        done = 0

        def pack(package: DistroPackage) -> str:
            """Depends, control, md5sums and the .deb of one package."""
            nonlocal done
            root = roots[package.name]
            if package.role == DEVELOPMENT:
                system = []
            elif known:
                system = _shlibdeps(shlibdeps, plan, package, packages, roots)
            else:
                system = _mapped_system(plan, package.package, distro)
            depends = [f"{name} (= {version})" for name in package.requires]
            if package.role != DEVELOPMENT:
                depends += externals[package.package.name]
                depends += debmeta.python_depends(plan, package.package)
            depends += system
            _write_control(plan, package, root, version, arch, distro, depends)
            (root / "DEBIAN" / "md5sums").write_text(debmeta.md5sums(root))
            for item in (root / "DEBIAN").iterdir():
                item.chmod(0o644)
            clamp_times(root, epoch)
            filename = f"{package.name}_{version}_{arch.deb}.deb"
            run_tool(
                f"dpkg-deb could not build {filename}",
                [
                    dpkg_deb,
                    "--root-owner-group",
                    *COMPRESSION,
                    "--build",
                    str(root),
                    str(build / filename),
                ],
                env={"SOURCE_DATE_EPOCH": str(epoch)},
            )
            done += 1
            if progress is not None:
                progress(f"deb {package.name}", done, len(packages))
            return filename

        # Two at a time, the largest first: the export package's dpkg-deb, most of the build,
        # runs beside the others. Each writes only its own root; dpkg-shlibdeps only reads
        # the siblings' libraries and symbols files, written above.
        order = sorted(packages, key=lambda d: 0 if d.role == DEVELOPMENT else -d.package.bytes)
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            built = dict(zip([d.name for d in order], pool.map(pack, order), strict=True))
        written = [(d.package, built[d.name]) for d in packages]
        source = arch_source(plan, arch, layout, packages, staged.install)
    finally:
        shutil.rmtree(scratch)
    return written, source


def _move(package: DistroPackage, root: Path, layout: Layout) -> DistroPackage:
    """The package with its files renamed from the staging into its own root."""
    prefix = root / layout.prefix.strip("/")
    moved = []
    for item in package.files:
        real = prefix / item.path
        real.parent.mkdir(parents=True, exist_ok=True)
        os.rename(item.real, real)
        moved.append(dataclasses.replace(item, real=str(real)))
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(package, files=tuple(moved))


def _host_arch() -> str:
    """This machine's dpkg architecture (amd64, arm64), or "" where dpkg is absent."""
    try:
        return subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _write_docs(
    plan: Plan,
    package: DistroPackage,
    arch: SupportedPlatform,
    roots: dict[str, Path],
    copyright_text: str,
    changelog: str,
) -> None:
    """copyright, changelog.Debian.gz, and debmeta.package_docs: the exclusivity record, a
    development package's undeclared functions (gzip'd as dh_compress would) and the lintian
    overrides."""
    root = roots[package.name]
    doc = root / "usr" / "share" / "doc" / package.name
    doc.mkdir(parents=True, exist_ok=True)
    (doc / "copyright").write_text(copyright_text)
    (doc / "changelog.Debian.gz").write_bytes(debmeta.changelog_gz(changelog))
    for plain, text in debmeta.package_docs(plan, package, arch.deb):
        path, data = debmeta.compressed(plain, text)  # as dh_compress does in a rebuild
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def _write_library_control(package: DistroPackage, version: str, roots: dict[str, Path]) -> None:
    """DEBIAN/symbols and the ldconfig trigger of a package with public libraries; written
    before any dpkg-shlibdeps run, which reads the siblings' symbols files."""
    if package.libraries:
        debian = roots[package.name] / "DEBIAN"
        (debian / "symbols").write_text(
            debmeta.symbols(package.package.sonames, package.name, f"{package.name} (= {version})")
        )
        (debian / "triggers").write_text(debmeta.LDCONFIG_TRIGGER)


def _dpkg_knows(plan: Plan, triplet: str) -> bool:
    """Whether dpkg's database holds every system library the plan's packages need, for the
    architecture of `triplet` (multiarch: `dpkg --add-architecture arm64` and libc6:arm64,
    libstdc++6:arm64... installed, as a Debian cross build has them): then dpkg-shlibdeps
    states the Depends, as for this machine's own architecture and as a rebuild of the
    source package does; else the recipe's [deb.system] map does."""
    sonames = sorted({s for p in plan.packages for s in p.system_sonames})
    if not sonames or shutil.which("dpkg-query") is None:
        return False
    patterns = [f"*/{triplet}/{s}" for s in sonames]
    found = subprocess.run(
        ["dpkg-query", "-S", *patterns], capture_output=True, text=True, check=False
    ).stdout
    return all(f"/{triplet}/{s}\n" in found for s in sonames)


def _shlibdeps(
    tool: str,
    plan: Plan,
    package: DistroPackage,
    packages: list[DistroPackage],
    roots: dict[str, Path],
) -> list[str]:
    """System dependencies as dpkg-shlibdeps computes them, siblings excluded (the plan gives
    those at the exact version). It wants a debian/control; a minimal one is written."""
    elves = [
        item.real
        for item in package.files
        if item.executable or item.path.endswith(".so") or ".so." in item.path
    ]
    elves = [e for e in elves if Path(e).read_bytes()[:4] == b"\x7fELF"]
    if not elves:
        return []
    work = roots[package.name].parent / f".shlibdeps-{package.name}"
    (work / "debian").mkdir(parents=True, exist_ok=True)
    (work / "debian" / "control").write_text(
        f"Source: {plan.recipe.project}\n\nPackage: {package.name}\nArchitecture: any\n"
    )
    command = [tool, "-O", f"-T{work / 'debian' / 'substvars'}"]
    command += [f"-S{roots[d.name]}" for d in packages if d.libraries and d is not package]
    command += [f"-x{d.name}" for d in sorted(packages, key=lambda d: d.name)]
    output = run_tool(
        f"dpkg-shlibdeps could not compute {package.name}'s dependencies",
        [*command, *sorted(elves)],
        cwd=work,
    )
    shutil.rmtree(work)
    value = next(
        (line.split("=", 1)[1] for line in output.splitlines() if line.startswith("shlibs:")), ""
    )
    return [part.strip() for part in value.split(",") if part.strip()]


def _mapped_system(plan: Plan, package: PackagePlan, distro: Distro) -> list[str]:
    """For another architecture (whose system libraries dpkg here does not know): the
    recipe's [deb.system] entry of each system soname the package NEEDs."""
    mapping = dict(distro.system)
    missing = [s for s in package.system_sonames if s not in mapping]
    if missing:
        raise RecipeError(
            f"no [deb.system] entry for {', '.join(missing)} (dpkg-shlibdeps cannot run for "
            f"{plan.platform.machine} on this machine): {plan.recipe.path}\n"
            f'add "{missing[0]}" = "<debian dependency>" under [deb.system]'
        )
    return sorted({mapping[s] for s in package.system_sonames})


def _write_control(
    plan: Plan,
    package: DistroPackage,
    root: Path,
    version: str,
    arch: SupportedPlatform,
    distro: Distro,
    depends: list[str],
) -> None:
    text = debmeta.control(
        name=package.name,
        source=plan.recipe.project,
        version=version,
        arch=arch.deb,
        maintainer=distro.maintainer,
        installed_size=debmeta.installed_size(root),
        depends=list(dict.fromkeys(depends)),
        multi_arch=debmeta.multi_arch(package),
        section=debmeta.SECTIONS[package.role],
        homepage=plan.wheel.home,
        summary=debmeta.summary(package),
        long_description=debmeta.long_description(plan, package),
    )
    (root / "DEBIAN" / "control").write_text(text)
