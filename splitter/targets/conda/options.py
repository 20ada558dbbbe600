"""How `--target conda` packages: the builder's options (the CLI's, checked there), and a
plan's packages staged by them as a conda prefix, for the assembled channel and the recipe
backends alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from splitter.model import CondaBackend, Limits, Plan, Rpath, Target
from splitter.plan.layout import conda_layout
from splitter.targets.conda.assemble import release_freed_memory
from splitter.targets.conda.placeholder import CONDA_PLACEHOLDER
from splitter.targets.stage import Progress, Reusable, Staged, doc_sbom, stage

DEFAULT_LEVEL = 9
# Default worker processes packing at once: two keep both cores busy beside the build's
# planning and staging; one is slower and leaner (docs/performance.md).
WORKERS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CondaOptions:
    """How `--target conda` packages (the CLI's options, checked there)."""

    compression_level: int = DEFAULT_LEVEL
    threads: int = 2  # zstd threads of a single wheel's largest package
    backend: CondaBackend = CondaBackend.ASSEMBLE
    guard: bool = False
    jobs: int = WORKERS  # worker processes packing at once

    @property
    def limits(self) -> Limits:
        """Every platform; a release by the assemble backend only (a recipe backend builds
        the recipe of one wheel)."""
        release = self.backend == CondaBackend.ASSEMBLE
        return Limits(
            target=Target.CONDA,
            release=release,
            why_not_release=""
            if release
            else (
                f"a release is packaged with --backend assemble, not {self.backend}: its "
                "rattler-build recipe (a variant per Python) is written under "
                "OUT/recipes/<subdir>/ for a rebuild"
            ),
        )


def stage_prefix(
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
    layout = conda_layout(plan.wheel, f"{CONDA_PLACEHOLDER}/bin/python")
    subdir = plan.platform.conda_subdir
    staged = stage(
        plan,
        layout,
        root.joinpath,
        Rpath.RELATIVE,
        progress,
        options.guard,
        only,
        reuse=reuse,
        sbom=lambda name: doc_sbom(
            name, name, plan.wheel.version, f"pkg:conda/{name}@{plan.wheel.version}?subdir={subdir}"
        ),
    )
    release_freed_memory()  # staging's buffers, before the packages are compressed
    return staged
