"""`--target conda`: .conda packages assembled with rattler-build, indexed as a local channel."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from splitter.errors import ExternalToolError, MissingToolError
from splitter.input.payload import Payload
from splitter.manifest import Artifact
from splitter.model import CondaBackend, PackagePlan, Plan, Rpath
from splitter.plan.layout import Layout, default_sitedir
from splitter.plan.release import (
    Release,
    ReleasePlanning,
    link_stamps,
    shared_packages,
    wheel_inputs,
)
from splitter.plan.report import exclusivity_record
from splitter.plan.request import release_backend
from splitter.targets.builder import Target, artifact, build_output
from splitter.targets.conda.assemble import (
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
from splitter.targets.conda.meta import (
    build_string,
    conda_depends,
    run_exports,
)
from splitter.targets.conda.recipes import write_recipes, write_support
from splitter.targets.conda.releaserecipe import Variant, support_folders, write_release_recipe
from splitter.targets.conda.workers import WorkerDied, Workers
from splitter.targets.generated.files import split_from
from splitter.targets.scratch import scratch_dir
from splitter.targets.stage import Progress, Reusable, Staged, reusable, stage
from splitter.tools import die_with_parent

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
    """A conda build whose worker processes are running (see conda_builder): one wheel's
    channel (build_conda) or a release's (build_conda_release)."""

    options: CondaOptions
    workers: Workers
    target: Target = Target.CONDA

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        if len(release.paths) == 1:
            (plan,) = release.plans(progress)
            return _build(plan, build, progress, options=self.options, workers=self.workers)
        return _build_release(release, build, self.options, progress, self.workers)


@contextlib.contextmanager
def conda_builder(options: CondaOptions) -> Iterator[CondaBuilder]:
    """Start a conda build: its worker processes start now, so that their start-up (an
    interpreter and rattler-build's import) overlaps whatever the caller does before it has
    a plan or a release to build."""
    backend = options.backend
    if backend == CondaBackend.CONDA_BUILD and shutil.which("conda-build") is None:
        raise MissingToolError(
            "conda-build",
            "--backend conda-build runs it from PATH",
            "conda install conda-build, or use --backend assemble or rattler-build",
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
        return build_output(builder, plan, out, progress).written


def _build(
    plan: Plan, build: Path, progress: Progress | None, *, options: CondaOptions, workers: Workers
) -> list[Artifact]:
    subdir = plan.platform.conda_subdir
    builds = {p.name: build_string(plan, p) for p in plan.packages}
    need = sum(p.bytes for p in plan.packages)
    backend = options.backend
    with scratch_dir(need) as work:
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
    return [
        artifact(f"{subdir}/{p.name}-{p.version}-{builds[p.name]}.conda", plan, p)
        for p in plan.packages
    ]


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
) -> Iterator[tuple[AssembleJob, Assembled]]:
    """One .conda per package of a wheel's build with rattler-build's assembler (largest
    first, to the workers, the build taking the next one whenever they are all busy), yielded
    as each is assembled, not yet finished (assemble.finish).

    The build process packs too only when nothing is drawing progress (or without workers,
    --jobs 1): rattler-build holds the GIL while it packs, which would freeze the progress bar
    for a whole package. Which process packs a package does not change its bytes."""
    licenses = wheel_licenses(plan, work)
    jobs = assemble_jobs(
        plan, staged, directory, builds, work, compression_level, threads, plan.packages, licenses
    )
    here = pool.count == 0 or progress is None
    if progress is not None:
        progress(f"packing {len(jobs)} package(s)", 0, len(jobs))
    try:
        for done, (index, result) in enumerate(pool.run(assemble, jobs, local=here), start=1):
            _check_assembled(jobs[index].name, result)
            if progress is not None:
                progress(f"assembled {jobs[index].name}", done, len(jobs))
            yield jobs[index], result
    except WorkerDied as exc:
        raise _worker_died(exc) from exc


def _worker_died(exc: WorkerDied) -> ExternalToolError:
    return ExternalToolError(
        f"{exc} while assembling; if the system ran out of memory, build with --jobs 1",
        [sys.executable, "-c", "splitter.targets.conda.workers.serve"],
        exc.returncode,
        "",
    )


def wheel_licenses(
    plan: Plan, work: Path, like: tuple[Plan, tuple[str, ...]] | None = None
) -> tuple[str, ...]:
    """The wheel's licence files, extracted once into `work` for every package of the wheel,
    and rattler-build's TMPDIR created beside them. `like` is another wheel's plan and its
    extracted licence files: if they are this wheel's, byte for byte (the same names and
    sha256), they are used as they are (a release: the platform's source wheel)."""
    (work / "tmp").mkdir()
    if like is not None and _licence_digests(like[0]) == _licence_digests(plan):
        return like[1]
    return tuple(str(p) for p in _extract_licenses(plan, work / "licenses"))


