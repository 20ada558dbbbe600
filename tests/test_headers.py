"""verify's `headers` row on the real wheel's tree, judged against upstream's own layout and
flags (the unpacked wheel with tools/cmake/executorch.pc.in's Cflags): it accepts exactly the
failures the recipe lists ([[headers_not_alone]]), and a lost header, a missing flag, an
unlisted failure and a stale entry fail it. The plan's functions that no header names are
judged by binutils' nm -D -C and grep -w on the tree, and the development packages carry them."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from splitter.model import HeaderNotAlone, Plan
from splitter.plan.layout import make_layout
from splitter.plan.recipe import load_recipe as real_recipe
from splitter.targets.tree import build_tree
from splitter.verify.headers import header_checks
from splitter.verify.install import install
from splitter.verify.rows import Row, Status
from splitter.verify.run import verify

pytestmark = pytest.mark.integration

UPSTREAM_PC = Path(__file__).parent / "data" / "upstream" / "executorch.pc.in"


@pytest.fixture(scope="module")
def tree(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tree") / "out"
    build_tree(real_plan, out, make_layout(real_plan.wheel, "/usr/local", "lib", "include", None))
    return out


@pytest.fixture(scope="module")
def row(tree: Path) -> dict[str, str]:
    (check,) = verify(tree, [], [], only=("headers",))
    return {"status": check.status, "outcome": check.outcome, "detail": check.detail}


def upstream_failures(unpacked: Path) -> set[str]:
    """The wheel's headers that do not compile alone in upstream's own layout with upstream's
    own Cflags (the .pc.in's, for a prefix of executorch/ in the unpacked wheel)."""
    include = unpacked / "executorch" / "include"
    cflags = re.search(r"^Cflags: (.*)$", UPSTREAM_PC.read_text(), re.M)
    assert cflags is not None
    flags = cflags[1].replace("${includedir}", str(include)).split()
    failed = set()
    for header in sorted(include.rglob("*.h")):
        name = str(header.relative_to(include))
        result = subprocess.run(
            ["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", *flags, "-"],
            input=f"#include <{name}>\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            failed.add(name)
    return failed


def test_the_row_accepts_exactly_the_headers_upstream_cannot_compile_alone(
    row: dict[str, str], real_wheel: Path, unpacked_wheel: Path, real_plan: Plan
) -> None:
    with zipfile.ZipFile(real_wheel) as wheel:
        count = sum(
            1
            for n in wheel.namelist()
            if n.startswith("executorch/include/") and n.endswith((".h", ".hpp"))
        )
    failed = upstream_failures(unpacked_wheel)
    assert failed  # the wheel has some (an #error, a Windows-only header): the check is real
    assert failed == {e.header for e in real_plan.recipe.headers_not_alone}
    assert row["status"] == Status.PASS, row
    assert row["outcome"] == (
        f"{count - len(failed)} compile alone, {len(failed)} fail as the recipe lists"
    )
    named = set(re.findall(r"(executorch/\S+\.h): ", row["detail"]))
    assert named == failed


def nm_undeclared(library: Path, include: Path) -> set[str]:
    """binutils' and grep's reading of a library's undeclared functions: each exported
    executorch:: function (nm -D -C --defined-only, T or W) whose name (a constructor's and
    an operator's: its class's) grep -w finds in no header under `include`."""
    listing = subprocess.run(
        ["nm", "-D", "-C", "--defined-only", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = set()
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[1] not in ("T", "W"):
            continue
        symbol = re.sub(r"\[abi:\w+\]", "", parts[2])
        while (stripped := re.sub(r"<[^<>]*>", "", symbol)) != symbol:
            symbol = stripped
        symbol = symbol.split("(")[0].rsplit(" ", 1)[-1]
        if symbol.startswith("executorch::"):
            names.add(symbol)
    unnamed = set()
    for name in names:
        *scope, last = name.split("::")
        word = scope[-1] if last.startswith("operator") else last.lstrip("~")
        grep = ["grep", "-rqw", "--include=*.h", "--include=*.hpp", word, str(include)]
        if subprocess.run(grep, check=False).returncode != 0:
            unnamed.add(name)
    return unnamed


def test_the_plans_undeclared_functions_are_nms(tree: Path, real_plan: Plan) -> None:
    """Every library of the runtime: the plan's list equals nm's and grep's, and
    libexecutorch_threadpool.so's get_threadpool(), whose header upstream does not ship, is in
    it."""
    root = tree / "executorch-runtime" / "usr" / "local"
    runtime = real_plan.package("executorch-runtime")
    listed = {path.rsplit("/", 1)[-1]: set(names) for path, names in runtime.undeclared}
    libraries = sorted(
        p.name for p in (root / "lib").glob("libexecutorch*.so") if not p.is_symlink()
    )
    assert len(libraries) >= 5
    for name in libraries:
        assert listed.get(name, set()) == nm_undeclared(root / "lib" / name, root / "include"), name
    assert (
        "executorch::extension::threadpool::get_threadpool" in listed["libexecutorch_threadpool.so"]
    )


def test_a_lost_header_fails_the_row(tree: Path, tmp_path: Path) -> None:
    full = install(tree, tmp_path / "i")
    include = full.cmake_prefix / "include"
    (include / "executorch" / "runtime" / "core" / "error.h").unlink()
    (check,) = header_checks(full, real_recipe())
    assert check.check == Row.HEADERS and check.status is Status.FAIL
    assert "includes <executorch/runtime/core/error.h>, which no installed package has" in (
        check.detail
    )


def test_a_missing_flag_fails_the_row(tree: Path, tmp_path: Path) -> None:
    """Without upstream's -DC10_USING_CUSTOM_GENERATED_MACROS, c10's headers want the
    CMake-generated cmake_macros.h, which no package ships: the .pc's flags are what the row
    judges."""
    full = install(tree, tmp_path / "i")
    pc = full.libdir / "pkgconfig" / "executorch.pc"
    pc.write_text(pc.read_text().replace(" -DC10_USING_CUSTOM_GENERATED_MACROS", ""))
    (check,) = header_checks(full, real_recipe())
    assert check.status is Status.FAIL
    lost = "includes <torch/headeronly/macros/cmake_macros.h>, which no installed package has"
    assert lost in check.detail


def test_an_unlisted_failure_and_a_stale_entry_fail_the_row(tree: Path, tmp_path: Path) -> None:
    """The recipe's list is what the row accepts: without mman_windows.h's entry its failure
    fails the row, with the compiler's reason; an entry for error.h, which compiles, is stale."""
    recipe = real_recipe()
    full = install(tree, tmp_path / "i")
    mman = "executorch/extension/data_loader/mman_windows.h"
    error_h = HeaderNotAlone(header="executorch/runtime/core/error.h", reason="-", line=1)
    kept = tuple(e for e in recipe.headers_not_alone if e.header != mman)
    changed = dataclasses.replace(recipe, headers_not_alone=(*kept, error_h))
    (check,) = header_checks(full, changed)
    assert check.status is Status.FAIL
    assert ", 2 fail as the recipe lists, 1 fail, 1 listed compile" in check.outcome
    assert f"{mman}: includes <_mingw.h>, not found" in check.detail
    assert "executorch/runtime/core/error.h: compiles alone, but the recipe lists it" in (
        check.detail
    )
