"""splitter verify: the release checks, run on any built output."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from splitter.errors import UsageError
from splitter.input.fetch import machine_subdir
from splitter.manifest import check_artifacts, read_manifest
from splitter.model import Only
from splitter.plan.facts import MACOS_SUBDIRS
from splitter.verify.coload import Outcome, coload_items, coload_matrix
from splitter.verify.consumer import (
    build_consumer,
    cmake_version,
    expected_output,
    run_model,
    run_model_python,
)
from splitter.verify.emulate import Emulator, elf_subdir, emulator_for
from splitter.verify.install import Installed, install
from splitter.verify.macos import NEEDS_MACOS, is_macos_output, macos_checks
from splitter.verify.release import Environment, release_environments


class Status(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # could not run here; the detail says why


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One row of the report."""

    check: str
    subject: str
    expected: str
    outcome: str
    status: Status
    detail: str = ""


def verify_release(
    environments: list[Environment],
    pythons: Sequence[Path],
    cmakes: list[Path],
    jobs: int,
    only: tuple[str, ...],
    cross_cxx: Path | None = None,
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
        if environment.subdir in MACOS_SUBDIRS.values() and environment.subdir != here:
            # What runs for a macOS output anywhere: its static checks (signatures, dyld's
            # resolution, kernels, files that travel together, CMake as Darwin), and rows
            # saying the rest needs a Mac; no CPython of the export's version is needed.
            checks += _verify(environment.source, environment.paths, [], cmakes, jobs, only)
            continue
        if environment.subdir != here and environment.subdir not in emulated:
            emulated[environment.subdir] = environment.label
            checks += _verify(
                environment.source, environment.paths, [], cmakes, jobs, only, cross_cxx
            )
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
            checks += _verify(
                environment.source, environment.paths, [found[version]], cmakes, jobs, only
            )
            continue
        checks.append(skipped("release", "all", reason, environment.label))
    return checks


def interpreters(given: Sequence[Path], wanted: list[str]) -> dict[str, Path]:
    """CPython version ("3.11") -> an interpreter of it: the `given` ones (each must run),
    else this interpreter and each `python3.X` of `wanted` found on PATH that runs (a pyenv
    shim for a version not installed does not)."""
    found: dict[str, Path] = {}
    if given:
        for interpreter in given:
            version = _python_version(interpreter)
            if version is None:
                raise UsageError(
                    f"--python {interpreter} does not run as a Python interpreter: pass the "
                    "path of a python executable"
                )
            found.setdefault(version, interpreter)
        return found
    candidates = [Path(sys.executable)]
    candidates += [Path(p) for v in wanted if (p := shutil.which(f"python{v}"))]
    for interpreter in candidates:
        version = _python_version(interpreter)
        if version is not None:
            found.setdefault(version, interpreter)
    return found


def _python_version(interpreter: Path) -> str | None:
    try:
        result = subprocess.run(
            [str(interpreter), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    version = result.stdout.strip()
    return version if result.returncode == 0 and version else None


def torch_available(python: Path) -> bool:
    """Whether `python` can import torch."""
    result = subprocess.run([str(python), "-c", "import torch"], capture_output=True, check=False)
    return result.returncode == 0


CHECKS = tuple(Only)
# The rows of an output whose programs cannot run here: (check, expected), by --only name.
FOREIGN = {
    "co-load": (("co-load", "each pair loads as the metadata says"),),
    "cmake": (("model (C++)", "identical output"), ("missing component", "configure fails")),
    "relocation": (("relocation", "runs after a move"),),
    "python": (("model (Python)", "identical output"),),
}
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
    environments = release_environments(out, manifest)
    if environments is not None:
        return verify_release(environments, pythons, cmakes, jobs, only, cross_cxx)
    return _verify(out, None, pythons, cmakes, jobs, only, cross_cxx)


def _verify(
    out: Path,
    paths: tuple[str, ...] | None,
    pythons: Sequence[Path],
    cmakes: list[Path],
    jobs: int,
    only: tuple[str, ...],
    cross_cxx: Path | None = None,
) -> list[Check]:
    """The checks on `out` installed (all its packages, or its artifacts `paths`)."""
    python = pythons[0] if pythons else Path(sys.executable)
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="splitter-verify-") as scratch_name:
        scratch = Path(scratch_name)
        full = install(out, scratch / "full", paths=paths)
        if is_macos_output(full):
            return _macos(full, cmakes, only)
        theirs, here = elf_subdir(full.libdir), machine_subdir()
        emulator = None
        if theirs is not None and theirs != here:
            found = emulator_for(theirs, cross_cxx)
            if isinstance(found, str):  # nothing here runs its programs: every check says so
                rows = [row for name in only for row in FOREIGN.get(name, ())]
                return [skipped(check, expected, found) for check, expected in rows]
            emulator = found
        torch_python = python if emulator is None and torch_available(python) else None
        items = coload_items(full.libdir, full.sitedir) if "co-load" in only else []
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
                    check="co-load",
                    subject=f"{pair.first} then {pair.second}",
                    expected=pair.expected,
                    outcome=pair.outcome,
                    status=status,
                    detail=pair.detail,
                )
            )
        if "cmake" in only and not cmakes:
            checks.append(skipped("model (C++)", "identical output", NO_CMAKE))
            checks.append(skipped("missing component", "configure fails", NO_CMAKE))
        elif "cmake" in only:
            checks += consumer_checks(out, full, cmakes, scratch, emulator)
        if "relocation" in only:
            checks.append(relocation_check(full, cmakes, scratch, emulator))
        if "python" in only and emulator is not None:
            reason = f"needs a CPython and torch built for {emulator.machine}: not run here"
            checks.append(skipped("model (Python)", "identical output", reason, theirs or "-"))
        elif "python" in only:
            checks.append(python_check(full, python, torch_python))
        if "depends" in only and full.kind in ("deb", "rpm"):
            checks.append(depends_check(full))
    return checks


