"""verify's `headers` row on the real wheel's tree: judged against upstream's own layout and
flags (the unpacked wheel with tools/cmake/executorch.pc.in's Cflags), and against binutils'
nm with grep for the exported functions no header names; a lost header and a missing flag
fail it."""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from splitter.model import Plan
from splitter.plan.layout import make_layout
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


def test_the_row_names_exactly_the_headers_upstream_cannot_compile_alone(
    row: dict[str, str], real_wheel: Path, unpacked_wheel: Path
) -> None:
    with zipfile.ZipFile(real_wheel) as wheel:
        count = sum(
            1
            for n in wheel.namelist()
            if n.startswith("executorch/include/") and n.endswith((".h", ".hpp"))
        )
    failed = upstream_failures(unpacked_wheel)
    assert failed  # the wheel has some (an #error, a Windows-only header): the check is real
    assert row["status"] == Status.PASS, row
    assert row["outcome"] == (
        f"{count - len(failed)} compile alone, {len(failed)} fail as upstream's"
    )
    named = set(re.findall(r"(executorch/\S+\.h): ", row["detail"]))
    assert named == failed


def test_exported_functions_no_header_names(row: dict[str, str], tree: Path) -> None:
    """libexecutorch_threadpool.so exports get_threadpool() and ThreadPool's members, which
    no shipped header declares: nm -D -C and grep -w agree with the row's count."""
    root = tree / "executorch-runtime" / "usr" / "local"
    listing = subprocess.run(
        ["nm", "-D", "-C", "--defined-only", str(root / "lib" / "libexecutorch_threadpool.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = set()
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        _, kind, symbol = parts
        if kind in ("T", "W") and symbol.startswith("executorch::"):
            names.add(re.sub(r"\[abi:\w+\]", "", symbol).split("(")[0])
    unnamed = {
        n
        for n in names
        if subprocess.run(
            [
                "grep",
                "-rqw",
                "--include=*.h",
                n.rsplit("::", 1)[-1].lstrip("~"),
                str(root / "include"),
            ],
            check=False,
        ).returncode
        != 0
    }
    assert "executorch::extension::threadpool::get_threadpool" in unnamed
    assert f"libexecutorch_threadpool.so: {len(unnamed)} (" in row["detail"]


def test_a_lost_header_fails_the_row(tree: Path, tmp_path: Path) -> None:
    full = install(tree, tmp_path / "i")
    include = full.cmake_prefix / "include"
    (include / "executorch" / "runtime" / "core" / "error.h").unlink()
    (check,) = header_checks(full)
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
    (check,) = header_checks(full)
    assert check.status is Status.FAIL
    lost = "includes <torch/headeronly/macros/cmake_macros.h>, which no installed package has"
    assert lost in check.detail
