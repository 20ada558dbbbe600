"""The checks `splitter verify` runs on an installed output: the C++ consumer and the missing
component, relocation, the Python model, and a .deb/.rpm's unmet dependencies."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from splitter.verify.consumer import (
    TIMED_OUT,
    build_consumer,
    cmake_version,
    expected_output,
    run_model,
    run_model_python,
)
from splitter.verify.emulate import Emulator
from splitter.verify.install import Installed, install
from splitter.verify.rows import EXPECTED, Check, Row, Status, skipped


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
            checks.append(_model_check(built, build / "q.bin", subject, emulator))
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
                check=Row.MISSING_COMPONENT,
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
    built: Any, out_file: Path, subject: str, emulator: Emulator | None = None
) -> Check:
    check = Row.MODEL_CXX
    if built.returncode != 0:
        return Check(
            check=check,
            subject=subject,
            expected=EXPECTED[check],
            outcome="build failed",
            status=Status.FAIL,
            detail=built.output.strip().splitlines()[-1] if built.output else "",
        )
    run = run_model(built.runner, out_file, emulator)
    same = run.returncode == 0 and out_file.read_bytes() == expected_output()
    return Check(
        check=check,
        subject=subject,
        expected=EXPECTED[check],
        outcome="identical" if same else _ended(run.returncode),
        status=Status.PASS if same else Status.FAIL,
        detail="" if same else (run.stderr.strip().splitlines() or [""])[-1],
    )


def _ended(returncode: int) -> str:
    """How a run that did not give the model's output ended."""
    return "timed out" if returncode == TIMED_OUT else f"exit {returncode}"


def relocation_check(
    full: Installed, cmakes: list[Path], scratch: Path, emulator: Emulator | None = None
) -> Check:
    """A consumer installed beside the libraries still runs after the whole tree moves (with
    `emulator`: cross-compiled, and run under it)."""
    row = Row.RELOCATION
    modern = [c for c in cmakes if cmake_version(c) >= (3, 28)]
    if full.quantized not in full.packages:
        return skipped(row, EXPECTED[row], "needs the kernels-quantized package")
    if not modern:
        found = ", ".join(".".join(map(str, cmake_version(c))) for c in cmakes) or "none"
        return skipped(
            row,
            EXPECTED[row],
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
            check=row,
            subject="CMake >= 3.28",
            expected=EXPECTED[row],
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
        check=row,
        subject=f"{runner.relative_to(moved.parent)}{where}",
        expected=EXPECTED[row],
        outcome="identical" if same else "timed out" if run.returncode == TIMED_OUT else "failed",
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
        check=Row.DEPENDS,
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


def python_check(full: Installed, python: Path, torch_python: Path | None) -> Check:
    """executorch.runtime from the installed export side gives the shipped output, run by
    `torch_python` (`python` when it imports torch, else None: skipped)."""
    row = Row.MODEL_PYTHON
    if full.sitedir is None or not (full.sitedir / "executorch" / "runtime").exists():
        return skipped(row, EXPECTED[row], "the export package is not built")
    if torch_python is None:
        return skipped(
            row,
            EXPECTED[row],
            f"needs torch: {python} cannot import it; pass --python with an interpreter that "
            "imports the torch the export package requires",
            str(python),
        )
    library_path = full.libdir if full.kind in ("deb", "rpm") else None
    run = run_model_python(torch_python, full.sitedir, library_path)
    same = run.returncode == 0 and run.stdout == expected_output()
    return Check(
        check=row,
        subject=str(torch_python),
        expected=EXPECTED[row],
        outcome="identical" if same else _ended(run.returncode),
        status=Status.PASS if same else Status.FAIL,
        detail="" if same else (run.stderr.decode().strip().splitlines() or [""])[-1],
    )
