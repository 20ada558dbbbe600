"""verify of linux-aarch64 outputs on an x86_64 machine: the C++ checks run under qemu-user
with programs built by the aarch64 cross compiler (Debian's qemu-user and
g++-aarch64-linux-gnu, which .ci/run installs), and fail on a broken output."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from consumer_tools import cmake_executable
from rowcounts import README, coload_files, sboms

from splitter.verify.checks import consumer_checks
from splitter.verify.emulate import Emulator, emulator_for
from splitter.verify.install import install
from splitter.verify.run import CHECKS, Check, Status, verify

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="emulates aarch64 on x86_64"),
]


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian: qemu-user, g++-aarch64-linux-gnu)")


@pytest.fixture(scope="module")
def outputs(real_wheel_aarch64: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need("qemu-aarch64")
    need("aarch64-linux-gnu-g++")
    base = tmp_path_factory.mktemp("aarch64")
    built = {}
    for target in ("conda", "deb", "rpm", "tree"):
        out = base / target
        command = [sys.executable, "-m", "splitter", "-q", "build", str(real_wheel_aarch64)]
        command += ["-t", target, "-o", str(out)]
        if target == "conda":
            command += ["--compression-level", "1"]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        built[target] = out
    return built


def cpp_libraries(wheel: Path, scratch: Path) -> list[str]:
    """The wheel's C++ libraries (executorch/lib/*.so), each an AArch64 ELF per readelf."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith("executorch/lib/") and ".so" in n]
        for name in names:
            copy = scratch / Path(name).name
            copy.write_bytes(archive.read(name))
            header = subprocess.run(
                ["readelf", "-h", str(copy)], capture_output=True, text=True, check=True
            ).stdout
            assert "AArch64" in header, name
    return names


def by_check(checks: list[Check]) -> dict[str, list[Check]]:
    rows: dict[str, list[Check]] = {}
    for check in checks:
        rows.setdefault(check.check, []).append(check)
    return rows


@pytest.mark.parametrize("target", ["conda", "deb", "rpm"])
def test_aarch64_output_runs_under_qemu(
    outputs: dict[str, Path], real_wheel_aarch64: Path, target: str, tmp_path: Path
) -> None:
    """No failed row; the C++ model and relocation run under qemu, byte-identical; every C++
    library pair loads in both orders; what needs torch says so."""
    checks = verify(outputs[target], [], [cmake_executable("3.28")], 2, CHECKS)
    assert [c for c in checks if c.status is Status.FAIL] == []
    rows = by_check(checks)
    (model,) = rows["model (C++)"]
    assert model.status is Status.PASS and model.outcome == "identical", model
    assert "aarch64 under qemu" in model.subject
    assert rows["relocation"][0].status is Status.PASS
    assert rows["missing component"][0].status is Status.PASS
    libraries = len(cpp_libraries(real_wheel_aarch64, tmp_path))
    passed = [c for c in rows["co-load"] if c.status is Status.PASS]
    assert len(passed) == libraries * (libraries - 1)  # every ordered pair of the C++ libraries
    skips = {c.detail for c in checks if c.status is Status.SKIP}
    assert skips and all("aarch64" in reason for reason in skips), skips
    if target in ("deb", "rpm"):
        assert rows["depends"][0].status is Status.PASS
    # exact: every C++ library pair, the model, the missing component, relocation, the headers,
    # each SBOM the packages hold (the format's own listing) and a distro output's depends
    # pass; every pair with a Python file and the Python model are skipped (no aarch64 torch)
    files = coload_files(real_wheel_aarch64)
    passed = libraries * (libraries - 1) + 4 + sboms(outputs[target], target)
    passed += 1 if target in ("deb", "rpm") else 0
    skipped = files * (files - 1) - libraries * (libraries - 1) + 1
    counted = (
        sum(c.status is Status.PASS for c in checks),
        sum(c.status is Status.SKIP for c in checks),
    )
    assert counted == (passed, skipped)
    stated = re.search(
        rf"aarch64\s+`{target}`\s+output,\s+with\s+CMake\s+3\.28:\s+"
        r"`(\d+) passed, (\d+) skipped, 0 failed`",
        README.read_text(),
    )
    assert stated is not None and (int(stated[1]), int(stated[2])) == counted, target


