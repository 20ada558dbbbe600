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
from concurrent.futures import Future, ProcessPoolExecutor, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from splitter.errors import ExternalToolError, MissingToolError
from splitter.input.payload import Payload
from splitter.manifest import Artifact
from splitter.model import CondaBackend, PackagePlan, Plan, Rpath, Target
from splitter.plan.layout import Layout, default_sitedir
from splitter.plan.release import (
    PlatformGroup,
    Release,
    ReleasePlanning,
    release_note,
    shared_packages,
)
from splitter.plan.report import exclusivity_record
from splitter.plan.request import release_backend
from splitter.targets.builder import artifact, build_output
from splitter.targets.conda.assemble import (
    PLACEHOLDER,
    Assembled,
    AssembleJob,
    InfoAdditions,
    assemble,
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
from splitter.targets.conda.workers import start_workers
from splitter.targets.generated.files import split_from
from splitter.targets.scratch import scratch_dir
from splitter.targets.stage import Progress, Reusable, Staged, reusable, stage
from splitter.tools import die_with_parent

SIDECAR = "info/splitter-process-exclusive.json"
DEFAULT_LEVEL = 9
# Default worker processes packing at once: two keep both cores busy beside the build's
# planning and staging; one is slower and leaner (docs/performance.md).
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
    threads: int = 2  # zstd threads of a single wheel's largest package
    backend: CondaBackend = CondaBackend.ASSEMBLE
    guard: bool = False
    jobs: int = WORKERS  # worker processes packing at once


@dataclass(frozen=True, slots=True)
class CondaBuilder:
    """A conda build whose worker processes are running (see conda_builder): a release's
    channel, a single wheel being a release of one."""

    options: CondaOptions
    workers: ProcessPoolExecutor | None  # None with a recipe backend: the tool packs
    target: Target = Target.CONDA

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        if self.workers is None:
            return _build_recipes(release, build, progress, self.options)
        channel = _Channel(build, self.options, progress, self.workers, release)
        with channel:
            for plan in release.plans(progress):
                channel.add(plan)
            return channel.complete(release.release())


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
    if backend != CondaBackend.ASSEMBLE:
        yield CondaBuilder(options, None)
        return
    workers = start_workers(jobs)
    try:
        yield CondaBuilder(options, workers)
    finally:
        workers.shutdown(cancel_futures=True)


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
    from the local wheel, as a packager's own infrastructure would. `jobs` worker processes
    assemble the packages.
    """
    options = CondaOptions(
        compression_level=compression_level,
        threads=threads,
        backend=backend,
        guard=guard,
        jobs=jobs,
    )
    return build_conda_release(plan, out, options, progress)


def build_conda_release(
    release: Plan | Release | ReleasePlanning,
    out: Path,
    options: CondaOptions,
    progress: Progress | None = None,
) -> list[Path]:
    """A release's channel in OUT: per subdir, one build of each Python-independent package
    (from the group's source wheel) and one export build per Python, each pinning exactly the
    shared builds of its subdir; repodata per subdir; the subdir's rattler-build recipe with a
    variant per Python under recipes/<subdir>/rattler-build/ (splitter.targets.conda.releaserecipe),
    or a single wheel's recipes under recipes/rattler-build/ and recipes/conda-build/.

    Each wheel is packed as soon as its plan is made, while the next one is planned (see
    _Channel); the release is checked when the last is planned, and a refusal leaves nothing,
    as OUT is written only when complete."""
    with conda_builder(options) as builder:
        return build_output(builder, release, out, progress).written


def _build_recipes(
    release: ReleasePlanning, build: Path, progress: Progress | None, options: CondaOptions
) -> list[Artifact]:
    """`--backend rattler-build` or `conda-build`: the generated recipes of one wheel, built
    by that tool from the local wheel (offline)."""
    backend = options.backend
    if len(release.paths) != 1:
        raise release_backend(backend)
    (plan,) = release.plans(progress)
    subdir = plan.platform.conda_subdir
    builds = {p.name: build_string(plan, p) for p in plan.packages}
    with scratch_dir(sum(p.bytes for p in plan.packages)) as work:
        staged = _stage(plan, work, options, progress)
        write_recipes(plan, staged, build / "recipes", builds)
        (build / subdir).mkdir()
        local = work / "local-recipes"
        write_recipes(plan, staged, local, builds, url=plan.wheel.path.as_uri())
        build_recipe(local / backend, backend, build / subdir, work, options.compression_level)
        index_channel(build, subdir)
    return [
        artifact(f"{subdir}/{p.name}-{p.version}-{builds[p.name]}.conda", plan, p)
        for p in plan.packages
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Wheel:
    """A planned wheel, staged: what its packages are assembled from."""

    plan: Plan
    variant: Variant  # its build strings, and its part of the release recipe
    staged: Staged
    work: Path  # its scratch
    licenses: tuple[str, ...]


@dataclass(slots=True)
class _Group:
    """The wheels of one platform planned so far: the first, the source of the shared
    packages, which are queued once every wheel of the platform is planned, and each one's
    variant (a later wheel's staged files are not kept once its packages are queued)."""

    scratch: contextlib.ExitStack  # its wheels' scratch, removed once its packages are packed
    source: _Wheel | None = None
    variants: list[Variant] = field(default_factory=list)
    shared_queued: bool = False
    reusable: Reusable | None = None

    def reuse(self, source: _Wheel) -> Reusable:
        """The source's staged files, which a later wheel points at (stage's `reuse`)."""
        if self.reusable is None:
            names = sorted(p.name for p in source.plan.packages)
            self.reusable = reusable(source.plan, source.staged, names)
        return self.reusable


class _Channel:
    """A release's channel (a single wheel's too), built one wheel at a time as the wheels
    are planned.

    Each wheel is staged (its Python packages; the source wheel, the first of its platform,
    its shared packages too) and its packages queued for the workers at once; the build
    process then plans the next wheel while the workers pack, and finishes each package
    (info additions, repodata record) as it is assembled. A later wheel of a platform points
    at the files its source wheel staged where it holds the same bytes (stage's `reuse`), so
    it writes little more than its extension modules; a platform's scratch stays until every
    package of the platform is packed. A shared package's description lists every wheel of
    its platform, so it is queued once its platform is planned; those of the last platform
    are queued when there is nothing left to plan, and, when no progress is drawn (-q, the
    bench, a pipe), the build packs them itself while the workers pack theirs (a single wheel:
    the runtime and the quantized kernels beside the export, with one worker, as a release of
    one needs no second). With a progress bar they go to the workers instead: rattler-build
    holds the GIL while it packs, which would stop the bar for a whole package.

    A single wheel gets its own recipes (recipes/rattler-build/, recipes/conda-build/) and its
    largest package, the last to finish, is compressed with `threads` zstd threads; a release
    gets one rattler-build recipe per subdir, and every package is compressed with zstd's
    single-threaded mode: both cores are busy, and zstd's threads would cost each packing
    process buffers of its own (docs/performance.md)."""

    def __init__(
        self,
        build: Path,
        options: CondaOptions,
        progress: Progress | None,
        workers: ProcessPoolExecutor,
        release: ReleasePlanning,
    ) -> None:
        self.build, self.options, self.progress, self.workers = build, options, progress, workers
        self.release = release
        self.single = len(release.paths) == 1
        self.groups: dict[str, _Group] = {}
        self.records: dict[str, dict[str, dict[str, object]]] = {}  # subdir -> file -> record
        self.builds: dict[str, dict[str, str]] = {}  # wheel file name -> package -> build string
        self.packing: dict[Future[Assembled], tuple[str, AssembleJob]] = {}  # -> subdir, job
        self.finished = self.queued = 0
        self.scratch = contextlib.ExitStack()

    def __enter__(self) -> _Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        if any(exc):
            # Nothing more is packed; what a worker packs now reads the scratch: wait for it.
            for future in self.packing:
                future.cancel()
            wait(self.packing)
        self.scratch.close()

    def add(self, plan: Plan) -> None:
        """Stage a planned wheel and queue its packages (its platform's source: all but the
        shared ones, held until the platform is planned)."""
        subdir = plan.platform.conda_subdir
        if subdir not in self.groups:
            for previous in self.groups.values():
                self._queue_shared(previous)
            self.groups[subdir] = _Group(self.scratch.enter_context(contextlib.ExitStack()))
            self.records[subdir] = {}
            (self.build / subdir).mkdir()
        group = self.groups[subdir]
        source = group.source  # None: this wheel is its platform's source
        shared = shared_packages(plan.recipe)
        origin = plan if source is None else source.plan
        builds = {p.name: build_string(plan, p) for p in plan.packages} | {
            name: build_string(origin, origin.package(name)) for name in shared
        }
        self.builds[plan.wheel.filename] = builds
        variant = Variant(plan=plan, builds=builds)
        mine = tuple(p for p in plan.packages if source is None or p.name not in shared)
        work = group.scratch.enter_context(scratch_dir(sum(p.bytes for p in mine)))
        if source is None:
            staged = _stage(plan, work, self.options, self.progress)
        else:
            only = frozenset(p.name for p in mine)
            staged = _stage(plan, work, self.options, self.progress, only, group.reuse(source))
        if self.single:
            write_recipes(plan, staged, self.build / "recipes", builds)
        else:
            recipe = self.build / "recipes" / subdir / "rattler-build"
            write_support(plan, staged, recipe, support_folders(variant, mine, shared))
        like = None if source is None else (source.plan, source.licenses)
        licenses = wheel_licenses(plan, work, like)
        wheel = _Wheel(plan=plan, variant=variant, staged=staged, work=work, licenses=licenses)
        group.source = source or wheel
        group.variants.append(variant)
        self._queue(wheel, tuple(p for p in mine if p.name not in shared))
        self._finish(done_only=True)

    def complete(self, release: Release) -> list[Artifact]:
        """With the release checked: pack what is left, then each subdir's recipe and
        repodata; the packages written."""
        for group in release.groups:
            variants = self.groups[group.subdir].variants
            assert [v.plan for v in variants] == list(group.plans), "planned in release order"
            # The build packs them itself only when no progress is drawn: rattler-build holds
            # the GIL while it packs, which would stop a progress bar for a whole package.
            self._queue_shared(self.groups[group.subdir], here=self.progress is None)
        self._finish(done_only=False)
        for group in release.groups:
            if not self.single:
                recipe = self.build / "recipes" / group.subdir / "rattler-build"
                variants = self.groups[group.subdir].variants
                write_release_recipe(variants, group.shared_packages, recipe)
            index_channel(self.build, group.subdir, self.records[group.subdir])
        return [
            artifact(f"{group.subdir}/{p.name}-{p.version}-{builds[p.name]}.conda", plan, p)
            for group in release.groups
            for plan in group.plans
            for builds in [self.builds[plan.wheel.filename]]
            for p in group.packaged_from(plan)
        ]

    def _queue_shared(self, group: _Group, here: bool = False) -> None:
        """The platform is planned: queue its shared packages, which list its wheels (a
        release's; a single wheel's do not); `here`: pack them in the build process."""
        if group.shared_queued:
            return
        group.shared_queued = True
        source = group.source
        assert source is not None, "a group has a wheel"
        shared = shared_packages(source.plan.recipe)
        # The platform's own check (the release's, for these wheels): what its shared
        # packages stand for and what was set aside, said in their descriptions.
        subdir = source.plan.platform.conda_subdir
        checked = None if self.single else self.release.platform(subdir)
        packages = tuple(p for p in source.plan.packages if p.name in shared)
        self._queue(source, packages, checked, here)

    def _queue(
        self,
        wheel: _Wheel,
        packages: tuple[PackagePlan, ...],
        group: PlatformGroup | None = None,
        here: bool = False,
    ) -> None:
        if not packages:
            return
        subdir = wheel.plan.platform.conda_subdir
        jobs = assemble_jobs(
            wheel.plan,
            wheel.staged,
            self.build / subdir,
            wheel.variant.builds,
            wheel.work,
            self.options.compression_level,
            self.options.threads if self.single else 0,
            packages,
            wheel.licenses,
            group,
        )
        self.queued += len(jobs)
        if self.progress is not None:
            self.progress(f"packing {wheel.plan.wheel.filename}", self.finished, self.queued)
        for job in jobs:
            if here:
                self._record(subdir, job, assemble(job))
                continue
            try:
                self.packing[self.workers.submit(assemble, job)] = (subdir, job)
            except BrokenProcessPool as exc:  # a worker ended before
                raise _worker_died(job.name) from exc

    def _finish(self, done_only: bool) -> None:
        """Finish the packages assembled so far (or, not `done_only`, every queued one as it
        is assembled), in any order: the records are written sorted."""
        futures = [f for f in self.packing if f.done()] if done_only else as_completed(self.packing)
        for future in futures:
            subdir, job = self.packing[future]
            try:
                result = future.result()
            except BrokenProcessPool as exc:
                raise _worker_died(job.name) from exc
            del self.packing[future]
            self._record(subdir, job, result)
        packing = {subdir for subdir, _ in self.packing.values()}
        for subdir, group in self.groups.items():
            if group.shared_queued and subdir not in packing:
                group.scratch.close()  # every package of the platform is packed

    def _record(self, subdir: str, job: AssembleJob, result: Assembled) -> None:
        """Finish an assembled package and keep its repodata record."""
        _check_assembled(job.name, result)
        name, record = _finished(job, result)
        self.records[subdir][name] = record
        self.finished += 1
        if self.progress is not None:
            self.progress(f"assembled {name}", self.finished, self.queued)


def _finished(job: AssembleJob, result: Assembled) -> tuple[str, dict[str, object]]:
    """(file name, repodata record) of an assembled package, finished by the build."""
    return Path(result.path).name, finish(job, result)


def _worker_died(name: str) -> ExternalToolError:
    """A worker ended without answering: killed (the kernel's OOM killer), or it could not
    start; the pool does not say how it ended, so its exit status here is -1."""
    return ExternalToolError(
        f"a worker process ended without answering while {name} was assembled (killed, out "
        "of memory, or failed to start): if the system ran out of memory, build with --jobs 1",
        [sys.executable, "-c", "multiprocessing.spawn.spawn_main"],
        -1,
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
            license=plan.wheel.license or None,
            summary=package.summary,
            description=f"{package.summary}. {split_from(plan)}"
            + (f" {release_note(group, package)}" if group is not None else ""),
            depends=tuple(conda_depends(plan, package, dict(builds))),
            license_files=licenses,
            compression_level=compression_level,
            compression_threads=threads if package.name == largest else 0,
            timestamp=timestamp,
            tmpdir=str(work / "tmp"),
            additions=info_additions(plan, package, staged.layout, compression_level),
        )
        for package in ordered
    ]


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
