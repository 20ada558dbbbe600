"""Process exclusivity end to end: sidecars in every target, CMake, the import guard, verify."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from conda_tools import torch_python
from consumer_tools import cmake_executable

from splitter.manifest import NAME
from splitter.model import Plan
from splitter.plan.layout import make_layout
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.conda.build import build_conda
from splitter.targets.tree import build_tree
from splitter.targets.wheel import build_wheels
from splitter.verify.run import Status, verify

pytestmark = pytest.mark.integration

PLUGIN = "libquantized_ops_aot_lib.so"
QLIB = "libexecutorch_kernels_quantized.so"
SITE = "lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def dup_plan(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Plan:
    from dupplugin import make_dup_wheel

    return make_plan(make_dup_wheel(real_wheel, tmp_path_factory.mktemp("dupwheel")), load_recipe())


@pytest.fixture(scope="module")
def outputs(
    dup_plan: Plan, real_plan: Plan, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Path]]:
    """conda, tree and wheel outputs of the dup-plugin wheel (with --guard) and the real one."""
    result: dict[str, dict[str, Path]] = {}
    for label, plan in (("dup", dup_plan), ("real", real_plan)):
        root = tmp_path_factory.mktemp(label)
        layout = make_layout(plan.wheel, "/usr/local", "lib", "include", None)
        build_tree(plan, root / "tree", layout, guard=True)
        build_conda(plan, root / "conda", compression_level=1, guard=True)
        build_wheels(plan, root / "wheel", guard=True)
        result[label] = {"tree": root / "tree", "conda": root / "conda", "wheel": root / "wheel"}
    return result


def sidecars(outputs: dict[str, Path]) -> list[dict[str, object]]:
    """Every exclusivity record of every package, from all three targets."""
    from splitter.verify.install import conda_info_file

    found = []
    for manifest in sorted(outputs["tree"].glob("*.json")):
        if manifest.name != NAME:  # the output's splitter manifest
            found += json.loads(manifest.read_text())["process_exclusive"]
    for package in sorted(outputs["conda"].glob("*/*.conda")):
        # conda's is in about.json's extra alone (CEP 34: no file of splitter's own in info/)
        about = json.loads(conda_info_file(package, "info/about.json"))
        found += about["extra"]["process_exclusive"]
    for wheel in sorted(outputs["wheel"].glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            name = next(
                n for n in archive.namelist() if n.endswith("splitter-process-exclusive.json")
            )
            found += json.loads(archive.read(name))["pairs"]
    return found


def test_sidecars_in_every_target(outputs: dict[str, dict[str, Path]]) -> None:
    dup, real = sidecars(outputs["dup"]), sidecars(outputs["real"])
    # export and kernels-quantized carry it in tree (2), conda (2 about.json) and wheel (2)
    assert len(dup) == len(real) == 6
    assert all(v["in_effect"] is True for v in dup)
    assert all("quantized_decomposed::add.out" in v["operators"] for v in dup)  # type: ignore[operator]
    assert all(v["in_effect"] is False for v in real)
    assert all(
        any("NEEDS libexecutorch_kernels_quantized.so" in e for e in v["evidence"])  # type: ignore[union-attr]
        for v in real
    )
    assert all(v["schema"] == "splitter.process-exclusive/1" for v in dup + real)


CMAKE_PROBE = """
cmake_minimum_required(VERSION 3.24)
project(probe CXX)
find_package(executorch REQUIRED COMPONENTS kernels_quantized)
file(WRITE "${CMAKE_BINARY_DIR}/empty.cpp" "")
add_library(both SHARED "${CMAKE_BINARY_DIR}/empty.cpp")
target_link_libraries(both PRIVATE ${EXECUTORCH_QUANTIZED_KERNELS_LIBRARY} "${PLUGIN}")
if(TARGET executorch::kernels_quantized)
  get_target_property(_v executorch::kernels_quantized EXECUTORCH_PROCESS_EXCLUSIVE_IN_EFFECT)
  message(STATUS "probe: in-effect=${_v}")