def _macos(full: Installed, cmakes: list[Path], only: tuple[str, ...]) -> list[Check]:
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
            full, cmakes if "cmake" in only else []
        )
    ]
    wanted = {
        "co-load": ("co-load", "each pair loads as the metadata says"),
        "cmake": ("model (C++)", "identical output"),
        "relocation": ("relocation", "runs after a move"),
        "python": ("model (Python)", "identical output"),
    }
    # "depends" is a .deb/.rpm check: a conda, wheel or tree output has no row for it
    checks += [
        skipped(*wanted[name], NEEDS_MACOS) for name in CHECKS if name in only and name in wanted
    ]
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


def consumer_checks(
    out: Path,
    full: Installed,
    cmakes: list[Path],
    scratch: Path,
    emulator: Emulator | None = None,
) -> list[Check]:
    """Per CMake: the consumer runs the model, and fails to configure without kernels-quantized
    (with `emulator`: cross-compiled, and run under it).

    When kernels-quantized was built, "model (C++)" builds the consumer against every package and
    compares the model's output with the shipped one; "missing component" builds it against the
    runtime alone and passes when configure fails naming executorch-kernels-quantized.
    """
    checks = []
    has_quantized = full.quantized in full.packages
    runtime_only = install(out, scratch / "runtime-only", only=(full.runtime,), paths=full.paths)
    toolchain = None if emulator is None else emulator.toolchain(scratch / "toolchain")
    for index, cmake in enumerate(cmakes):
        version = ".".join(map(str, cmake_version(cmake)))
        subject = f"CMake {version}"
        if emulator is not None:
            subject += f", {emulator.machine} under qemu"
        build = scratch / f"consumer-{index}"
        if has_quantized:
            built = build_consumer(
                cmake, build / "q", prefix=full.cmake_prefix, quantized=True, toolchain=toolchain
            )
            checks.append(_model_check(built, build / "q.bin", "model (C++)", subject, emulator))
        missing = build_consumer(
            cmake,
            build / "r",
            prefix=runtime_only.cmake_prefix,
            quantized=True,
            toolchain=toolchain,
        )
        message = f"install the {full.quantized_name} package"  # the config's fatal error
        named = missing.returncode != 0 and message in " ".join(missing.output.split())
        checks.append(
            Check(
                check="missing component",
                subject=subject,
                expected=f"configure fails naming {full.quantized_name}",
                outcome="as expected" if named else "configured or unnamed",
                status=Status.PASS if named else Status.FAIL,
                detail=""
                if named
                else missing.output.strip().splitlines()[-1:][0]
                if missing.output.strip()
                else "",
            )
        )
    return checks


def _model_check(
    built: Any, out_file: Path, check: str, subject: str, emulator: Emulator | None = None
) -> Check:
    if built.returncode != 0:
        return Check(
            check=check,
            subject=subject,
            expected="identical output",
            outcome="build failed",
            status=Status.FAIL,
            detail=built.output.strip().splitlines()[-1] if built.output else "",
        )
    run = run_model(built.runner, out_file, emulator)
    same = run.returncode == 0 and out_file.read_bytes() == expected_output()
    return Check(
        check=check,
        subject=subject,
        expected="identical output",
        outcome="identical" if same else f"exit {run.returncode}",
        status=Status.PASS if same else Status.FAIL,
        detail="" if same else (run.stderr.strip().splitlines() or [""])[-1],
    )