def _licence_digests(plan: Plan) -> list[tuple[str, str]]:
    digests = {e.path: e.sha256 for e in plan.wheel.entries}
    return [(name, digests[name]) for name in plan.wheel.license_files]


def assemble_jobs(
    plan: Plan,
    staged: Staged,
    directory: Path,
    builds: Mapping[str, str],
    work: Path,
    compression_level: int,
    threads: int,
    packages: Sequence[PackagePlan],
    licenses: tuple[str, ...],
    inputs: tuple[tuple[str, str], ...] = (),
) -> list[AssembleJob]:
    """The assembler's calls for `packages` of the plan, largest first.

    Only the largest package, the last to finish, is compressed with `threads` threads; the
    others are compressed in-line (zstd's single-threaded mode: 0), beside it and on the
    other core. zstd's multi-threaded mode needs buffers of its own per package
    (docs/performance.md), so one package pays for them, not every package at once. The thread
    count belongs to the package, not to the process packing it, so the bytes do not depend
    on --jobs or on which process took which package. `inputs` are the wheels of a release a
    shared package stands for."""
    timestamp = datetime.fromtimestamp(plan.wheel.timestamp, tz=UTC)
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
            license=plan.wheel.license or None,
            summary=package.summary,
            description=f"{package.summary}. {split_from(plan)}" + _release_note(plan, inputs),
            depends=tuple(conda_depends(plan, package, dict(builds))),
            license_files=licenses,
            compression_level=compression_level,
            compression_threads=threads if rank == 0 else 0,
            timestamp=timestamp,
            tmpdir=str(work / "tmp"),
            additions=info_additions(plan, package, staged.layout, compression_level),
        )
        for rank, package in enumerate(ordered)
    ]


def _release_note(plan: Plan, inputs: tuple[tuple[str, str], ...]) -> str:
    """For a shared package of a release, the wheels it stands for ("" otherwise)."""
    if not inputs:
        return ""
    listed = ", ".join(f"{name} (sha256 {sha})" for name, sha in inputs)
    return (
        " Its files are the same in every wheel of the release (binaries but for their "
        f"{link_stamps(plan.platform)}), which were: {listed}."
    )


def build_conda_release(
    release: Release | ReleasePlanning,
    out: Path,
    options: CondaOptions,
    progress: Progress | None = None,
    workers: Workers | None = None,
) -> list[Path]:
    """A release's channel in OUT: per subdir, one build of each Python-independent package
    (from the group's source wheel) and one export build per Python, each pinning exactly the
    shared builds of its subdir; repodata per subdir; the subdir's rattler-build recipe with a
    variant per Python under recipes/<subdir>/rattler-build/ (splitter.targets.conda.releaserecipe).

    Given a ReleasePlanning, each wheel is packed as soon as its plan is made, while the next
    one is planned (see ReleasePipeline); the release is checked when the last is planned,
    and a refusal leaves nothing, as OUT is written only when complete."""
    if options.backend != CondaBackend.ASSEMBLE:
        raise release_backend(options.backend)
    with contextlib.ExitStack() as stack:
        if workers is None:
            workers = stack.enter_context(assemble_workers(options.jobs))
        builder = CondaBuilder(options, workers)
        return build_output(builder, release, out, progress).written


def _build_release(
    planning: ReleasePlanning,
    build: Path,
    options: CondaOptions,
    progress: Progress | None,
    workers: Workers,
) -> list[Artifact]:
    if options.backend != CondaBackend.ASSEMBLE:
        raise release_backend(options.backend)
    try:
        with ReleasePipeline(build, options, progress, workers) as pipeline:
            for plan in planning.plans(progress):
                pipeline.add(plan)
            pipeline.complete(planning.release())
    except BaseException:
        workers.kill()  # before the scratch they write into goes
        raise
    return [
        artifact(f"{group.subdir}/{p.name}-{p.version}-{builds[p.name]}.conda", plan, p)
        for group in planning.release().groups
        for plan in group.plans
        for builds in [pipeline.builds[plan.wheel.filename]]
        for p in group.packaged_from(plan)
    ]


