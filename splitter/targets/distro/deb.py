"""`--target deb`: one binary .deb per package, built by dpkg-deb from the staged trees.

Layout: prefix /usr, Debian's multiarch libdir lib/<triplet>, Python modules in
/usr/lib/python3/dist-packages, no RUNPATH where the libdir is the system's. Depends: the
siblings at the exact version (from the plan), the externals as the recipe maps them for
Debian, and the system libraries as dpkg-shlibdeps computes them (on this machine's
architecture; for another, the recipe's [deb.system] map). Reproducible: every time is the
wheel's, owners are root, compression is gzip (zlib's output depends on nothing else).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import RecipeError
from splitter.manifest import Artifact
from splitter.model import Distro, PackagePlan, Plan
from splitter.plan.facts import Arch, arch_of
from splitter.plan.layout import make_layout
from splitter.plan.release import ReleasePlanning, planned
from splitter.plan.report import RECORD
from splitter.plan.request import several_pythons
from splitter.targets.builder import Target, artifact
from splitter.targets.distro import debmeta
from splitter.targets.distro.common import (
    clamp_times,
    distro_of,
    exclusivity_sentence,
    external_requirements,
    has_bare_executable,
    license_text,
    record_json,
    stage_under,
)
from splitter.targets.generated.files import split_from
from splitter.targets.stage import Progress, Staged
from splitter.tools import need_tool, run_tool

SITEDIR = "lib/python3/dist-packages"  # Debian's one directory for every python3
# gzip -9: deterministic whatever the machine, and several times faster than xz for a
# modestly larger export package (docs/performance.md).
COMPRESSION = ("-Zgzip", "-z9")
WORKERS = 2  # packages packed at once (dpkg-shlibdeps, md5sums, dpkg-deb)


@dataclass(frozen=True, slots=True, kw_only=True)
class DebBuilder:
    """`--target deb`: OUT/<name>_<version>_<arch>.deb for each package of each platform; a
    distribution has one python3, so one wheel per platform. Reproducible."""

    guard: bool = False
    target: Target = Target.DEB

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        return [
            artifact(path, plan, plan.package(name))
            for plan in one_wheel_per_platform(release, progress, "deb")
            for name, path in write_debs(plan, build, progress, self.guard).items()
        ]


def one_wheel_per_platform(
    release: ReleasePlanning, progress: Progress | None, target: str
) -> list[Plan]:
    """The plan of each platform's wheel; several Pythons of one platform are refused: the
    export package of a distribution is built for its one python3, and the packages of two
    Pythons would have one name and version."""
    checked = planned(release, progress)
    for group in checked.groups:
        if len(group.plans) > 1:
            pythons = ["{}.{}".format(*p.platform.python) for p in group.plans]
            raise several_pythons(target, group.subdir, pythons)
    return [group.source for group in checked.groups]


def write_debs(plan: Plan, build: Path, progress: Progress | None, guard: bool) -> dict[str, str]:
    """Stage the plan and write each package's .deb into `build`; returns the file names."""
    arch = arch_of(plan, "deb")
    distro = distro_of(plan, "deb")
    dpkg_deb = need_tool("dpkg-deb", "dpkg")
    native = _host_arch() == arch.deb
    shlibdeps = need_tool("dpkg-shlibdeps", "dpkg-dev") if native else ""
    names = dict(distro.names)
    version = f"{plan.wheel.version}-{distro.revision}"
    layout = dataclasses.replace(
        make_layout(plan.wheel, "/usr", f"lib/{arch.triplet}", "include", SITEDIR),
        interpreter="/usr/bin/python3",
    )
    externals = {p.name: external_requirements(plan, p, "deb") for p in plan.packages}
    scratch = Path(tempfile.mkdtemp(prefix=".deb-", dir=build))
    try:
        roots = {p.name: scratch / names[p.name] for p in plan.packages}
        staged = stage_under(plan, layout, roots, progress, guard, names)
        _unset_library_exec(staged, roots)
        licence = license_text(plan)
        for package in plan.packages:
            _write_docs(plan, package, names[package.name], version, distro, roots, licence)
            if has_bare_executable(staged, package.name):
                _add_override(roots, package, names[package.name], debmeta.BARE_EXECUTABLE)
            _write_library_control(package, names, version, roots)
        done = 0

        def pack(package: PackagePlan) -> str:
            """Depends, control, md5sums and the .deb of one package."""
            nonlocal done
            root = roots[package.name]
            if native:
                system = _shlibdeps(shlibdeps, plan, package, staged, names, roots)
            else:
                system = _mapped_system(plan, package, distro)
            depends = [f"{names[d.name]} (= {version})" for d in package.depends]
            depends += externals[package.name]
            depends += _python_depends(plan, package)
            depends += system
            _write_control(plan, package, root, names[package.name], version, arch, distro, depends)
            (root / "DEBIAN" / "md5sums").write_text(debmeta.md5sums(root))
            for item in (root / "DEBIAN").iterdir():
                item.chmod(0o644)
            clamp_times(root, plan.wheel.timestamp)
            filename = f"{names[package.name]}_{version}_{arch.deb}.deb"
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
                env={"SOURCE_DATE_EPOCH": str(plan.wheel.timestamp)},
            )
            done += 1
            if progress is not None:
                progress(f"deb {names[package.name]}", done, len(plan.packages))
            return filename

        # Two at a time, the largest first: the export package's dpkg-deb, most of the build,
        # runs beside the other two. Each writes only its own root;
        # dpkg-shlibdeps only reads the siblings' libraries and symbols files, written above.
        order = sorted(plan.packages, key=lambda p: -p.bytes)
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            built = dict(zip([p.name for p in order], pool.map(pack, order), strict=True))
        written = {p.name: built[p.name] for p in plan.packages}
    finally:
        shutil.rmtree(scratch)
    return written


