"""splitter verify: the release checks, run on any built output (the orchestration: which
environments, which checks, under emulation or not; the checks are splitter.verify.checks)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import UsageError
from splitter.input.fetch import machine_subdir
from splitter.manifest import check_artifacts, read_manifest
from splitter.model import Only, Recipe
from splitter.platforms import MACOSX, by_subdir
from splitter.verify.checks import (
    consumer_checks,
    depends_check,
    python_check,
    relocation_check,
)
from splitter.verify.coload import Outcome, coload_items, coload_matrix
from splitter.verify.emulate import emulator_for
from splitter.verify.headers import header_checks
from splitter.verify.install import Installed, install
from splitter.verify.interpreters import interpreters, torch_available
from splitter.verify.macos import NEEDS_MACOS, is_macos_output, macos_checks
from splitter.verify.recipe import build_recipe
from splitter.verify.release import Environment, release_environments
from splitter.verify.rows import CHECKS, EXPECTED, FOREIGN, Check, Row, Status, skipped
from splitter.verify.sbom import sbom_checks

# What the CLI and the tests take from here (the checks' records and the entry point).
__all__ = ["CHECKS", "NO_CMAKE", "Check", "Status", "depends_check", "verify"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What every environment of one verify run is checked with."""

    cmakes: tuple[Path, ...]
    jobs: int
    only: tuple[str, ...]  # the --only names
    cross_cxx: Path | None  # the cross C++ compiler for an output of another architecture
    recipe: Recipe  # the recipe the output was built with (its manifest says which)


def verify_release(
    environments: list[Environment], pythons: Sequence[Path], options: Options
) -> list[Check]:
    """The checks once per environment of a release's output (its shared packages beside one
    export) that this machine can run and for which there is a CPython of its export's
    version; every other environment is a skipped row saying what it needs. The interpreters
    are `pythons`, else the ones found: this one and `python3.X` on PATH for each X the
    release has. A Linux platform of another architecture has its C++ checks run once, with
    its first environment, under emulation (splitter.verify.emulate)."""
    found = interpreters(pythons, sorted({e.python for e in environments}))
    here = machine_subdir()
    checks: list[Check] = []
    emulated: dict[str, str] = {}  # a foreign Linux subdir -> the environment checked for it
    for environment in environments:
        version = environment.python
        if _is_macos(environment.subdir) and environment.subdir != here:
            # What runs for a macOS output anywhere: its static checks (signatures, dyld's
            # resolution, kernels, files that travel together, CMake as Darwin), and rows
            # saying the rest needs a Mac; no CPython of the export's version is needed.
            checks += _verify(environment.source, environment.paths, [], options)
            continue
        if environment.subdir != here and environment.subdir not in emulated:
            emulated[environment.subdir] = environment.label
            checks += _verify(environment.source, environment.paths, [], options)
            continue
        if environment.subdir != here:
            reason = (
                f"its C++ packages are checked with {emulated[environment.subdir]}; its "
                f"Python side needs a {environment.subdir} machine (this is {here or 'neither'})"
            )
        elif version not in found:
            have = ", ".join(sorted(found)) or "none"
            reason = (
                f"needs CPython {version}: pass --python with one (given {have})"
                if pythons
                else f"needs CPython {version}: no python{version} on PATH (found {have}); "
                "pass --python with one"
            )
        else:
            checks += _verify(environment.source, environment.paths, [found[version]], options)
            continue
        checks.append(skipped(Row.RELEASE, EXPECTED[Row.RELEASE], reason, environment.label))
    return checks


NO_CMAKE = "no CMake found: pass --cmake, or install one (apt-get install cmake; pip install cmake)"


def verify(
    out: Path,
    pythons: Sequence[Path],
    cmakes: list[Path],
    jobs: int = 2,
    only: tuple[str, ...] = CHECKS,
    cross_cxx: Path | None = None,
) -> list[Check]:
    """Install `out` in scratch space and run the checks; nothing is written to `out`. The
    Python checks use the first of `pythons` (default: this interpreter). A release's output
    (channel, wheelhouse or trees) is verified once per environment this machine can run,
    with an interpreter of its export's Python from `pythons` or found on PATH (see
    verify_release). A Linux output of another architecture has its C++ checks run under
    qemu, built with a cross C++ compiler (`cross_cxx`, else found on PATH;
    splitter.verify.emulate)."""
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}: choose from {', '.join(map(str, CHECKS))}")
    if pythons:
        interpreters(pythons, [])  # each --python runs, or a UsageError names it, before work
    manifest = read_manifest(out)
    check_artifacts(out, manifest)  # an altered output is refused before anything is installed
    recipe = build_recipe(out, manifest)  # so is one whose recipe is not the build's
    options = Options(
        cmakes=tuple(cmakes), jobs=jobs, only=only, cross_cxx=cross_cxx, recipe=recipe
    )
    environments = release_environments(out, manifest)
    if environments is not None:
        return verify_release(environments, pythons, options)
    return _verify(out, None, pythons, options)


