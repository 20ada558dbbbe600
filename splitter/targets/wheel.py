"""`--target wheel`: three pip-installable wheels that keep upstream's `executorch/` layout.

Nothing moves, so the `$ORIGIN`-relative RUNPATHs stay valid and no binary is touched: the
files of each wheel are its install plan's (splitter.targets.install.wheel_install_plan). The
runtime and quantized wheels hold no Python code and no CPython extension: they are tagged
`py3-none-<platform>`. The export wheel keeps the input's tag, Requires-Dist, extras and
console scripts.
"""

from __future__ import annotations

import hashlib
import json
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import Metadata, RawMetadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from splitter.input.payload import Payload
from splitter.input.wheel import record_digest, record_hash
from splitter.manifest import Artifact
from splitter.model import Limits, PackagePlan, Plan, Target
from splitter.plan.licences import licence_texts
from splitter.plan.release import PlatformGroup, ReleasePlanning, planned, release_note
from splitter.plan.report import exclusivity_record
from splitter.targets.builder import artifact, build_output, single
from splitter.targets.generated.files import split_from
from splitter.targets.generated.guard import guard_files
from splitter.targets.generated.sbom import (
    SBOM_NAME,
    SbomFile,
    SbomPackage,
    make_bom,
    render_sbom,
    spdx_path,
    with_file,
)
from splitter.targets.generated.spdx import render_spdx
from splitter.targets.install import NO_GUARD, InstallPlan, wheel_install_plan
from splitter.targets.stage import Progress

SIDECAR = "splitter-process-exclusive.json"
FIELD_NAMES = {
    "metadata-version": "Metadata-Version",
    "project-url": "Project-URL",
    "requires-python": "Requires-Python",
    "description-content-type": "Description-Content-Type",
    "license-expression": "License-Expression",
}


def build_wheels(
    plan: Plan, out: Path, progress: Progress | None = None, guard: bool = False
) -> list[Path]:
    """Write OUT/<name>-<version>-<tag>.whl for each package; atomic and reproducible."""
    return build_output(WheelBuilder(guard=guard), plan, out, progress).artifacts


@dataclass(frozen=True, slots=True)
class WheelBuilder:
    """`--target wheel`: per platform one wheel of each Python-independent package (from the
    group's source wheel; in a release, its METADATA lists every input wheel) and, from each
    input wheel, its Python packages; reproducible."""

    guard: bool = False
    target: Target = Target.WHEEL

    @property
    def limits(self) -> Limits:
        """Every platform, and releases."""
        return Limits(target=self.target)

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        checked = planned(release, progress)
        one = single(checked) is not None
        written: list[Artifact] = []
        for group in checked.groups:
            for plan in group.plans:
                packages = group.packaged_from(plan)
                shared = group if plan is group.source and not one else None
                written += _write_packages(plan, packages, build, progress, self.guard, shared)
        return written


def _write_packages(
    plan: Plan,
    packages: Sequence[PackagePlan],
    build: Path,
    progress: Progress | None,
    guard: bool,
    group: PlatformGroup | None = None,
) -> list[Artifact]:
    written = []
    install = wheel_install_plan(plan, packages, guard_files(plan) if guard else NO_GUARD)
    with Payload(plan.wheel) as source:
        for index, package in enumerate(packages, start=1):
            if progress is not None:
                progress(f"wheel {package.name}", index, len(packages))
            files = package_files(install, package, source)
            path = write_wheel(plan, package, files, source, build, group)
            written.append(artifact(path.name, plan, package))
    return written


def wheel_tag(plan: Plan, package: PackagePlan) -> str:
    """py3-none-<platform> for packages without Python code, else the input's tag."""
    return plan.wheel.tag if package.python else f"py3-none-{plan.wheel.platform_tag}"


def dist_name(package: PackagePlan) -> str:
    """The distribution name as it appears in file names (executorch_runtime)."""
    return canonicalize_name(package.name).replace("-", "_")


def package_files(
    install: InstallPlan, package: PackagePlan, source: Payload
) -> dict[str, tuple[bytes, bool]]:
    """Archive path -> (bytes, executable) for the package's files in the wheel's install plan
    (splitter.targets.install.wheel_install_plan), generated config included."""
    return {
        f.path: (f.data if f.data is not None else source.read(f.source), f.executable)
        for f in install.of(package.name)
    }


def description(plan: Plan, package: PackagePlan, group: PlatformGroup | None = None) -> str:
    """Where the package comes from (with the release's `group`, every wheel it stands for
    and what was set aside: release_note),
    and which requirements the recipe's [externals] add that the input wheel's own
    Requires-Dist does not name (executorch 1.5.1 omits torch)."""
    text = f"{package.summary}.\n\n{split_from(plan)}"
    if group is not None and package.name in group.shared_packages:
        text += " " + release_note(group, package)
    named = {canonicalize_name(Requirement(r).name) for r in plan.wheel.requires_dist}
    added = [e.pip for e in package.externals if canonicalize_name(e.name) not in named]
    if added:
        text += (
            f" Its binaries link against {', '.join(added)}, which the recipe's [externals] "
            f"add: {plan.wheel.name} {plan.wheel.version}'s Requires-Dist does not name it."
        )
    return text + "\n"


