"""`--target conda`: .conda packages assembled with rattler-build, indexed as a local channel."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from splitter.errors import ExternalToolError, SplitterError
from splitter.layout import Layout, default_sitedir
from splitter.model import CondaBackend, PackagePlan, Plan, Rpath
from splitter.output import atomic_output
from splitter.payload import Payload
from splitter.release import PlatformGroup, Release
from splitter.report import exclusivity_record
from splitter.scratch import scratch_dir
from splitter.targets.assemble import (
    PLACEHOLDER,
    Assembled,
    AssembleJob,
    InfoAdditions,
    assemble,
    assemble_workers,
    finish,
    json_bytes,
    release_freed_memory,
)
from splitter.targets.condameta import (
    build_string,
    conda_depends,
    run_exports,
)
from splitter.targets.recipes import write_recipes, write_support
from splitter.targets.releaserecipe import Variant, support_folders, write_release_recipe
from splitter.targets.stage import Progress, Staged, stage
from splitter.targets.workers import WorkerDied, Workers, die_with_parent

SIDECAR = "info/splitter-process-exclusive.json"
DEFAULT_LEVEL = 9
# Default packaging processes, the build's own included: a second process packs the largest
# package beside the others; one process alone is slower and leaner (docs/performance.md).
WORKERS = 2


def conda_layout(plan: Plan) -> Layout:
    """The layout inside a conda prefix ($PREFIX/lib, include, lib/pythonX.Y/site-packages)."""
    return Layout(
        prefix="", sitedir=default_sitedir(plan.wheel), interpreter=f"{PLACEHOLDER}/bin/python"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CondaOptions:
    """How `--target conda` packages (the CLI's options, checked there)."""

    compression_level: int = DEFAULT_LEVEL
    threads: int = 2  # zstd threads of the largest package
    backend: CondaBackend = CondaBackend.ASSEMBLE
    guard: bool = False
    jobs: int = WORKERS  # packaging processes, the build's own included


@dataclass(frozen=True, slots=True)
class CondaBuilder:
    """A conda build whose worker processes are running (see conda_builder)."""

    options: CondaOptions
    workers: Workers

    def build(self, plan: Plan, out: Path, progress: Progress | None = None) -> list[Path]:
        """One wheel's packages: see build_conda."""
        return _build(plan, out, progress, options=self.options, workers=self.workers)

    def build_release(
        self, release: Release, out: Path, progress: Progress | None = None
    ) -> list[Path]:
        """A release's channel: see build_conda_release."""
        return build_conda_release(release, out, self.options, progress, self.workers)


@contextlib.contextmanager
def conda_builder(options: CondaOptions) -> Iterator[CondaBuilder]:
    """Start a conda build: its worker processes start now, so that their start-up (an
    interpreter and rattler-build's import) overlaps whatever the caller does before it has
    a plan or a release to build."""
    backend = options.backend
    if backend == CondaBackend.CONDA_BUILD and shutil.which("conda-build") is None:
        raise SplitterError(
            "--backend conda-build needs a conda-build executable on PATH (none found): "
            "install conda-build, or use --backend assemble or rattler-build"
        )
    level, jobs = options.compression_level, options.jobs
    assert jobs >= 1 and 1 <= level <= 22, (jobs, level)  # the CLI checks both
    with assemble_workers(jobs if backend == CondaBackend.ASSEMBLE else 1) as workers:
        yield CondaBuilder(options, workers)


def build_conda(
    plan: Plan,
    out: Path,
    compression_level: int = DEFAULT_LEVEL,
    threads: int = 2,
    progress: Progress | None = None,
    backend: CondaBackend = CondaBackend.ASSEMBLE,
    guard: bool = False,
    jobs: int = WORKERS,
) -> list[Path]:
    """Write OUT/<subdir>/*.conda, the channel's repodata, and the rebuild recipes; atomic.

    `assemble` (default) packages the staged trees with rattler-build's assembler and is
    byte-reproducible; `rattler-build` and `conda-build` build the generated recipes instead,
    from the local wheel, as a packager's own infrastructure would. `jobs` processes (the
    build and jobs - 1 workers) assemble the packages and read their repodata records.
    """
    options = CondaOptions(
        compression_level=compression_level,
        threads=threads,
        backend=backend,
        guard=guard,
        jobs=jobs,
    )
    with conda_builder(options) as builder:
        return builder.build(plan, out, progress)


def _build(
    plan: Plan, out: Path, progress: Progress | None, *, options: CondaOptions, workers: Workers
) -> list[Path]:
    subdir = plan.platform.conda_subdir
    builds = {p.name: build_string(plan, p) for p in plan.packages}
    need = sum(p.bytes for p in plan.packages)
    backend = options.backend
    with atomic_output(out) as build, scratch_dir(need) as work:
        try:
            workers.shrink(min(options.jobs, len(plan.packages)) - 1)
            staged = _stage(plan, work, options, progress)
            write_recipes(plan, staged, build / "recipes", builds)
            (build / subdir).mkdir()
            records = None
            if backend == CondaBackend.ASSEMBLE:
                # each package finished (info additions, repodata record) as it arrives
                packed = pack_all(
                    plan,
                    staged,
                    build / subdir,
                    builds,
                    work,
                    options.compression_level,
                    options.threads,
                    workers,
                    progress,
                )
                records = dict(_finished(job, result) for job, result in packed)
            else:
                # The same recipes, rendered with the local wheel as their source: offline.
                local = work / "local-recipes"
                write_recipes(plan, staged, local, builds, url=plan.wheel.path.as_uri())
                level = options.compression_level
                build_recipe(local / backend, backend, build / subdir, work, level)
            index_channel(build, subdir, records)
        except BaseException:
            workers.kill()  # before the scratch they write into goes
            raise
        written = sorted(str(p.relative_to(build)) for p in build.rglob("*") if p.is_file())
    return [out / name for name in written]


def _finished(job: AssembleJob, result: Assembled) -> tuple[str, dict[str, object]]:
    """(file name, repodata record) of an assembled package, finished by the build."""
    return Path(result.path).name, finish(job, result)


def pack_all(
    plan: Plan,
    staged: Staged,
    directory: Path,
    builds: dict[str, str],
    work: Path,
    compression_level: int,
    threads: int,
    pool: Workers,
    progress: Progress | None,
    only: Sequence[PackagePlan] | None = None,
    inputs: tuple[tuple[str, str], ...] = (),
    local: bool | None = None,
) -> Iterator[tuple[AssembleJob, Assembled]]:
    """One .conda per package with rattler-build's assembler (largest first, to the workers,
    the build taking the next one whenever they are all busy), yielded as each is assembled,
    not yet finished (assemble.finish).

    Only the largest package, the last to finish, is compressed with `threads` threads; the
    others are compressed in-line (zstd's single-threaded mode: 0), beside it and on the
    other core. zstd's multi-threaded mode needs buffers of its own per package
    (docs/performance.md), so one package pays for them, not every package at once. The thread
    count belongs to the package, not to the process packing it, so the bytes do not depend
    on --jobs or on which process took which package. `only` packs those of the plan's
    packages alone; `inputs` are the wheels of a release a shared package stands for.

    `local` says whether the build process packs too (when every worker is busy). By default
    it does only when nothing is drawing progress: rattler-build holds the GIL while it packs,
    which would freeze the progress bar for a whole package, and a release's pipeline passes
    False (the build process is staging the next wheel). Without workers (--jobs 1) it always
    packs. Which process packs a package does not change its bytes."""
    layout = staged.layout
    timestamp = datetime.fromtimestamp(plan.wheel.timestamp, tz=UTC)
    licenses = tuple(str(p) for p in _extract_licenses(plan, work / "licenses"))
    (work / "tmp").mkdir()
    packages = sorted(plan.packages if only is None else only, key=lambda p: (-p.bytes, p.name))
    jobs = [
        AssembleJob(
            name=package.name,
            version=package.version,
            target_platform=directory.name,
            build_string=builds[package.name],
            output_dir=str(directory),
            files=tuple((str(f.real), f.path) for f in staged.packages[package.name]),
            homepage=plan.wheel.home or None,
            license=plan.wheel.license or None,
            summary=package.summary,
            description=f"{package.summary}. Split by splitter from "
            f"{plan.wheel.filename} (sha256 {plan.wheel.sha256})." + _release_note(inputs),
            depends=tuple(conda_depends(plan, package, builds)),
            license_files=licenses,
            compression_level=compression_level,
            compression_threads=threads if rank == 0 else 0,
            timestamp=timestamp,
            tmpdir=str(work / "tmp"),
            additions=info_additions(plan, package, layout, compression_level),
        )
        for rank, package in enumerate(packages)
    ]
    here = pool.count == 0 or (progress is None if local is None else local)
    if progress is not None:
        progress(f"packing {len(packages)} package(s)", 0, len(packages))
    try:
        for done, (index, result) in enumerate(pool.run(assemble, jobs, local=here), start=1):
            package = packages[index]
            _check_assembled(package.name, result)
            if progress is not None:
                progress(f"assembled {package.name}", done, len(packages))
            yield jobs[index], result
    except WorkerDied as exc:
        raise ExternalToolError(
            f"{exc} while assembling; if the system ran out of memory, build with --jobs 1",
            [sys.executable, "-c", "splitter.targets.workers.serve"],
            exc.returncode,
            "",
        ) from exc


def _release_note(inputs: tuple[tuple[str, str], ...]) -> str:
    if not inputs:
        return ""
    listed = ", ".join(f"{name} (sha256 {sha})" for name, sha in inputs)
    return (
        " Its files are the same in every wheel of the release (ELF files but for their GNU "
        f"build-id), which were: {listed}."
    )


def build_conda_release(
    release: Release,
    out: Path,
    options: CondaOptions,
    progress: Progress | None = None,
    workers: Workers | None = None,
) -> list[Path]:
    """A release's channel in OUT: per subdir, one build of each Python-independent package
    (from the group's source wheel) and one export build per Python, each pinning exactly the
    shared builds of its subdir; repodata per subdir; the subdir's rattler-build recipe with a
    variant per Python under recipes/<subdir>/rattler-build/ (splitter.targets.releaserecipe).
    One wheel's scratch at a time, so memory does not grow with the number of wheels."""
    if options.backend != CondaBackend.ASSEMBLE:
        raise SplitterError(
            f"a release is packaged with --backend assemble, not {options.backend}: its "
            "rattler-build recipe (a variant per Python) is written under OUT/recipes/<subdir>/ "
            "for a rebuild"
        )
    with contextlib.ExitStack() as stack:
        if workers is None:
            workers = stack.enter_context(assemble_workers(options.jobs))
        build = stack.enter_context(atomic_output(out))
        try:
            for group in release.groups:
                _build_group(group, build, options, progress, workers)
        except BaseException:
            workers.kill()  # before the scratch they write into goes
            raise
        written = sorted(str(p.relative_to(build)) for p in build.rglob("*") if p.is_file())
    return [out / name for name in written]


def _build_group(
    group: PlatformGroup,
    build: Path,
    options: CondaOptions,
    progress: Progress | None,
    workers: Workers,
) -> None:
    """One subdir of a release's channel: its packages, repodata and recipe.

    A pipeline of two wheels: while the workers pack one wheel's packages (a helper thread
    waits for them, holding no GIL), the build process stages the next wheel, hands it to
    the workers, and only then finishes the previous wheel's packages (info additions,
    repodata records), so the workers, which the release waits for, never wait for it. So at
    most two wheels' scratch directories exist at once, and the build process never packs
    (rattler-build holds the GIL while it packs, which would stall the staging). Without
    workers (--jobs 1) the wheels are staged and packed in turn."""
    source = group.source
    shared = {name: build_string(source, source.package(name)) for name in group.shared_packages}
    records: dict[str, dict[str, object]] = {}
    recipe = build / "recipes" / group.subdir / "rattler-build"
    variants = []
    (build / group.subdir).mkdir()
    pipeline = workers.count > 0
    # The packer is shut down (waiting for its wheel) before any scratch directory goes.
    with contextlib.ExitStack() as scratches, ThreadPoolExecutor(max_workers=1) as packer:
        pending: tuple[Future[list[tuple[AssembleJob, Assembled]]], contextlib.ExitStack] | None
        pending = None
        for plan in group.plans:
            variant = Variant(
                plan=plan, builds={p.name: build_string(plan, p) for p in plan.packages} | shared
            )
            variants.append(variant)
            mine = group.packaged_from(plan)
            scratch = contextlib.ExitStack()
            scratches.enter_context(scratch)  # removed at the latest when the group ends
            work = scratch.enter_context(scratch_dir(sum(p.bytes for p in mine)))
            staged = _stage(plan, work, options, progress, frozenset(p.name for p in mine))
            write_support(plan, staged, recipe, support_folders(variant, mine, tuple(shared)))
            previous = None
            if pending is not None:
                previous = pending[0].result()  # the previous wheel, assembled
            # pack_all is a generator: its body (licences, jobs, the workers) runs in the packer
            job = packer.submit(
                list,
                pack_all(
                    plan,
                    staged,
                    build / group.subdir,
                    dict(variant.builds),
                    work,
                    options.compression_level,
                    options.threads,
                    workers,
                    progress,
                    only=mine,
                    inputs=group.inputs if plan is source else (),
                    local=False,
                ),
            )
            if previous is not None and pending is not None:
                # finished here while the worker packs this wheel: it waits for nothing
                records |= dict(_finished(*packed) for packed in previous)
                pending[1].close()
            pending = (job, scratch)
            if not pipeline:
                records |= dict(_finished(*packed) for packed in job.result())
                scratch.close()
                pending = None
        if pending is not None:
            records |= dict(_finished(*packed) for packed in pending[0].result())
    write_release_recipe(variants, group.shared_packages, recipe)
    index_channel(build, group.subdir, records)


def _stage(
    plan: Plan,
    work: Path,
    options: CondaOptions,
    progress: Progress | None,
    only: frozenset[str] | None = None,
) -> Staged:
    """Stage the plan's packages (or `only` those) under work/stage/<package> as a conda
    prefix."""
    root = work / "stage"
    layout = conda_layout(plan)
    staged = stage(plan, layout, root.joinpath, Rpath.RELATIVE, progress, options.guard, only=only)
    release_freed_memory()  # staging's buffers, before the packages are compressed
    return staged


def _check_assembled(name: str, result: Assembled) -> None:
    if result.error:
        raise ExternalToolError(
            f"rattler-build could not assemble {name}", ["assemble_package", name], 1, result.error
        )


def info_additions(
    plan: Plan, package: PackagePlan, layout: Layout, compression_level: int
) -> InfoAdditions:
    """The info/ files and about.json keys the assembler cannot write for `package`."""
    sidecar = exclusivity_record(plan, package)
    extra_files = {SIDECAR: json_bytes(sidecar)}
    exports = run_exports(package)
    if exports:
        extra_files["info/run_exports.json"] = json_bytes(exports)
    scripts = frozenset(
        f"{layout.bindir}/{name}" for name, _ in plan.wheel.console_scripts if package.python
    )
    about: dict[str, object] = {
        "extra": {
            "process_exclusive": sidecar["pairs"],
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


def build_recipe(
    source: Path, backend: CondaBackend, directory: Path, work: Path, level: int = DEFAULT_LEVEL
) -> None:
    """Build the rendered recipe directory `source` with `backend`, offline, into `directory`."""
    name = "recipe.yaml" if backend == CondaBackend.RATTLER_BUILD else "meta.yaml"
    scripts = sysconfig.get_path("scripts")
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    if backend == CondaBackend.RATTLER_BUILD:
        code = (
            "import sys\n"
            "from rattler_build import Stage0Recipe\n"
            "Stage0Recipe.from_file(sys.argv[1]).run_build(output_dir=sys.argv[2], channels=[],"
            " no_include_recipe=True, package_format=sys.argv[3])\n"
        )
        command = [
            sys.executable,
            "-c",
            code,
            str(source / name),
            str(work / "rattler-out"),
            f"conda:{level}",
        ]
        built = work / "rattler-out" / directory.name
    else:
        command = [
            "conda-build",
            str(source),
            "--output-folder",
            str(work / "cb-out"),
            "--no-anaconda-upload",
            "--override-channels",
        ]
        built = work / "cb-out" / directory.name
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise ExternalToolError(
            f"{backend} could not build the generated recipe",
            command,
            result.returncode,
            result.stderr + result.stdout,
        )
    for package in sorted(built.glob("*.conda")) + sorted(built.glob("*.tar.bz2")):
        shutil.copy2(package, directory / package.name)


def _extract_licenses(plan: Plan, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with Payload(plan.wheel) as payload:
        for name in plan.wheel.license_files:
            target = directory / name.rsplit("/", 1)[-1]
            payload.copy(name, str(target))
            paths.append(target)
    return paths


def index_channel(
    channel: Path, subdir: str, records: dict[str, dict[str, object]] | None = None
) -> None:
    """Write repodata.json for `subdir` and noarch: from the records the workers read off the
    packages (channel_record), else with py-rattler's index_fs in a subprocess of its own
    (never in the build's process: a killed build must not leave an indexer writing)."""
    if records is None:
        _index_in_subprocess(channel)
        shutil.rmtree(channel / ".tmp", ignore_errors=True)  # index_fs's scratch directory
    for name in (subdir, "noarch"):
        repodata = channel / name / "repodata.json"
        if records is not None:
            found = records if name == subdir else {}
            data = {"info": {"subdir": name}, "packages": {}, "packages.conda": found}
            data.update(repodata_version=1, v3={})  # as index_fs writes it
        else:
            data = json.loads(repodata.read_text())
            for key in ("packages", "packages.conda"):
                for record in data.get(key, {}).values():
                    # index_fs stamps the wall clock here; the package's own timestamp keeps
                    # the channel reproducible.
                    if "indexed_timestamp" in record:
                        record["indexed_timestamp"] = record.get("timestamp", 0)
        repodata.parent.mkdir(exist_ok=True)
        repodata.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _index_in_subprocess(channel: Path) -> None:
    code = (
        "import asyncio, os, sys\n"
        "from rattler.index import index_fs\n"
        "result = index_fs(sys.argv[1], write_zst=False, write_shards=False)\n"
        "if asyncio.iscoroutine(result):\n"
        "    asyncio.run(result)\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    command = [sys.executable, "-c", code, str(channel)]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, preexec_fn=die_with_parent
    )
    if result.returncode != 0 or not any(channel.glob("*/repodata.json")):
        raise ExternalToolError(
            "py-rattler could not index the channel", command, result.returncode, result.stderr
        )
