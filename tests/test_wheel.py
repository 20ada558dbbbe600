"""The wheel target on the real wheel: pip installs, a C++ consumer, the Python side, checkers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conda_tools import torch_python
from consumer_tools import (
    CMAKE_LABELS,
    MODEL,
    RUN_PTE,
    build_consumer,
    cmake_executable,
    expected_output,
    run_model,
    upstream_route,
)

from splitter.model import Plan
from splitter.targets.wheel import build_wheels

pytestmark = pytest.mark.integration

SITE = "lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def wheels(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels") / "out"
    paths = build_wheels(real_plan, out)
    return {p.name.split("-")[0].replace("_", "-"): p for p in paths}


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def record(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        return {line.split(",")[0] for line in archive.read(name).decode().splitlines() if line}


def test_names_and_tags(wheels: dict[str, Path]) -> None:
    assert sorted(p.name for p in wheels.values()) == [
        "executorch_export-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "executorch_kernels_quantized-1.5.1-py3-none-manylinux_2_28_x86_64.whl",
        "executorch_runtime-1.5.1-py3-none-manylinux_2_28_x86_64.whl",
    ]


def test_layout_and_disjoint_files(wheels: dict[str, Path]) -> None:
    runtime, quantized, export = (
        record(wheels[n])
        for n in ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")
    )
    assert "executorch/lib/libexecutorch.so" in runtime
    assert "executorch/share/cmake/executorch-config.cmake" in runtime
    assert "executorch/lib/cmake/executorch/executorch-config.cmake" in runtime
    assert "executorch/lib/libexecutorch_kernels_quantized.so" in quantized
    assert "executorch/share/cmake/executorch-component-kernels_quantized.cmake" in quantized
    assert not any(p.endswith(".py") for p in runtime | quantized)
    assert "executorch/exir/__init__.py" in export
    assert not any(p.startswith(("executorch/lib/", "executorch/include/")) for p in export)
    assert not runtime & quantized and not runtime & export and not quantized & export


def test_reproducible(real_plan: Plan, wheels: dict[str, Path], tmp_path: Path) -> None:
    again = {p.name: p for p in build_wheels(real_plan, tmp_path / "again")}
    for path in wheels.values():
        assert (
            hashlib.sha256(path.read_bytes()).hexdigest()
            == hashlib.sha256(again[path.name].read_bytes()).hexdigest()
        ), path.name


def test_checkers_accept_the_wheels(wheels: dict[str, Path]) -> None:
    paths = [str(p) for p in wheels.values()]
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    assert twine.returncode == 0, twine.stdout + twine.stderr
    checker = shutil.which("check-wheel-contents") or str(
        Path(sys.executable).parent / "check-wheel-contents"
    )
    # W002 (duplicate files): the two copies of the CMake config are upstream's layout, on purpose.
    # W004 (module not at an importable path): upstream's own third-party/ trees, which the
    # input wheel ships too; the export wheel carries them unchanged.
    contents = subprocess.run(
        [checker, "--ignore", "W002,W004", *paths], capture_output=True, text=True, check=False
    )
    assert contents.returncode == 0, contents.stdout + contents.stderr
    no_python = [str(wheels[n]) for n in ("executorch-runtime", "executorch-kernels-quantized")]
    strict = subprocess.run(
        [checker, "--ignore", "W002", *no_python], capture_output=True, text=True, check=False
    )
    assert strict.returncode == 0, strict.stdout  # W004 cannot excuse anything in these two


@pytest.fixture(scope="module")
def cpp_venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fresh venvs without torch: runtime alone, and runtime + kernels-quantized."""
    root = tmp_path_factory.mktemp("venvs")
    alone = venv(root / "alone")
    pip(alone, "install", "--no-index", str(wheels["executorch-runtime"]))
    both = venv(root / "both")
    pip(
        both,
        "install",
        "--no-index",
        str(wheels["executorch-runtime"]),
        str(wheels["executorch-kernels-quantized"]),
    )
    result = subprocess.run([str(both), "-c", "import torch"], capture_output=True, check=False)
    assert result.returncode != 0  # really no torch
    return {
        "runtime": root / "alone" / SITE / "executorch",
        "runtime+quantized": root / "both" / SITE / "executorch",
    }


def test_upstream_documented_path(
    real_plan: Plan, cpp_venv: dict[str, Path], tmp_path: Path
) -> None:
    """Upstream's instructions in a venv holding the runtime and quantized wheels."""
    site = cpp_venv["runtime+quantized"].parent
    upstream_route(site, real_plan.wheel.version, real_plan.build_version, tmp_path)


