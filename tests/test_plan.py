"""The split plan of the real wheels: ownership, binary-derived dependencies, exclusivity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import run_splitter

from splitter.errors import ExclusivityError
from splitter.model import Plan
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.report import plan_json

pytestmark = pytest.mark.integration

RUNTIME, QUANTIZED, EXPORT = (
    "executorch-runtime",
    "executorch-kernels-quantized",
    "executorch-export",
)
PLUGIN = "executorch/kernels/quantized/libquantized_ops_aot_lib.so"
QLIB = "executorch/lib/libexecutorch_kernels_quantized.so"
GOLDEN = Path(__file__).parent / "golden"


def summary(plan: Plan) -> dict[str, object]:
    """The plan JSON without per-file lists, for a golden file a reviewer can read."""
    data = plan_json(plan)
    for package in data["packages"]:
        package["files"] = len(package["files"])
    return data


def test_every_file_owned_exactly_once(real_plan: Plan) -> None:
    """Every file but those the recipe excludes is in exactly one package."""
    owned = [f for p in real_plan.packages for f in p.files]
    excluded = {e.path for e in real_plan.excluded}
    assert len(real_plan.wheel.entries) == 4605
    assert len(owned) == len(set(owned)) == 4605 - len(excluded)
    assert set(owned) | excluded == {e.path for e in real_plan.wheel.entries}
    assert not set(owned) & excluded


def test_quantized_package_holds_only_its_library(real_plan: Plan) -> None:
    assert real_plan.package(QUANTIZED).files == (QLIB,)
    assert real_plan.package(QUANTIZED).cmake_components == ("kernels_quantized",)


def test_runtime_holds_libraries_headers_and_cmake(real_plan: Plan) -> None:
    files = real_plan.package(RUNTIME).files
    libs = [f for f in files if f.startswith("executorch/lib/") and f.endswith(".so")]
    headers = [f for f in files if f.startswith("executorch/include/")]
    cmake = [f for f in files if f.endswith(".cmake")]
    assert len(libs) == 7 and QLIB not in libs
    assert len(headers) == 120
    assert sorted(cmake) == [
        "executorch/lib/cmake/executorch/executorch-config-version.cmake",
        "executorch/lib/cmake/executorch/executorch-config.cmake",
        "executorch/share/cmake/executorch-config-version.cmake",
        "executorch/share/cmake/executorch-config.cmake",
    ]
    assert len(files) == 7 + 120 + 4
    assert set(real_plan.package(RUNTIME).cmake_components) == {
        "runtime",
        "threadpool",
        "kernels_optimized",
        "etdump",
        "backend_xnnpack",
        "backend_openvino",
        "backend_qnn",
    }


def test_python_side_is_in_export(real_plan: Plan) -> None:
    files = set(real_plan.package(EXPORT).files)
    for path in (
        PLUGIN,
        "executorch/extension/llm/custom_ops/libcustom_ops_aot_lib.so",
        "executorch/extension/pybindings/_C.cpython-311-x86_64-linux-gnu.so",
        "executorch/data/bin/flatc",
        "executorch/schema/program.fbs",
        "executorch/exir/__init__.py",
    ):
        assert path in files, path
    assert any(f.endswith(".yaml") for f in files)
    assert not any(f.startswith(("executorch/lib/", "executorch/include/")) for f in files)


def test_dependencies_come_from_needed(real_plan: Plan) -> None:
    export = real_plan.package(EXPORT)
    assert {d.name for d in export.depends} == {RUNTIME, QUANTIZED}
    quantized_dep = next(d for d in export.depends if d.name == QUANTIZED)
    assert quantized_dep.conda == f"{QUANTIZED} ==1.5.1"
    assert f"{PLUGIN} NEEDS libexecutorch_kernels_quantized.so" in quantized_dep.evidence
    assert [d.name for d in real_plan.package(QUANTIZED).depends] == [RUNTIME]
    assert real_plan.package(RUNTIME).depends == ()
    assert [d.pip for d in export.externals] == ["torch>=2.13,<2.14"]
    assert real_plan.package(RUNTIME).externals == ()


def test_declared_exclusivity_not_in_effect_for_1_5_1(real_plan: Plan) -> None:
    (verdict,) = real_plan.exclusive
    assert (verdict.first, verdict.second) == (PLUGIN, QLIB)
    assert verdict.in_effect is False
    assert verdict.operators == ()
    assert any("NEEDS libexecutorch_kernels_quantized.so" in e for e in verdict.evidence)
    assert any(f"{PLUGIN} registers 0" in e for e in verdict.evidence)


def test_kernel_tables_found_from_relocations(real_plan: Plan) -> None:
    counts = {b.path.rsplit("/", 1)[-1]: len(b.et_operators) for b in real_plan.binaries}
    assert counts["libexecutorch.so"] == 28
    assert counts["libexecutorch_kernels_optimized.so"] == 212
    assert counts["libexecutorch_kernels_quantized.so"] == 19
    # 6 quantized_decomposed strings sit in the plugin's error labels: not registrations.
    assert counts["libquantized_ops_aot_lib.so"] == 0
    plugin = real_plan.binary(PLUGIN)
    assert plugin is not None and len(plugin.torch_schemas) == 13
    assert real_plan.binary("executorch/lib/libexecutorch.so").registry == "owns"  # type: ignore[union-attr]


def test_aarch64_wheel(real_wheel_aarch64: Path) -> None:
    plan = make_plan(real_wheel_aarch64, load_recipe())
    assert len(plan.wheel.entries) == 4603
    assert sum(len(p.files) for p in plan.packages) == 4603 - len(plan.excluded)
    assert plan.package(QUANTIZED).files == (QLIB,)
    assert "backend_qnn" not in plan.package(RUNTIME).cmake_components
    assert {b.machine for b in plan.binaries} == {"EM_AARCH64"}
    assert len(plan.binary(QLIB).et_operators) == 19  # type: ignore[union-attr]
    assert plan.exclusive[0].in_effect is False


@pytest.fixture(scope="module")
def dup_wheel(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real wheel with an export plugin that carries its own quantized kernels."""
    from dupplugin import make_dup_wheel

    return make_dup_wheel(real_wheel, tmp_path_factory.mktemp("dup"))