endif()
"""


@pytest.mark.parametrize("cmake_label", ["3.24", "3.28"], ids=lambda v: f"cmake-{v}")
@pytest.mark.parametrize("label", ["dup", "real"])
def test_cmake_property_and_warning(
    label: str, cmake_label: str, outputs: dict[str, dict[str, Path]], tmp_path: Path
) -> None:
    prefix = merged(outputs[label]["tree"], tmp_path / "prefix")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(CMAKE_PROBE)
    plugin = prefix / SITE / "executorch/kernels/quantized" / PLUGIN
    result = subprocess.run(
        [
            str(cmake_executable(cmake_label)),
            "-S",
            str(tmp_path / "src"),
            "-B",
            str(tmp_path / "b"),
            f"-DCMAKE_PREFIX_PATH={prefix}",
            f"-DPLUGIN={plugin}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    output = " ".join((result.stdout + result.stderr).split())
    if label == "dup":
        assert "links both the kernels_quantized library and libquantized_ops_aot_lib.so" in output
        assert "Re-registering" in output
    else:
        assert "Re-registering" not in output
    if cmake_label == "3.28":
        expected = PLUGIN if label == "dup" else ""
        assert f"probe: in-effect={expected} " in output + " "


GUARDED_IMPORT = """
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the quantized library is already loaded
try:
    import executorch.kernels.quantized
except ImportError as error:
    print("GUARD", error)
    sys.exit(3)
