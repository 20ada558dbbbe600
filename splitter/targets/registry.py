"""Every target's builder, made from the build options the command line gives: the one place
that knows which class builds which `--target`, so that the CLI asks a builder's limits and
runs it without knowing any target's internals. A target's module is imported when it is
chosen: a build loads its own target, not the other five (about 15 ms of start-up)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from splitter.model import CondaBackend, Limits, Rpath, Target
from splitter.targets.builder import Builder
from splitter.targets.conda.options import DEFAULT_LEVEL, WORKERS, CondaOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildOptions:
    """`splitter build`'s options; each target reads those that concern it."""

    target: Target = Target.CONDA
    guard: bool = False
    # tree
    prefix: str = "/usr/local"
    libdir: str = "lib"
    includedir: str = "include"
    sitedir: str | None = None
    rpath: Rpath = Rpath.RELATIVE
    # conda
    compression_level: int = DEFAULT_LEVEL
    backend: CondaBackend = CondaBackend.ASSEMBLE
    jobs: int = WORKERS

    @property
    def conda(self) -> CondaOptions:
        """The conda target's options."""
        return CondaOptions(
            compression_level=self.compression_level,
            backend=self.backend,
            guard=self.guard,
            jobs=self.jobs,
        )


DEFAULTS = BuildOptions()  # what the CLI shows and uses when an option is not given


def target_limits(options: BuildOptions) -> Limits:
    """What the chosen target cannot build, known before the builder starts."""
    if options.target == Target.CONDA:
        return options.conda.limits
    return _simple(options).limits


@contextlib.contextmanager
def open_builder(options: BuildOptions) -> Iterator[Builder]:
    """The chosen target's builder, for the time of one build (conda's worker processes start
    now, while the plan is made, and stop when it ends)."""
    if options.target == Target.CONDA:
        from splitter.targets.conda.build import conda_builder

        with conda_builder(options.conda) as builder:
            yield builder
        return
    yield _simple(options)


def _simple(options: BuildOptions) -> Builder:
    """A builder without set-up or tear-down."""
    target, guard = options.target, options.guard
    if target == Target.TREE:
        from splitter.targets.tree import TreeBuilder

        return TreeBuilder(
            prefix=options.prefix,
            libdir=options.libdir,
            includedir=options.includedir,
            sitedir=options.sitedir,
            rpath=options.rpath,
            guard=guard,
        )
    if target == Target.WHEEL:
        from splitter.targets.wheel import WheelBuilder

        return WheelBuilder(guard=guard)
    if target == Target.DEB:
        from splitter.targets.distro.deb import DebBuilder

        return DebBuilder(guard=guard)
    if target == Target.RPM:
        from splitter.targets.distro.rpm import RpmBuilder

        return RpmBuilder(guard=guard)
    assert target == Target.CONAN, target
    from splitter.targets.conan import ConanBuilder

    return ConanBuilder(guard=guard)