def metadata(plan: Plan, package: PackagePlan, group: PlatformGroup | None = None) -> bytes:
    """METADATA written with packaging's own tooling."""
    requires = [f"{d.name}=={d.version}" for d in package.depends]
    requires += [d.pip for d in package.externals]
    raw: RawMetadata = {
        "metadata_version": "2.4",
        "name": package.name,
        "version": package.version,
        "summary": package.summary,
        "description": description(plan, package, group),
        "description_content_type": "text/plain",
        "license_expression": package.license,
        "license_files": [text.name for text in licence_texts(plan, package.name)],
        "project_urls": {"Homepage": plan.wheel.home} if plan.wheel.home else {},
    }
    if package.python:
        requires += list(plan.wheel.requires_dist)
        raw["provides_extra"] = list(plan.wheel.provides_extra)
        if plan.wheel.requires_python:
            raw["requires_python"] = plan.wheel.requires_python
    if requires:
        raw["requires_dist"] = requires
    message = Metadata.from_raw(raw).as_rfc822()
    # packaging writes field names in lower case; twine's pkginfo only reads the spec's spelling.
    lines = [f"{FIELD_NAMES.get(k, k.title())}: {v}" for k, v in message.items()]
    return ("\n".join(lines) + "\n\n" + str(message.get_payload())).encode()


def write_wheel(
    plan: Plan,
    package: PackagePlan,
    files: dict[str, tuple[bytes, bool]],
    source: Payload,
    directory: Path,
    group: PlatformGroup | None = None,
) -> Path:
    """A reproducible wheel: sorted entries, fixed timestamps and modes, RECORD last."""
    tag = wheel_tag(plan, package)
    name = dist_name(package)
    dist_info = f"{name}-{package.version}.dist-info"
    licenses = {
        f"{dist_info}/licenses/{text.name}": (text.data, False)
        for text in licence_texts(plan, package.name)
    }
    top_level = f"{plan.wheel.dist_info}/top_level.txt"
    if package.python and top_level in plan.owners:
        licenses[f"{dist_info}/top_level.txt"] = (source.read(top_level), False)
    meta = {
        **licenses,
        f"{dist_info}/METADATA": (metadata(plan, package, group), False),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: splitter\nRoot-Is-Purelib: false\n"
            f"Tag: {tag}\n".encode(),
            False,
        ),
        f"{dist_info}/{SIDECAR}": (
            (
                json.dumps(exclusivity_record(plan, package), indent=2, sort_keys=True) + "\n"
            ).encode(),
            False,
        ),
    }
    if package.python and plan.wheel.console_scripts:
        lines = ["[console_scripts]"] + [f"{k} = {v}" for k, v in plan.wheel.console_scripts]
        meta[f"{dist_info}/entry_points.txt"] = (("\n".join(lines) + "\n").encode(), False)
    # the SBOMs (PEP 770's .dist-info/sboms/) list every other file of the wheel but RECORD
    listed = sorted(files.items()) + sorted(meta.items())
    digests = {path: hashlib.sha256(data).digest() for path, (data, _) in listed}
    filename = f"{name}-{package.version}-{tag}.whl"
    bom = make_bom(
        plan,
        SbomPackage(
            package=package.name,
            name=package.name,
            version=package.version,
            purl=f"pkg:pypi/{package.name}@{package.version}?file_name={filename}",
        ),
        [
            SbomFile(
                path=path,
                sha256=digests[path].hex(),
                sha1=hashlib.sha1(data).hexdigest(),
                source=path if path in plan.owners else "",
            )
            for path, (data, _) in listed
        ],
        [
            SbomPackage(
                package=d.name,
                name=d.name,
                version=d.version or "",
                purl=f"pkg:pypi/{d.name}@{d.version}",
            )
            for d in package.depends
        ],
    )
    cdx = f"{dist_info}/sboms/{SBOM_NAME}"
    spdx = render_spdx(bom)
    meta[spdx_path(cdx)] = (spdx, False)
    meta[cdx] = (render_sbom(with_file(bom, spdx_path(cdx), spdx)), False)
    ordered = sorted(files.items()) + sorted(meta.items())
    record = [
        f"{path},{record_digest(digests[path]) if path in digests else record_hash(data)},"
        f"{len(data)}"
        for path, (data, _) in ordered
    ]
    record.append(f"{dist_info}/RECORD,,")
    ordered.append((f"{dist_info}/RECORD", (("\n".join(record) + "\n").encode(), False)))
    path = directory / f"{name}-{package.version}-{tag}.whl"
    date_time = _zip_time(plan.wheel.timestamp)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for member, (data, executable) in ordered:
            info = zipfile.ZipInfo(member, date_time=date_time)
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            archive.writestr(info, data)
    return path


def _zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    import time

    parts = time.gmtime(max(epoch, 315532800))  # zip cannot store dates before 1980
    return (parts.tm_year, parts.tm_mon, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec)