@pytest.mark.parametrize("cmake_label", list(CMAKE_LABELS), ids=lambda v: f"cmake-{v}")
def test_cpp_consumer_against_site_packages(
    cmake_label: str, cpp_venv: dict[str, Path], tmp_path: Path
) -> None:
    cmake = cmake_executable(cmake_label)
    package = cpp_venv["runtime+quantized"]
    built = build_consumer(
        cmake, tmp_path / "q", config_dir=package / "share" / "cmake", quantized=True
    )
    assert built.returncode == 0, built.output
    run = run_model(built.runner, tmp_path / "o.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "o.bin").read_bytes() == expected_output()
    # A plain CMAKE_PREFIX_PATH at the package root finds lib/cmake/executorch too.
    found = build_consumer(cmake, tmp_path / "p", prefix=package, quantized=True)
    assert found.returncode == 0, found.output
    alone = build_consumer(
        cmake, tmp_path / "a", config_dir=cpp_venv["runtime"] / "share" / "cmake", quantized=True
    )
    assert alone.returncode != 0
    assert "install the executorch-kernels-quantized package" in " ".join(alone.output.split())


def export_venv(directory: Path) -> Path:
    """A fresh venv that sees the suite's one cached torch venv (conda_tools.torch_python:
    ci/locks/torch-venv.lock, torch 2.13.0 and every other requirement of the export wheel)
    through a .pth file: the wheels go into this venv alone, and `pip check` below proves the
    lock covers their requirements."""
    python = venv(directory)
    pip(python, "uninstall", "-y", "setuptools")  # the venv module's would shadow the lock's
    torch_site = torch_python().parent.parent / SITE
    (python.parent.parent / SITE / "torch-venv.pth").write_text(f"{torch_site}\n")
    return python


def site_files(python: Path) -> dict[str, str]:
    site = python.parent.parent / SITE
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (site / "executorch").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_python_side_pip_check_and_uninstall(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = export_venv(tmp_path / "venv")
    pip(
        python,
        "install",
        "--no-deps",
        str(wheels["executorch-runtime"]),
        str(wheels["executorch-kernels-quantized"]),
    )
    before = site_files(python)
    pip(python, "install", "--no-deps", str(wheels["executorch-export"]))
    after = site_files(python)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing overwritten
    pip(python, "check")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    run = subprocess.run(
        [str(python), "-c", RUN_PTE, str(MODEL)], capture_output=True, env=env, check=False
    )
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == expected_output()
    for name in ("executorch-export", "executorch-kernels-quantized", "executorch-runtime"):
        owned = {p for p in record(wheels[name]) if p.startswith("executorch/")}
        present = set(site_files(python))
        assert owned <= present, name
        pip(python, "uninstall", "-y", name)
        remaining = set(site_files(python))
        assert not owned & remaining, name
        assert remaining == present - owned, name


def test_description_names_the_recipes_externals(real_plan: Plan) -> None:
    """The export wheel's description names the external requirement the recipe adds (what
    executorch's own Requires-Dist omits), taken from the recipe's [externals], not a version
    written into the code; packages without externals say nothing of it."""
    from dataclasses import replace

    from splitter.targets.wheel import description

    export = real_plan.package("executorch-export")
    (torch,) = export.externals
    assert torch.pip in description(real_plan, export)
    moved = replace(export, externals=(replace(torch, pip="torch>=9.1,<9.2"),))
    text = description(real_plan, moved)
    assert "torch>=9.1,<9.2" in text and "2.13" not in text
    assert "[externals]" not in description(real_plan, real_plan.package("executorch-runtime"))


def test_pip_shows_each_packages_licence(
    real_plan: Plan, wheels: dict[str, Path], tmp_path: Path
) -> None:
    """pip-installed, each wheel states its own SPDX expression through importlib.metadata
    (License-Expression, Metadata 2.4) and installs its licence texts and its SBOM."""
    python = venv(tmp_path / "venv")
    names = ("executorch-runtime", "executorch-kernels-quantized")
    pip(python, "install", "--no-index", *(str(wheels[n]) for n in names))
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    files = [str(f) for f in m.files(name)]\n"
        "    out[name] = [m.metadata(name)['License-Expression'], files]\n"
        "print(json.dumps(out))\n"
    )
    shown = subprocess.run(
        [str(python), "-c", script, *names], capture_output=True, text=True, check=True
    )
    found = json.loads(shown.stdout)
    for name in names:
        expression, files = found[name]
        assert expression == real_plan.package(name).license
        dist_info = f"{name.replace('-', '_')}-{real_plan.wheel.version}.dist-info"
        assert f"{dist_info}/licenses/LICENSE" in files
        assert f"{dist_info}/sboms/sbom.cdx.json" in files
    runtime = found["executorch-runtime"][1]
    assert any(f.endswith("/licenses/Eigen-COPYING.MPL2") for f in runtime)  # MPL-2.0 code
    assert "MPL-2.0" in found["executorch-runtime"][0]
    assert found["executorch-kernels-quantized"][0] == real_plan.wheel.license
