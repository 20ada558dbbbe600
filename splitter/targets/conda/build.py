"""`--target conda`: the builder. Its worker processes start with it (conda_builder); a
build packs a release's channel through the pipeline (splitter.targets.conda.pipeline), or,
with a recipe backend, builds a single wheel's recipes with that tool
(splitter.targets.conda.recipebuild)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import MissingToolError
from splitter.manifest import Artifact
from splitter.model import CondaBackend, Limits, Plan, Target
from splitter.plan.release import Release, ReleasePlanning
from splitter.targets.builder import build_output
from splitter.targets.conda.options import DEFAULT_LEVEL, WORKERS, CondaOptions
from splitter.targets.conda.pipeline import Pipeline
from splitter.targets.conda.recipebuild import build_from_recipes
from splitter.targets.conda.workers import start_workers
from splitter.targets.stage import Progress

__all__ = [
    "DEFAULT_LEVEL",
    "WORKERS",
    "CondaBuilder",
    "CondaOptions",
    "build_conda",
    "build_conda_release",
    "conda_builder",
]


@dataclass(frozen=True, slots=True)
class CondaBuilder:
    """A conda build whose worker processes are running (see conda_builder): a release's
    channel, a single wheel being a release of one."""

    options: CondaOptions
    workers: ProcessPoolExecutor | None  # None with a recipe backend: the tool packs
    target: Target = Target.CONDA

    @property
    def limits(self) -> Limits:
        """See CondaOptions.limits."""
        return self.options.limits

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        if self.workers is None:
            return build_from_recipes(release, build, progress, self.options)
        channel = Pipeline(build, self.options, progress, self.workers, release)
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
    Pipeline); the release is checked when the last is planned, and a refusal leaves nothing,
    as OUT is written only when complete."""
    with conda_builder(options) as builder:
        return build_output(builder, release, out, progress).written
