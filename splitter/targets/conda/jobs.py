"""What the assembler is asked for each package (an AssembleJob): its staged files, its
metadata from the plan (depends, description, licence files, compression), and the info/
files and about.json keys the assembler cannot write (run_exports, the process-exclusive
record)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from splitter.model import PackagePlan, Plan
from splitter.plan.layout import Layout
from splitter.plan.licences import licence_texts
from splitter.plan.release import PlatformGroup, release_note
from splitter.plan.report import exclusivity_record
from splitter.targets.conda.assemble import AssembleJob, InfoAdditions, json_bytes
from splitter.targets.conda.meta import conda_depends, run_exports
from splitter.targets.generated.files import split_from
from splitter.targets.stage import Staged


def wheel_licenses(plan: Plan, work: Path) -> Mapping[str, tuple[str, ...]]:
    """Each package's licence texts (splitter.plan.licences), written under `work` for
    rattler-build's license_file (info/licenses/ of the package), and rattler-build's
    TMPDIR created beside them: package -> the files, in the plan's order."""
    (work / "tmp").mkdir()
    written: dict[str, tuple[str, ...]] = {}
    for package in plan.packages:
        directory = work / "licenses" / package.name
        directory.mkdir(parents=True)
        paths = []
        for text in licence_texts(plan, package.name):
            (directory / text.name).write_bytes(text.data)
            paths.append(str(directory / text.name))
        written[package.name] = tuple(paths)
    return written


def assemble_jobs(
    plan: Plan,
    staged: Staged,
    directory: Path,
    builds: Mapping[str, str],
    work: Path,
    compression_level: int,
    threads: int,
    packages: Sequence[PackagePlan],
    licenses: Mapping[str, tuple[str, ...]],
    group: PlatformGroup | None = None,
) -> list[AssembleJob]:
    """The assembler's calls for `packages` of the plan, largest first.

    Only the plan's largest package, the last to finish, is compressed with `threads`
    threads; the others are compressed in-line (zstd's single-threaded mode: 0), beside it
    and on the other core. zstd's multi-threaded mode needs buffers of its own per package
    (docs/performance.md), so one package pays for them, not every package at once. The
    thread count belongs to the package, not to the process packing it, so the bytes do not
    depend on --jobs or on which process took which package. `group` is the platform of a
    release whose wheels a shared package stands for (plan.release.release_note)."""
    timestamp = datetime.fromtimestamp(plan.wheel.timestamp, tz=UTC)
    largest = min(plan.packages, key=lambda p: (-p.bytes, p.name)).name
    ordered = sorted(packages, key=lambda p: (-p.bytes, p.name))
    return [
        AssembleJob(
            name=package.name,
            version=package.version,
            target_platform=directory.name,
            build_string=builds[package.name],
            output_dir=str(directory),
            files=tuple((str(f.real), f.path) for f in staged.packages[package.name]),
            homepage=plan.wheel.home or None,
            license=package.license or None,
            summary=package.summary,
            description=f"{package.summary}. {split_from(plan)}"
            + (f" {release_note(group, package)}" if group is not None else ""),
            depends=tuple(conda_depends(plan, package, dict(builds))),
            license_files=licenses[package.name],
            compression_level=compression_level,
            compression_threads=threads if package.name == largest else 0,
            timestamp=timestamp,
            tmpdir=str(work / "tmp"),
            additions=info_additions(plan, package, staged.layout, compression_level),
        )
        for package in ordered
    ]


def info_additions(
    plan: Plan, package: PackagePlan, layout: Layout, compression_level: int
) -> InfoAdditions:
    """The info/ files and about.json keys the assembler cannot write for `package`. The
    exclusivity record goes in about.json's `extra`, not a file of its own: CEP 34 says
    "Build tools MUST NOT allow arbitrary files in" info/, and `extra` is free-form."""
    record = exclusivity_record(plan, package)
    extra_files: dict[str, bytes] = {}
    exports = run_exports(package)
    if exports:
        extra_files["info/run_exports.json"] = json_bytes(exports)
    scripts = frozenset(
        f"{layout.bindir}/{name}" for name, _ in plan.wheel.console_scripts if package.python
    )
    about: dict[str, object] = {
        "extra": {
            "process_exclusive": record["pairs"],
            "splitter": {"input": plan.wheel.filename, "sha256": plan.wheel.sha256},
        }
    }
    return InfoAdditions(
        extra_files=tuple(sorted(extra_files.items())),
        about_update=json.dumps(about),
        text_prefix_paths=scripts,
        level=min(compression_level, 19),
        mtime=plan.wheel.timestamp,
    )