print("IMPORTED")
"""


def merged(tree: Path, prefix: Path) -> Path:
    """The three staged trees installed into one prefix."""
    for package in ("executorch-runtime", "executorch-kernels-quantized", "executorch-export"):
        shutil.copytree(tree / package / "usr/local", prefix, dirs_exist_ok=True)
    return prefix


def test_import_guard(dup_plan: Plan, outputs: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    python = torch_python()
    prefix = merged(outputs["dup"]["tree"], tmp_path / "guarded")
    qlib = prefix / "lib" / QLIB
    env = {**os.environ, "PYTHONPATH": str(prefix / SITE)}
    guarded = subprocess.run(
        [str(python), "-c", GUARDED_IMPORT, str(qlib)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert guarded.returncode == 3, guarded.stdout + guarded.stderr
    assert PLUGIN in guarded.stdout and str(qlib) in guarded.stdout
    assert (
        "executorch-export" in guarded.stdout and "executorch-kernels-quantized" in guarded.stdout
    )
    # Without the guard the same import really aborts the process.
    plain = tmp_path / "plain"
    build_tree(dup_plan, plain, make_layout(dup_plan.wheel, "/usr/local", "lib", "include", None))
    unguarded = merged(plain, tmp_path / "unguarded")
    env["PYTHONPATH"] = str(unguarded / SITE)
    aborted = subprocess.run(
        [str(python), "-c", GUARDED_IMPORT, str(unguarded / "lib" / QLIB)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert aborted.returncode in (-6, 134), aborted.stdout + aborted.stderr
    assert "Re-registering quantized_decomposed::" in aborted.stderr


def test_guard_is_not_added_when_nothing_is_in_effect(outputs: dict[str, dict[str, Path]]) -> None:
    site = outputs["real"]["tree"] / "executorch-export/usr/local" / SITE
    assert not (site / "executorch/kernels/quantized/_splitter_guard.py").exists()
    assert "splitter" not in (site / "executorch/kernels/quantized/__init__.py").read_text()


def aborting(checks: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return sorted(
        tuple(c.subject.split(" then "))
        for c in checks
        if c.check == "co-load" and c.outcome == "abort"
    )


def test_verify_dup_conda_cli(outputs: dict[str, dict[str, Path]]) -> None:
    python = torch_python()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitter",
            "verify",
            str(outputs["dup"]["conda"]),
            "--python",
            str(python),
            "--cmake",
            str(cmake_executable("3.28")),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    coload = [c for c in report["checks"] if c["check"] == "co-load"]
    aborts = sorted(c["subject"] for c in coload if c["outcome"] == "abort")
    assert aborts == sorted([f"{PLUGIN} then {QLIB}", f"{QLIB} then {PLUGIN}"])
    assert all(c["outcome"] == "coexist" for c in coload if c["subject"] not in aborts)
    assert not any(c["outcome"] == "skipped" for c in coload)
    assert all(c["status"] == "pass" for c in coload)  # the expected abort is a pass
    # The fixture plugin registers no torch ops, so only the Python model run may fail.
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["check"] for c in failed] == ["model (Python)"]
    assert "export plugin did not load" in failed[0]["detail"]
    assert result.returncode == 1


def test_verify_real_wheel_output(outputs: dict[str, dict[str, Path]]) -> None:
    """With every tool present (torch, a CMake before 3.28 and one that does relocation)
    nothing is skipped, and every row passes: the whole matrix and each check per CMake."""
    cmakes = [cmake_executable("3.24"), cmake_executable("3.28")]
    checks = verify(outputs["real"]["wheel"], [torch_python()], cmakes)
    assert [c for c in checks if c.status is not Status.PASS] == []
    coload = [c for c in checks if c.check == "co-load"]
    assert len(coload) == 11 * 10  # 11 files (8 libraries, _C, 2 plugins), both orders
    assert all(c.outcome == "coexist" for c in coload)
    counts = Counter(c.check for c in checks if c.check != "co-load")
    assert counts == {
        "model (C++)": 2,
        "missing component": 2,
        "relocation": 1,
        "model (Python)": 1,
        "sbom": 3,  # one per wheel, each valid and matching what is installed
    }
    assert len(checks) == 110 + 6 + 3


def test_verify_fails_when_metadata_lies(
    outputs: dict[str, dict[str, Path]], tmp_path: Path
) -> None:
    lied = tmp_path / "tree"
    shutil.copytree(outputs["dup"]["tree"], lied, symlinks=True)
    listing = json.loads((lied / NAME).read_text())
    for artifact in listing["artifacts"]:  # the build itself wrote the lie: its digests match
        manifest = lied / artifact["path"]
        data = json.loads(manifest.read_text())
        for verdict in data["process_exclusive"]:
            verdict["in_effect"] = False
        manifest.write_text(json.dumps(data))
        artifact["sha256"] = hashlib.sha256(manifest.read_bytes()).hexdigest()
        artifact["size"] = manifest.stat().st_size
    (lied / NAME).write_text(json.dumps(listing))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitter",
            "verify",
            str(lied),
            "--python",
            str(torch_python()),
            "--only",
            "co-load",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    failed = [c for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"]
    assert sorted(c["subject"] for c in failed) == sorted(
        [f"{PLUGIN} then {QLIB}", f"{QLIB} then {PLUGIN}"]
    )


def test_guard_reads_only_the_verified_init(dup_plan: Plan, tmp_path: Path) -> None:
    """The guard rewrites the plugin package's __init__.py from the wheel: if the wheel was
    replaced after the plan verified it, that read names the file instead of wrapping bytes
    nobody verified."""
    from builders import replace_member

    from splitter.errors import InvalidWheel
    from splitter.targets.generated.guard import guard_files

    wheel = tmp_path / dup_plan.wheel.filename
    shutil.copyfile(dup_plan.wheel.path, wheel)
    plan = make_plan(wheel, load_recipe())
    init = "executorch/kernels/quantized/__init__.py"
    assert guard_files(plan)[0].keys() == {init}
    replace_member(wheel, init, b"import os  # not the file splitter verified\n")
    with pytest.raises(InvalidWheel, match="the wheel changed after it was verified") as raised:
        guard_files(plan)
    assert str(raised.value).endswith(f": {init}")