def _host_arch() -> str:
    """This machine's dpkg architecture (amd64, arm64), or "" where dpkg is absent."""
    try:
        return subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _unset_library_exec(staged: Staged, roots: dict[str, Path]) -> None:
    """Shared objects are 0644 in Debian (policy 8.1; lintian's shlib-with-executable-bit);
    staging marks every ELF file executable, as pip and conda install them."""
    for files in staged.packages.values():
        for item in files:
            name = item.path.rsplit("/", 1)[-1]
            if item.executable and (name.endswith(".so") or ".so." in name):
                os.chmod(item.real, 0o644)


def _doc_dir(roots: dict[str, Path], package: PackagePlan, name: str) -> Path:
    return roots[package.name] / "usr" / "share" / "doc" / name


def _write_docs(
    plan: Plan,
    package: PackagePlan,
    name: str,
    version: str,
    distro: Distro,
    roots: dict[str, Path],
    licence: str,
) -> None:
    doc = _doc_dir(roots, package, name)
    doc.mkdir(parents=True, exist_ok=True)
    (doc / "copyright").write_text(debmeta.copyright_file(plan, licence))
    (doc / "changelog.Debian.gz").write_bytes(
        debmeta.changelog_gz(plan.recipe.project, version, distro.maintainer, plan)
    )
    (doc / RECORD).write_text(record_json(plan, package, name))
    overrides = debmeta.EVERY_PACKAGE
    overrides += debmeta.LIBRARY if _ships_libraries(package) else ()
    overrides += debmeta.PYTHON if package.python else ()
    directory = roots[package.name] / "usr" / "share" / "lintian" / "overrides"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(debmeta.lintian_overrides(name, overrides))


def _add_override(
    roots: dict[str, Path], package: PackagePlan, name: str, override: tuple[str, str]
) -> None:
    path = roots[package.name] / "usr" / "share" / "lintian" / "overrides" / name
    path.write_text(path.read_text() + debmeta.lintian_overrides(name, (override,)))


def _ships_libraries(package: PackagePlan) -> bool:
    """Whether the package holds public shared libraries (in the libdir), not just modules."""
    return not package.python and bool(package.sonames)


def _write_library_control(
    package: PackagePlan,
    names: dict[str, str],
    version: str,
    roots: dict[str, Path],
) -> None:
    """DEBIAN/symbols and the ldconfig trigger of a package with public libraries; written
    before any dpkg-shlibdeps run, which reads the siblings' symbols files."""
    debian = roots[package.name] / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    if _ships_libraries(package):
        name = names[package.name]
        (debian / "symbols").write_text(
            debmeta.symbols(package.sonames, name, f"{name} (= {version})")
        )
        (debian / "triggers").write_text("activate-noawait ldconfig\n")


def _shlibdeps(
    tool: str,
    plan: Plan,
    package: PackagePlan,
    staged: Staged,
    names: dict[str, str],
    roots: dict[str, Path],
) -> list[str]:
    """System dependencies as dpkg-shlibdeps computes them, siblings excluded (the plan gives
    those at the exact version). It wants a debian/control; a minimal one is written."""
    elves = [
        item.real
        for item in staged.packages[package.name]
        if item.executable or item.path.endswith(".so") or ".so." in item.path
    ]
    elves = [e for e in elves if Path(e).read_bytes()[:4] == b"\x7fELF"]
    if not elves:
        return []
    work = roots[package.name].parent / f".shlibdeps-{names[package.name]}"
    (work / "debian").mkdir(parents=True, exist_ok=True)
    (work / "debian" / "control").write_text(
        f"Source: {plan.recipe.project}\n\nPackage: {names[package.name]}\nArchitecture: any\n"
    )
    command = [tool, "-O", f"-T{work / 'debian' / 'substvars'}"]
    command += [f"-S{roots[p.name]}" for p in plan.packages if p.name != package.name]
    command += [f"-x{n}" for n in sorted(names.values())]
    output = run_tool(
        f"dpkg-shlibdeps could not compute {names[package.name]}'s dependencies",
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


def _python_depends(plan: Plan, package: PackagePlan) -> list[str]:
    """The python3 an export package's extension modules are built for (their tag)."""
    if not package.python:
        return []
    major, minor = plan.platform.python
    return [f"python3 (>= {major}.{minor}~)", f"python3 (<< {major}.{minor + 1})"]


def _write_control(
    plan: Plan,
    package: PackagePlan,
    root: Path,
    name: str,
    version: str,
    arch: Arch,
    distro: Distro,
    depends: list[str],
) -> None:
    root_doc = f"/usr/share/doc/{name}/{RECORD}"
    long = debmeta.paragraphs(
        package.summary + "." if debmeta.synopsis(package.summary) != package.summary else "",
        split_from(plan),
        exclusivity_sentence(plan, package, root_doc),
    )
    unique = list(dict.fromkeys(depends))
    text = debmeta.control(
        name=name,
        source=plan.recipe.project,
        version=version,
        arch=arch.deb,
        maintainer=distro.maintainer,
        installed_size=debmeta.installed_size(root),
        depends=unique,
        section="python" if package.python else "libs",
        homepage=plan.wheel.home,
        summary=package.summary,
        long_description=long,
    )
    (root / "DEBIAN" / "control").write_text(text)