def relocation_check(
    full: Installed, cmakes: list[Path], scratch: Path, emulator: Emulator | None = None
) -> Check:
    """A consumer installed beside the libraries still runs after the whole tree moves (with
    `emulator`: cross-compiled, and run under it)."""
    modern = [c for c in cmakes if cmake_version(c) >= (3, 28)]
    if full.quantized not in full.packages:
        return skipped("relocation", "runs after a move", "needs the kernels-quantized package")
    if not modern:
        found = ", ".join(".".join(map(str, cmake_version(c))) for c in cmakes) or "none"
        return skipped(
            "relocation",
            "runs after a move",
            f"needs CMake >= 3.28 ($ORIGIN link options; found {found}): pass --cmake with "
            "one (pip install 'cmake>=3.28')",
        )
    copy = scratch / "relocate" / "before"
    shutil.copytree(full.root, copy, symlinks=True)
    prefix = copy / full.cmake_prefix.relative_to(full.root)
    toolchain = None if emulator is None else emulator.toolchain(scratch / "toolchain")
    built = build_consumer(
        modern[0], scratch / "relocate-build", prefix=prefix, quantized=True, toolchain=toolchain
    )
    if built.returncode != 0:
        return Check(
            check="relocation",
            subject="CMake >= 3.28",
            expected="runs after a move",
            outcome="build failed",
            status=Status.FAIL,
        )
    bindir = copy / full.home.relative_to(full.root) / "bin"
    bindir.mkdir(exist_ok=True)
    shutil.copy2(built.runner, bindir / "runner")
    moved = scratch / "relocate" / "after" / "moved"
    moved.parent.mkdir(parents=True)
    os.rename(copy, moved)
    runner = moved / full.home.relative_to(full.root) / "bin" / "runner"
    out_file = scratch / "relocate" / "out.bin"
    run = run_model(runner, out_file, emulator)
    same = run.returncode == 0 and out_file.read_bytes() == expected_output()
    where = "" if emulator is None else f", {emulator.machine} under qemu"
    return Check(
        check="relocation",
        subject=f"{runner.relative_to(moved.parent)}{where}",
        expected="runs after a move",
        outcome="identical" if same else "failed",
        status=Status.PASS if same else Status.FAIL,
        detail="" if same else (run.stderr.strip().splitlines() or [""])[-1],
    )


def depends_check(full: Installed) -> Check:
    """Every dependency dpkg or rpm found unmet is outside the split (glibc, the GCC runtime,
    torch, Python: what a scratch root cannot hold); one on a package of the split, or on a
    library one of them installs, is a fault of the split's metadata."""
    installed = {p.name for p in full.root.rglob("*.so*")}

    def in_split(name: str) -> bool:
        words = {w.strip("()") for w in name.split()}
        return bool(words & set(full.split_names)) or name in installed

    ours = sorted(d for d in full.unmet if in_split(_dependency_name(d)))
    outside = sorted({_dependency_name(d) for d in full.unmet if d not in ours})
    tool = "dpkg" if full.kind == "deb" else "rpm"
    return Check(
        check="depends",
        subject=", ".join(full.packages),
        expected="unmet only outside the split",
        outcome="as expected" if not ours else f"{len(ours)} unmet in the split",
        status=Status.PASS if not ours else Status.FAIL,
        detail="; ".join(ours)
        if ours
        else f"{tool} found unmet, outside the split: {', '.join(outside) or 'none'}",
    )


def _dependency_name(dependency: str) -> str:
    """The package or capability an unmet-dependency line is about: dpkg's "P depends on D
    (>= v)" -> D; rpm's "D >= v is needed by P" -> D (a rich dependency, "(A with B)", whole;
    a library capability without its symbol version, libc.so.6(GLIBC_2.14)(64bit) ->
    libc.so.6)."""
    if " depends on " in dependency:
        return dependency.split(" depends on ", 1)[1].split(" (")[0]
    capability = dependency.split(" is needed by ")[0].strip()
    if capability.startswith("("):
        return capability
    return capability.split()[0].split("(")[0]


def skipped(check: str, expected: str, reason: str, subject: str = "-") -> Check:
    """A check that could not run here, with the reason."""
    return Check(
        check=check,
        subject=subject,
        expected=expected,
        outcome="skipped",
        status=Status.SKIP,
        detail=reason,
    )


def python_check(full: Installed, python: Path, torch_python: Path | None) -> Check:
    """executorch.runtime from the installed export side gives the shipped output, run by
    `torch_python` (`python` when it imports torch, else None: skipped)."""
    if full.sitedir is None or not (full.sitedir / "executorch" / "runtime").exists():
        return skipped("model (Python)", "identical output", "the export package is not built")
    if torch_python is None:
        return skipped(
            "model (Python)",
            "identical output",
            f"needs torch: {python} cannot import it; pass --python with an interpreter that "
            "imports the torch the export package requires",
            str(python),
        )
    library_path = full.libdir if full.kind in ("deb", "rpm") else None
    run = run_model_python(torch_python, full.sitedir, library_path)
    same = run.returncode == 0 and run.stdout == expected_output()
    return Check(
        check="model (Python)",
        subject=str(torch_python),
        expected="identical output",
        outcome="identical" if same else f"exit {run.returncode}",
        status=Status.PASS if same else Status.FAIL,
        detail="" if same else (run.stderr.decode().strip().splitlines() or [""])[-1],
    )