def test_plugin_with_own_copy_is_in_effect(dup_wheel: Path) -> None:
    plan = make_plan(dup_wheel, load_recipe())
    (verdict,) = plan.exclusive
    assert verdict.in_effect is True
    assert "quantized_decomposed::add.out" in verdict.operators
    assert (verdict.first_package, verdict.second_package) == (EXPORT, QUANTIZED)
    assert any("neither loads the other" in e for e in verdict.evidence)
    # The plugin no longer NEEDs the library, so nothing ties export to kernels-quantized.
    assert QUANTIZED not in {d.name for d in plan.package(EXPORT).depends}


def test_undeclared_collision_is_an_error(dup_wheel: Path, tmp_path: Path) -> None:
    text = load_recipe().path.read_text()
    recipe = tmp_path / "no-pair.toml"
    recipe.write_text(text.split("[[process_exclusive]]")[0])
    with pytest.raises(
        ExclusivityError, match=r"libquantized_ops_aot_lib\.so and .*kernels_quantized"
    ):
        make_plan(dup_wheel, load_recipe(recipe))


def test_plan_json_shape(real_wheel: Path) -> None:
    result = run_splitter("plan", str(real_wheel), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["input"]["version"] == "1.5.1"
    assert data["input"]["tag"] == "cp311-cp311-manylinux_2_28_x86_64"
    assert len(data["input"]["sha256"]) == 64
    assert [p["name"] for p in data["packages"]] == [RUNTIME, QUANTIZED, EXPORT]
    for package in data["packages"]:
        assert set(package) >= {
            "name",
            "version",
            "files",
            "bytes",
            "depends",
            "cmake_components",
            "sonames",
        }
    (pair,) = data["process_exclusive"]
    assert pair["in_effect"] is False and pair["evidence"]
    assert [f["package"] for f in pair["files"]] == [EXPORT, QUANTIZED]


def test_plan_why(real_wheel: Path) -> None:
    result = run_splitter("plan", str(real_wheel), "--why", QLIB, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["package"] == QUANTIZED


def test_plan_golden(real_plan: Plan, request: pytest.FixtureRequest) -> None:
    golden = GOLDEN / "plan-1.5.1-x86_64.json"
    actual = json.dumps(summary(real_plan), indent=2) + "\n"
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(actual)
    assert actual == golden.read_text()
