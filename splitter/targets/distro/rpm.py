"""`--target rpm`: one .rpm per package, built by `rpmbuild -bb` from a generated spec.

Layout: prefix /usr, libdir lib64 (x86_64 and aarch64), Python modules in
lib64/python3.X/site-packages, no RUNPATH where the libdir is the system's. rpm's own
generators write the ELF Provides/Requires (`libexecutorch.so()(64bit)`); the spec adds the
siblings at the exact version-release and the externals as the recipe maps them. The spec and
its Source files are written to OUT for packagers who rebuild. Reproducible: build time and
mtimes from SOURCE_DATE_EPOCH (the wheel's), a fixed build host, zstd single-threaded.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from splitter.manifest import Artifact
from splitter.model import Plan
from splitter.plan.facts import arch_of
from splitter.plan.layout import make_layout
from splitter.plan.release import ReleasePlanning
from splitter.plan.report import RECORD
from splitter.targets.builder import Target, artifact
from splitter.targets.distro.common import (
    distro_of,
    external_requirements,
    license_text,
    record_json,
    stage_under,
)
from splitter.targets.distro.deb import one_wheel_per_platform
from splitter.targets.distro.rpmspec import render_spec, rpmlintrc, spec_name
from splitter.targets.stage import Progress
from splitter.tools import need_tool, run_tool

PAYLOAD = "w3.zstdio"  # zstd level 3, one thread: its output depends on nothing else


@dataclass(frozen=True, slots=True, kw_only=True)
class RpmBuilder:
    """`--target rpm`: OUT/<name>-<version>-<release>.<arch>.rpm per package of each platform,
    with OUT/SPECS (the spec that built them) and OUT/SOURCES; a distribution has one python3,
    so one wheel per platform."""

    guard: bool = False
    target: Target = Target.RPM

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        return [
            artifact(path, plan, plan.package(name))
            for plan in one_wheel_per_platform(release, progress, "rpm")
            for name, path in write_rpms(plan, build, progress, self.guard).items()
        ]


def write_rpms(plan: Plan, build: Path, progress: Progress | None, guard: bool) -> dict[str, str]:
    """Stage the plan, write the spec and its sources (OUT/SPECS, OUT/SOURCES), run rpmbuild;
    returns each package's .rpm file name."""
    arch = arch_of(plan, "rpm")
    distro = distro_of(plan, "rpm")
    rpmbuild = need_tool("rpmbuild", "rpm")
    python = "{}.{}".format(*plan.platform.python)
    layout = dataclasses.replace(
        make_layout(plan.wheel, "/usr", "lib64", "include", f"lib64/python{python}/site-packages"),
        interpreter="/usr/bin/python3",
    )
    names = dict(distro.names)
    for package in plan.packages:  # an unmapped external stops the build before staging
        external_requirements(plan, package, "rpm")
    scratch = Path(tempfile.mkdtemp(prefix=".rpm-", dir=build))
    try:
        trees = scratch / "trees"
        roots = {p.name: trees / p.name for p in plan.packages}
        staged = stage_under(plan, layout, roots, progress, guard, names)
        sources = build / "SOURCES"
        sources.mkdir(exist_ok=True)
        licence_name = (
            plan.wheel.license_files[0].rsplit("/", 1)[-1] if plan.wheel.license_files else ""
        )
        licence_name = licence_name or "LICENSE"
        (sources / licence_name).write_text(license_text(plan))
        records = {p.name: f"{names[p.name]}.{arch.machine}.{RECORD}" for p in plan.packages}
        for package in plan.packages:
            (sources / records[package.name]).write_text(
                record_json(plan, package, names[package.name])
            )
        spec = render_spec(plan, staged, distro, licence_name, records)
        specs = build / "SPECS"
        specs.mkdir(exist_ok=True)
        spec_path = specs / f"{spec_name(plan, distro)}.{arch.machine}.spec"
        spec_path.write_text(spec)
        spec_path.with_suffix(".rpmlintrc").write_text(rpmlintrc(plan, staged, distro))
        if progress is not None:
            progress("rpmbuild", 0, len(plan.packages))
        topdir = scratch / "top"
        run_tool(
            "rpmbuild could not build the packages",
            [
                rpmbuild,
                "-bb",
                "--quiet",
                f"--target={arch.machine}",
                "--define",
                f"_topdir {topdir}",
                "--define",
                f"_sourcedir {sources}",
                "--define",
                f"splitter_trees {trees}",
                "--define",
                "_prefix /usr",
                "--define",
                "_libdir /usr/lib64",
                "--define",
                f"_binary_payload {PAYLOAD}",
                str(spec_path),
            ],
            env={"SOURCE_DATE_EPOCH": str(plan.wheel.timestamp)},
        )
        written = {}
        for package in plan.packages:
            # rpmbuild names it <name>-<version>-<release>.<arch>.rpm
            head = f"{names[package.name]}-{plan.wheel.version}-"
            (rpm,) = (topdir / "RPMS").rglob(f"{head}*.rpm")
            shutil.move(rpm, build / rpm.name)
            written[package.name] = rpm.name
    finally:
        shutil.rmtree(scratch)
    return written