def _verify(
    out: Path, paths: tuple[str, ...] | None, pythons: Sequence[Path], options: Options
) -> list[Check]:
    """The checks on `out` installed (all its packages, or its artifacts `paths`)."""
    python = pythons[0] if pythons else Path(sys.executable)
    cmakes, jobs, only = list(options.cmakes), options.jobs, options.only
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="splitter-verify-") as scratch_name:
        scratch = Path(scratch_name)
        full = install(out, scratch / "full", paths=paths)
        # static: the SBOMs and headers are checked wherever the output runs or not
        checks += sbom_checks(full) if Only.SBOM in only else []
        checks += header_checks(full, options.recipe) if Only.HEADERS in only else []
        if is_macos_output(full):
            return checks + _macos(full, options)
        theirs, here = full.platform, machine_subdir()
        emulator = None
        if theirs != here:
            found = emulator_for(theirs, options.cross_cxx)
            if isinstance(found, str):  # nothing here runs its programs: every check says so
                rows = [row for name in only for row in FOREIGN.get(name, ())]
                return checks + [skipped(row, EXPECTED[row], found) for row in rows]
            emulator = found
        torch_python = python if emulator is None and torch_available(python) else None
        items = coload_items(full.libdir, full.sitedir) if Only.CO_LOAD in only else []
        emulated = None if emulator is None else (emulator, scratch / "loader")
        with system_libdir(full):
            pairs = coload_matrix(
                items, full.verdicts, Path(sys.executable), torch_python, jobs, emulated
            )
        for pair in pairs:
            status = (
                Status.SKIP
                if pair.outcome == Outcome.SKIPPED
                else (Status.PASS if pair.ok else Status.FAIL)
            )
            checks.append(
                Check(
                    check=Row.CO_LOAD,
                    subject=f"{pair.first} then {pair.second}",
                    expected=pair.expected,
                    outcome=pair.outcome,
                    status=status,
                    detail=pair.detail,
                )
            )
        if Only.CMAKE in only and not cmakes:
            checks += [skipped(row, EXPECTED[row], NO_CMAKE) for row in FOREIGN[Only.CMAKE]]
        elif Only.CMAKE in only:
            checks += consumer_checks(out, full, cmakes, scratch, emulator)
        if Only.RELOCATION in only:
            checks.append(relocation_check(full, cmakes, scratch, emulator))
        if Only.PYTHON in only and emulator is not None:
            reason = f"needs a CPython and torch built for {emulator.machine}: not run here"
            row = Row.MODEL_PYTHON
            checks.append(skipped(row, EXPECTED[row], reason, theirs or "-"))
        elif Only.PYTHON in only:
            checks.append(python_check(full, python, torch_python))
        if Only.DEPENDS in only and full.kind in ("deb", "rpm"):
            checks.append(depends_check(full))
    return checks


def _macos(full: Installed, options: Options) -> list[Check]:
    """A macOS output verified on another machine: what runs here, and a skipped row, saying
    plainly that it needs a Mac, for every check that must load the code."""
    checks = [
        Check(
            check=check,
            subject=subject,
            expected=expected,
            outcome="as expected" if passed else "failed",
            status=Status.PASS if passed else Status.FAIL,
            detail=detail,
        )
        for check, subject, expected, detail, passed in macos_checks(
            full, list(options.cmakes) if Only.CMAKE in options.only else [], options.recipe
        )
    ]
    # one row per check that needs a Mac (its CMake rows are the Darwin ones above); "depends"
    # is a .deb/.rpm check: a conda, wheel or tree output has no row for it
    wanted = [FOREIGN[name][0] for name in CHECKS if name in options.only and name in FOREIGN]
    checks += [skipped(row, EXPECTED[row], NEEDS_MACOS) for row in wanted]
    return checks


@contextlib.contextmanager
def system_libdir(full: Installed) -> Iterator[None]:
    """For a .deb or .rpm root: its libdir on LD_LIBRARY_PATH for the processes started
    inside (the co-load loaders). Installed for real, that libdir is the dynamic linker's
    default (/usr/lib/<triplet>, /usr/lib64), which is why the packages carry no RUNPATH."""
    if full.kind not in ("deb", "rpm"):
        yield
        return
    before = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = str(full.libdir)
    try:
        yield
    finally:
        if before is None:
            del os.environ["LD_LIBRARY_PATH"]
        else:
            os.environ["LD_LIBRARY_PATH"] = before


def _is_macos(subdir: str) -> bool:
    """Whether `subdir` is a macOS platform's."""
    platform = by_subdir(subdir)
    return platform is not None and platform.family == MACOSX
