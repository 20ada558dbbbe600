"""The assembled channel of a release (a single wheel is a release of one), built as a
pipeline: the build process plans and stages a wheel while the worker processes
(splitter.targets.conda.workers) pack the packages of the one before; it finishes each
package as it is assembled, then writes the recipes and each subdir's repodata."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import (
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    as_completed,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from splitter.errors import ExternalToolError
from splitter.manifest import Artifact
from splitter.model import PackagePlan, Plan
from splitter.plan.release import PlatformGroup, Release, ReleasePlanning, shared_packages
from splitter.targets.builder import artifact
from splitter.targets.conda.assemble import Assembled, AssembleJob, assemble, finish
from splitter.targets.conda.channel import index_channel
from splitter.targets.conda.jobs import assemble_jobs, wheel_licenses
from splitter.targets.conda.meta import build_string
from splitter.targets.conda.options import CondaOptions, stage_prefix
from splitter.targets.conda.recipes import write_recipes, write_support
from splitter.targets.conda.releaserecipe import Variant, support_folders, write_release_recipe
from splitter.targets.scratch import scratch_dir
from splitter.targets.stage import Progress, Reusable, Staged, reusable


@dataclass(frozen=True, slots=True, kw_only=True)
class _Wheel:
    """A planned wheel, staged: what its packages are assembled from."""

    plan: Plan
    variant: Variant  # its build strings, and its part of the release recipe
    staged: Staged
    work: Path  # its scratch
    licenses: Mapping[str, tuple[str, ...]]  # package -> its licence texts under `work`


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


class Pipeline:
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

    def __enter__(self) -> Pipeline:
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
            staged = stage_prefix(plan, work, self.options, self.progress)
        else:
            only = frozenset(p.name for p in mine)
            staged = stage_prefix(
                plan, work, self.options, self.progress, only, group.reuse(source)
            )
        licenses = wheel_licenses(plan, work)
        wheel = _Wheel(plan=plan, variant=variant, staged=staged, work=work, licenses=licenses)
        group.source = source or wheel
        group.variants.append(variant)
        self._queue(wheel, tuple(p for p in mine if p.name not in shared))
        # The recipes after the queue: the workers pack meanwhile (a single wheel's export,
        # the last package to finish, starts before them).
        if self.single:
            write_recipes(plan, staged.install, self.build / "recipes", builds)
        else:
            recipe = self.build / "recipes" / subdir / "rattler-build"
            write_support(plan, staged.install, recipe, support_folders(variant, mine, shared))
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
            # the sha256 and size the channel index took from the finished package
            artifact(f"{group.subdir}/{name}", plan, p, str(record["sha256"]), _size(record))
            for group in release.groups
            for plan in group.plans
            for builds in [self.builds[plan.wheel.filename]]
            for p in group.packaged_from(plan)
            for name in [f"{p.name}-{p.version}-{builds[p.name]}.conda"]
            for record in [self.records[group.subdir][name]]
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
            with self._removing_packed():
                self._record(subdir, job, result)
        for group in self._packed():
            group.scratch.close()

    def _packed(self) -> list[_Group]:
        """The platforms every package of which is packed: their scratch can go."""
        packing = {subdir for subdir, _ in self.packing.values()}
        return [
            group
            for subdir, group in self.groups.items()
            if group.shared_queued and subdir not in packing
        ]

    @contextlib.contextmanager
    def _removing_packed(self) -> Iterator[None]:
        """Remove the scratch of the platforms packed by now in a helper thread while the
        build finishes a package (which reads only OUT): the last package's finishing and
        the removal of its thousands of staged files then overlap, at the end of every
        build."""
        packed = self._packed()
        if not packed:
            yield
            return

        def remove() -> None:
            for group in packed:
                group.scratch.close()

        with ThreadPoolExecutor(max_workers=1) as helper:
            removed = helper.submit(remove)
            yield
            removed.result()

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


def _size(record: Mapping[str, object]) -> int:
    """A repodata record's size."""
    size = record["size"]
    assert isinstance(size, int), record
    return size


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


def _check_assembled(name: str, result: Assembled) -> None:
    if result.error:
        raise ExternalToolError(
            f"rattler-build could not assemble {name}", ["assemble_package", name], 1, result.error
        )