def test_cli_exit_code_and_counts(
    outputs: dict[str, Path], real_wheel_aarch64: Path, tmp_path: Path
) -> None:
    """`splitter verify` of the aarch64 channel with CMake 3.25: exit 0 and exactly the rows
    the wheel makes (zipfile, readelf): every ordered pair of its C++ libraries loads under
    qemu, every pair with a Python file (`_C`, the plugins) and the Python model are skipped
    (no aarch64 torch here), relocation is skipped (it needs CMake >= 3.28); the model, the
    missing component, the headers and one SBOM per .conda pass. The README states these."""
    cmake = cmake_executable("3.25")
    command = [sys.executable, "-m", "splitter", "verify", str(outputs["conda"]), "--json"]
    result = subprocess.run([*command, "--cmake", str(cmake)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    libraries = len(cpp_libraries(real_wheel_aarch64, tmp_path))
    files = coload_files(real_wheel_aarch64)
    packages = len(list(outputs["conda"].rglob("*.conda")))
    passed = libraries * (libraries - 1) + 1 + 1 + 1 + packages  # model, missing, headers
    skipped = files * (files - 1) - libraries * (libraries - 1) + 1 + 1  # Python, relocation
    assert (summary["passed"], summary["skipped"], summary["failed"]) == (passed, skipped, 0)
    stated = re.search(
        r"aarch64 wheel's conda channel.*?`(\d+) passed, (\d+) skipped, 0 failed`",
        README.read_text(),
        re.S,
    )
    assert stated is not None and (int(stated[1]), int(stated[2])) == (passed, skipped)


def test_without_qemu_every_row_says_what_to_install(
    outputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither qemu nor the cross compiler
    everything = verify(outputs["conda"], [], [cmake_executable("3.28")], 2, CHECKS)
    # the SBOM rows are static: they run (and pass) without the foreign machine's tools
    sboms = [c for c in everything if c.check == "sbom"]
    assert len(sboms) == 3 and all(c.status is Status.PASS for c in sboms), sboms
    # so is the headers row, which needs this machine's compiler and pkg-config
    (headers,) = [c for c in everything if c.check == "headers"]
    assert headers.status is Status.SKIP
    assert "apt-get install g++ pkg-config" in headers.detail
    checks = [c for c in everything if c.check not in ("sbom", "headers")]
    assert checks and all(c.status is Status.SKIP for c in checks)
    assert {c.check for c in checks} == {
        "co-load",
        "model (C++)",
        "missing component",
        "relocation",
        "model (Python)",
    }
    for check in checks:
        assert "apt-get install qemu-user" in check.detail
        assert "apt-get install g++-aarch64-linux-gnu" in check.detail


def broken_tree(tree: Path, copy: Path) -> Path:
    shutil.copytree(tree, copy, symlinks=True)
    return copy


def tree_file(root: Path, name: str) -> Path:
    """The file `name` of the tree, outside site-packages (where the Python package holds
    upstream's CMake places, configs that forward to the runtime's)."""
    found = sorted(p for p in root.rglob(name) if p.is_file() and "site-packages" not in p.parts)
    assert len(found) == 1, found
    return found[0]


def test_a_library_of_the_wrong_architecture_fails_the_model(
    outputs: dict[str, Path], real_wheel: Path, tmp_path: Path
) -> None:
    tree = broken_tree(outputs["tree"], tmp_path / "tree")
    library = tree_file(tree, "libexecutorch_kernels_quantized.so")
    with zipfile.ZipFile(real_wheel) as archive:  # the x86_64 build of the same library
        library.write_bytes(archive.read("executorch/lib/libexecutorch_kernels_quantized.so"))
    rows = by_check(verify(tree, [], [cmake_executable("3.28")], 2, ("cmake", "relocation")))
    model, relocation = rows["model (C++)"][0], rows["relocation"][0]
    assert model.status is Status.FAIL and model.outcome == "build failed", model
    assert relocation.status is Status.FAIL and relocation.outcome == "build failed", relocation


def test_a_config_without_origin_rpaths_fails_relocation_only(
    outputs: dict[str, Path], tmp_path: Path
) -> None:
    """Without the config's $ORIGIN link options the consumer finds the libraries by absolute
    paths: it runs where it was built and not after the tree moves."""
    tree = broken_tree(outputs["tree"], tmp_path / "tree")
    config = tree_file(tree, "executorch-config.cmake")
    text = config.read_text()
    relative = ('"-Wl,-rpath,$ORIGIN"', '"-Wl,-rpath,$ORIGIN/../lib"')
    assert all(option in text for option in relative)
    for option in relative:
        text = text.replace(option, "")
    config.write_text(text)
    rows = by_check(verify(tree, [], [cmake_executable("3.28")], 2, ("cmake", "relocation")))
    assert rows["model (C++)"][0].status is Status.PASS
    relocation = rows["relocation"][0]
    assert relocation.status is Status.FAIL and relocation.outcome == "failed", relocation
    # the moved program starts under qemu and its loader finds no library: a run-time failure
    assert "cannot open shared object file" in relocation.detail, relocation


def test_a_config_that_forgets_the_package_fails_missing_component(
    outputs: dict[str, Path], tmp_path: Path
) -> None:
    tree = broken_tree(outputs["tree"], tmp_path / "tree")
    config = tree_file(tree, "executorch-config.cmake")
    text = config.read_text()
    assert "install the" in text
    config.write_text(text.replace("install the", "get the"))
    rows = by_check(verify(tree, [], [cmake_executable("3.25")], 2, ("cmake",)))
    missing = rows["missing component"][0]
    assert missing.status is Status.FAIL and missing.outcome == "configured or unnamed", missing
    assert rows["model (C++)"][0].status is Status.PASS


def test_cross_compiler_flag_is_used(outputs: dict[str, Path], tmp_path: Path) -> None:
    """--cross-cxx names the compiler: a compiler for the wrong architecture makes programs
    qemu-aarch64 cannot run, and the checks fail rather than pass."""
    wrong = shutil.which("g++")
    assert wrong is not None
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitter",
            "verify",
            str(outputs["conda"]),
            "--only",
            "cmake",
            "--cross-cxx",
            wrong,
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert result.returncode == 1, result.stdout
    rows = json.loads(result.stdout)["checks"]
    (model,) = [r for r in rows if r["check"] == "model (C++)"]
    assert model["status"] == "fail" and model["outcome"] == "build failed", model


def test_a_quantized_stub_fails_the_model_at_run_time_under_qemu(
    outputs: dict[str, Path], tmp_path: Path
) -> None:
    """The installed aarch64 libexecutorch_kernels_quantized.so swapped for a cross-built stub
    with its SONAME that registers nothing: the consumer configures, links and starts under
    qemu, and the model fails at run time (its exit code), not at build time."""
    full = install(outputs["tree"], tmp_path / "installed")
    emulator = emulator_for("linux-aarch64")
    assert isinstance(emulator, Emulator), emulator
    source = tmp_path / "stub.c"
    source.write_text("int executorch_kernels_quantized_stub(void) { return 0; }\n")
    library = full.libdir / "libexecutorch_kernels_quantized.so"
    stub = [str(emulator.cxx), "-x", "c", "-shared", "-fPIC", str(source)]
    stub += ["-Wl,-soname,libexecutorch_kernels_quantized.so", "-o", str(library)]
    subprocess.run(stub, check=True)
    header = subprocess.run(
        ["readelf", "-h", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert "AArch64" in header
    checks = consumer_checks(
        outputs["tree"], full, [cmake_executable("3.28")], tmp_path / "scratch", emulator
    )
    (model,) = by_check(checks)["model (C++)"]
    assert model.status is Status.FAIL
    assert model.outcome == "exit 1", model  # the runner's own exit, not "build failed"
    assert "OperatorMissing" in model.detail, model
