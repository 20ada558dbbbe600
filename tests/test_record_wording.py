"""Decisions read the exclusivity record's fields, never its sentences: every evidence line of
plan/exclusive.py reworded, the same outputs give `verify` and `doctor --output` the same
rows, verdicts and counts.

The outputs are a tree and wheels of the real macOS arm64 wheel: verify's rows for them are
static and include the kernel rows, which compare each file's installed kernel tables with the
count the record gives for it (per file: `path`, `package`, `operators`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from splitter.doctor.output import diagnose_output
from splitter.model import BinaryInfo, Registry
from splitter.plan import exclusive
from splitter.plan.layout import make_layout
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.tree import build_tree
from splitter.targets.wheel import build_wheels
from splitter.verify.run import CHECKS, verify

pytestmark = pytest.mark.integration

QUANTIZED = "executorch/lib/libexecutorch_kernels_quantized.dylib"


def reword(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every evidence sentence of plan/exclusive.py in other words (no count, no path)."""
    monkeypatch.setattr(exclusive, "registers_text", lambda b: f"REWORDED kernels of {id(b)}")
    monkeypatch.setattr(exclusive, "needs_text", lambda b, n: "REWORDED: one loads the other")
    monkeypatch.setattr(exclusive, "collision_text", lambda common: "REWORDED: they collide")
    monkeypatch.setattr(exclusive, "no_common_text", lambda: "REWORDED: nothing in common")
    monkeypatch.setattr(exclusive, "unseen_text", lambda path: "REWORDED: not counted")


def build(wheel: Path, root: Path) -> dict[str, Path]:
    """A tree and wheels of `wheel`, planned now (so with whatever wording is in effect)."""
    plan = make_plan(wheel, load_recipe())
    layout = make_layout(plan.wheel, "/usr/local", "lib", "include", None)
    build_tree(plan, root / "tree", layout)
    build_wheels(plan, root / "wheel")
    return {"tree": root / "tree", "wheel": root / "wheel"}


def outcome(out: Path) -> tuple[list[Any], list[Any]]:
    """verify's rows and doctor --output's diagnoses of `out`, as data."""
    rows = [dataclasses.asdict(c) for c in verify(out, [], [], only=CHECKS)]
    # the environment's name is OUT's path, the one thing that differs
    diagnoses = [dataclasses.asdict(d) | {"target": ""} for d in diagnose_output(out)]
    return rows, diagnoses


def tree_records(out: Path) -> list[dict[str, Any]]:
    """The verdicts a tree output records, over its packages."""
    return [
        v
        for p in sorted(out.glob("*.json"))
        for v in json.loads(p.read_text()).get("process_exclusive", [])
    ]


@pytest.fixture(scope="module")
def plain(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(real_wheel_macos, tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def reworded(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        reword(monkeypatch)
        return build(real_wheel_macos, tmp_path_factory.mktemp("reworded"))


def test_the_record_gives_each_files_operators_as_a_field(plain: dict[str, Path]) -> None:
    """Each file of a verdict: its path, package and the operators it registers in static
    tables (null when it registers from initializer code)."""
    (verdict,) = tree_records(plain["tree"])[:1]
    files = {f["path"]: f for f in verdict["files"]}
    assert files[QUANTIZED] == {
        "path": QUANTIZED,
        "package": "executorch-kernels-quantized",
        "operators": 19,
    }
    assert all(set(f) == {"path", "package", "operators"} for f in verdict["files"])


def test_rewording_reaches_the_records(plain: dict[str, Path], reworded: dict[str, Path]) -> None:
    """The reworded build's records hold the other words and the same fields otherwise."""
    before, after = tree_records(plain["tree"]), tree_records(reworded["tree"])
    assert all(e.startswith("REWORDED") for v in after for e in v["evidence"])
    assert not any("REWORDED" in e for v in before for e in v["evidence"])
    strip = [{k: v for k, v in r.items() if k != "evidence"} for r in before]
    assert strip == [{k: v for k, v in r.items() if k != "evidence"} for r in after]


@pytest.mark.parametrize("target", ["tree", "wheel"])
def test_verify_and_doctor_decide_the_same_on_other_words(
    target: str, plain: dict[str, Path], reworded: dict[str, Path]
) -> None:
    """Same rows (the kernel rows among them, with their counts) and same diagnoses."""
    rows, diagnoses = outcome(plain[target])
    kernels = {r["subject"]: r for r in rows if r["check"] == "kernels"}
    assert kernels["libexecutorch_kernels_quantized.dylib"]["expected"].startswith("19 ")
    assert {r["status"] for r in kernels.values()} == {"pass"}
    assert outcome(reworded[target]) == (rows, diagnoses)


def test_an_unknown_count_is_null_and_has_no_kernel_row() -> None:
    """A file registering from initializer code: operators null, not 0."""
    binary = BinaryInfo(
        path="lib/a.dylib",
        machine="CPU_TYPE_ARM64",
        soname="a.dylib",
        needed=(),
        runpath=(),
        rpath=(),
        registry=Registry.USES,
        et_operators=("aten::add.out",),
        torch_schemas=(),
        operators_known=False,
    )
    assert exclusive.operator_count(binary) is None
    assert "an unknown number of (at least 1)" in exclusive.registers_text(binary)