@dataclass(slots=True, kw_only=True)
class _Wheel:
    """A wheel in the pipeline: its staged packages, its scratch, and how many queued or held
    packages read that scratch (its own, and a later wheel's of its platform pointing at its
    files), plus one while its platform is still planned if it is the platform's source.
    The scratch is removed when that count reaches zero."""

    plan: Plan
    variant: Variant
    staged: Staged
    work: Path
    licenses: tuple[str, ...]
    scratch: contextlib.ExitStack
    unfinished: int
    held: tuple[PackagePlan, ...]  # a source wheel's shared packages, packed once its group is
    source: _Wheel | None  # the platform's source wheel, whose files this one points at
    reusable: Reusable | None = None  # a source wheel's files the later wheels point at


@dataclass(slots=True)
class _Packing:
    job: AssembleJob
    future: Future[Assembled]
    wheel: _Wheel
    reads: tuple[_Wheel, ...]  # the wheels whose scratch the job's files are in


class ReleasePipeline:
    """A release's channel, built one wheel at a time as the wheels are planned.

    Each wheel is staged (its Python packages; the source wheel, the first of its platform,
    its shared packages too) and its packages queued for the workers at once; the build
    process then plans the next wheel while the workers pack, and finishes each package
    (info additions, repodata record) when it is assembled. So planning, staging and finishing
    in the build process overlap the workers' packing, which is what a release waits for.
    A later wheel of a platform points at the files its source wheel staged where it holds
    the same bytes (stage's `reuse`), so it writes little more than its extension modules, and
    the source's scratch stays until its platform is planned and packed. Besides that, at most
    AHEAD wheels wait staged for the workers, which bounds the scratch space, however many
    wheels (a later wheel's scratch holds little more than its extension modules). The bound
    is loose on purpose: the build helps pack only when it is reached, and planning ahead
    instead keeps the worker's queue full, so that the two processes pack the backlog
    together at the end rather than the worker waiting while the build packs
    (docs/performance.md). A shared package's description lists every wheel of its
    platform, so it is queued once its group is planned; with the release checked
    (`complete`), the rest is packed, and each subdir gets its recipe and repodata.

    In a release both cores are busy (the build process plans and stages, the worker packs),
    so every package is compressed with zstd's single-threaded mode: its threads would find
    no idle core, and its buffers would cost each packing process memory (docs/performance.md).
    """

    AHEAD = 6

    def __init__(
        self, build: Path, options: CondaOptions, progress: Progress | None, workers: Workers
    ) -> None:
        self.build, self.options, self.progress, self.workers = build, options, progress, workers
        self.groups: dict[str, list[_Wheel]] = {}
        self.records: dict[str, dict[str, dict[str, object]]] = {}
        self.packing: list[_Packing] = []  # queued, in order
        self.finished = 0
        self.queued = 0
        self.scratches = contextlib.ExitStack()
        self.builds: dict[str, dict[str, str]] = {}  # wheel file name -> package -> build string

    def __enter__(self) -> ReleasePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        for packing in self.packing:
            packing.future.cancel()
        if any(exc):
            self.workers.kill()  # before the scratch they write into goes
        self.scratches.close()

    def add(self, plan: Plan) -> None:
        """Stage a planned wheel and queue its packages (its group's source: all but the
        shared ones, held for the group's end)."""
        subdir = plan.platform.conda_subdir
        if subdir not in self.groups:
            for previous in self.groups.values():
                self._queue_shared(previous)
            self.groups[subdir] = []
            self.records[subdir] = {}
            (self.build / subdir).mkdir()
        members = self.groups[subdir]
        source = members[0].plan if members else plan
        shared = shared_packages(plan.recipe)
        builds = {p.name: build_string(plan, p) for p in plan.packages} | {
            name: build_string(source, source.package(name)) for name in shared
        }
        variant = Variant(plan=plan, builds=builds)
        self.builds[plan.wheel.filename] = builds
        mine = tuple(p for p in plan.packages if plan is source or p.name not in shared)
        while len({id(p.wheel) for p in self.packing}) >= self.AHEAD:
            self._help_or_wait(spare=1)
        scratch = contextlib.ExitStack()
        self.scratches.enter_context(scratch)
        work = scratch.enter_context(scratch_dir(sum(p.bytes for p in mine)))
        first = members[0] if members else None
        names = frozenset(p.name for p in mine)
        reuse = first.reusable if first is not None else None
        staged = _stage(plan, work, self.options, self.progress, names, reuse)
        recipe = self.build / "recipes" / subdir / "rattler-build"
        write_support(plan, staged, recipe, support_folders(variant, mine, shared))
        wheel = _Wheel(
            plan=plan,
            variant=variant,
            staged=staged,
            work=work,
            licenses=wheel_licenses(
                plan, work, None if first is None else (first.plan, first.licenses)
            ),
            scratch=scratch,
            unfinished=len(mine) + (first is None),
            held=tuple(p for p in mine if p.name in shared),
            source=first,
            reusable=reusable(plan, staged, sorted(names)) if first is None else None,
        )
        members.append(wheel)
        self._queue(wheel, tuple(p for p in mine if p.name not in shared))
        self._finish_done()

    def complete(self, release: Release) -> None:
        """With the release checked: pack what is left, then each subdir's recipe and
        repodata."""
        for group in release.groups:
            members = self.groups[group.subdir]
            assert [w.plan for w in members] == list(group.plans), "planned in release order"
            self._queue_shared(members)
        while self.packing:
            self._help_or_wait(spare=0)
        for group in release.groups:
            recipe = self.build / "recipes" / group.subdir / "rattler-build"
            variants = [w.variant for w in self.groups[group.subdir]]
            write_release_recipe(variants, group.shared_packages, recipe)
            index_channel(self.build, group.subdir, self.records[group.subdir])

    def _queue_shared(self, members: list[_Wheel]) -> None:
        """The group is planned: queue its shared packages, and let its source's scratch go
        once nothing reads it."""
        source = members[0]
        if source.reusable is None:
            return  # done before
        inputs = wheel_inputs(w.plan for w in members)
        held, source.held, source.reusable = source.held, (), None
        self._queue(source, held, inputs)
        self._release(source)

    def _queue(
        self,
        wheel: _Wheel,
        packages: tuple[PackagePlan, ...],
        inputs: tuple[tuple[str, str], ...] = (),
    ) -> None:
        if not packages:
            return
        directory = self.build / wheel.plan.platform.conda_subdir
        level = self.options.compression_level
        jobs = assemble_jobs(
            wheel.plan,
            wheel.staged,
            directory,
            wheel.variant.builds,
            wheel.work,
            level,
            0,
            packages,
            wheel.licenses,
            inputs,
        )
        self.queued += len(jobs)
        if self.progress is not None:
            self.progress(f"packing {wheel.plan.wheel.filename}", self.finished, self.queued)
        reads = (wheel,) if wheel.source is None else (wheel, wheel.source)
        if wheel.source is not None:
            wheel.source.unfinished += len(jobs)
        for job in jobs:
            future = self.workers.submit(assemble, job)
            self.packing.append(_Packing(job, future, wheel, reads))

    def _help_or_wait(self, spare: int) -> None:
        """Pack the newest package no worker has taken, here, if more than `spare` are
        waiting (so a worker that finishes still finds one); else wait for any to finish. The
        build would otherwise sit idle while the workers have a backlog: taking from it
        keeps both cores packing. rattler-build holds the GIL while it packs, so a progress
        bar pauses for that package (well under a second for these packages)."""
        waiting = [p for p in self.packing if not p.future.running() and not p.future.done()]
        if len(waiting) > spare and self.workers.take(waiting[-1].future):
            self._finish_done()
            return
        wait([p.future for p in self.packing], return_when=FIRST_COMPLETED)
        self._finish_done()

    def _finish_done(self) -> None:
        """Finish every package assembled so far, without waiting: in any order (the records
        are written sorted), so that the ones the build packed itself, or a worker finished
        behind a longer one, are not left for the end while the build waits."""
        for packing in [p for p in self.packing if p.future.done()]:
            self._finish(packing)

    def _finish(self, packing: _Packing) -> None:
        """Wait for a queued package, finish it, and remove its wheel's scratch once every
        package of the wheel is finished."""
        try:
            result = packing.future.result()
        except WorkerDied as exc:
            raise _worker_died(exc) from exc
        self.packing.remove(packing)
        _check_assembled(packing.job.name, result)
        name, record = _finished(packing.job, result)
        self.records[packing.wheel.plan.platform.conda_subdir][name] = record
        self.finished += 1
        if self.progress is not None:
            self.progress(f"assembled {name}", self.finished, self.queued)
        for wheel in packing.reads:
            self._release(wheel)

    @staticmethod
    def _release(wheel: _Wheel) -> None:
        """One reader of the wheel's scratch less; the last removes it."""
        wheel.unfinished -= 1
        if wheel.unfinished == 0:
            wheel.scratch.close()


def _stage(
    plan: Plan,
    work: Path,
    options: CondaOptions,
    progress: Progress | None,
    only: frozenset[str] | None = None,
    reuse: Reusable | None = None,
) -> Staged:
    """Stage the plan's packages (or `only` those) under work/stage/<package> as a conda
    prefix, pointing at `reuse`'s copies of the files it has (see stage)."""
    root = work / "stage"
    layout = conda_layout(plan)
    staged = stage(
        plan, layout, root.joinpath, Rpath.RELATIVE, progress, options.guard, only, reuse=reuse
    )
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
