"""Recipe loading: the shipped recipe, and malformed copies of it named by path, line and key."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import make_wheel

from splitter.errors import RecipeError
from splitter.recipe import load_recipe

SHIPPED = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"


def edit(old: str, new: str) -> Callable[[str], str]:
    """An edit of the shipped text replacing `old`, which must occur exactly once."""

    def apply(text: str) -> str:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {SHIPPED}"
        return text.replace(old, new)

    return apply


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based number of the `nth` line whose stripped text starts with `needle`."""
    numbers = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(needle)]
    assert len(numbers) > nth, f"{needle!r} not found {nth + 1} times"
    return numbers[nth]


@dataclass(frozen=True, slots=True, kw_only=True)
class BadRecipe:
    """A malformed copy of the shipped recipe and the error it must produce."""

    change: Callable[[str], str]
    what: str  # part of the "what is wrong" text
    key: str | None  # the key path the message names; None for a TOML syntax error
    at: Callable[[str], int]  # the line the message must point at, found in the edited text


RULE_2 = 'glob = "executorch/include/**"\npackage = "executorch-runtime"\n'
RULE_4 = 'package = "executorch-export"\n'
EXPORT_SUMMARY = (
    'summary = "ExecuTorch Python export tooling (exir), '
    'the _C extension and export-time plugins"\n'
)
ETDUMP = 'etdump = { library = "libexecutorch_etdump.so", platforms = ["manylinux_*"] }'
CASES = [
    pytest.param(
        BadRecipe(
            change=edit("schema = 1", "schema = = 1"),
            what="recipe is not valid TOML",
            key=None,
            at=lambda t: line_of(t, "schema = = 1"),
        ),
        id="toml-syntax",
    ),
    pytest.param(
        BadRecipe(
            change=edit(RULE_2, 'glob = "executorch/include/**"\n'),
            what="missing required key 'package'",
            key="rules[2].package",
            at=lambda t: line_of(t, "[[rules]]", 2),
        ),
        id="rule-without-package",
    ),
    pytest.param(
        BadRecipe(
            change=edit(RULE_4, ""),
            what="missing required key 'package'",
            key="rules[4].package",
            at=lambda t: line_of(t, "[[rules]]", 4),
        ),
        id="last-rule-without-package",
    ),
    pytest.param(
        BadRecipe(
            change=edit(RULE_2, 'glob = "executorch/include/**"\npackage = "executorch-x"\n'),
            what="unknown package 'executorch-x'",
            key="rules[2].package",
            at=lambda t: line_of(t, 'package = "executorch-x"'),
        ),
        id="rule-unknown-package",
    ),
    pytest.param(
        BadRecipe(
            change=edit('glob = "executorch/lib/libexecutorch_kernels_quantized.so*"', "glob = 3"),
            what="expected list, got int",
            key="rules[0].glob",
            at=lambda t: line_of(t, "glob = 3"),
        ),
        id="glob-not-a-string",
    ),
    pytest.param(
        BadRecipe(
            change=edit("[components]\n", "[extras]\nfoo = 1\n\n[components]\n"),
            what="unknown table 'extras'",
            key="extras",
            at=lambda t: line_of(t, "[extras]"),
        ),
        id="unknown-table",
    ),
    pytest.param(
        BadRecipe(
            change=edit('supported_versions = ">=1.5,<1.6"', 'supported_versions = "1.5 or so"'),
            what="not a version specifier",
            key="recipe.supported_versions",
            at=lambda t: line_of(t, "supported_versions ="),
        ),
        id="supported-versions-not-a-specifier",
    ),
    pytest.param(
        BadRecipe(
            change=edit('default_version = "1.5.1"', 'default_version = "1.4.1"'),
            what="1.4.1 is outside supported_versions >=1.5,<1.6",
            key="recipe.default_version",
            at=lambda t: line_of(t, "default_version ="),
        ),
        id="default-version-unsupported",
    ),
    pytest.param(
        BadRecipe(
            change=edit(EXPORT_SUMMARY, ""),
            what="missing required key 'summary'",
            key="packages.executorch-export.summary",
            at=lambda t: line_of(t, "[packages.executorch-export]"),
        ),
        id="package-without-summary",
    ),
    pytest.param(
        BadRecipe(
            change=edit(ETDUMP, 'etdump = { platforms = ["manylinux_*"] }'),
            what="missing required key 'library'",
            key="components.etdump.library",
            at=lambda t: line_of(t, "etdump = {"),
        ),
        id="component-without-library",
    ),
]


def write_bad(case: BadRecipe, directory: Path) -> tuple[Path, int]:
    """Write the edited recipe; return its path and the line its error must name."""
    text = case.change(SHIPPED.read_text(encoding="utf-8"))
    path = directory / "bad.toml"
    path.write_text(text, encoding="utf-8")
    return path, case.at(text)


def test_shipped_recipe_loads() -> None:
    """The default recipe: three packages and the declared process-exclusive pair."""
    recipe = load_recipe()
    assert recipe.project == "executorch"
    assert [p.name for p in recipe.packages] == [
        "executorch-runtime",
        "executorch-kernels-quantized",
        "executorch-export",
    ]
    assert [(x.first, x.second) for x in recipe.exclusive] == [
        (
            "executorch/kernels/quantized/libquantized_ops_aot_lib.so",
            "executorch/lib/libexecutorch_kernels_quantized.so",
        )
    ]
    text = SHIPPED.read_text(encoding="utf-8")
    assert recipe.exclusive[0].line == line_of(text, "[[process_exclusive]]")
    assert [r.line for r in recipe.rules] == [
        line_of(text, "[[rules]]", n) for n in range(len(recipe.rules))
    ]


@pytest.mark.parametrize("case", CASES)
def test_malformed_recipe(case: BadRecipe, tmp_path: Path) -> None:
    """RecipeError names the file and line on its first line, and the key path."""
    path, line = write_bad(case, tmp_path)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    first = str(info.value).splitlines()[0]
    assert case.what in first
    assert first.endswith(f": {path}:{line}")
    if case.key is not None:
        assert f"(recipe key {case.key})" in first


def test_unknown_package_says_how_to_fix(tmp_path: Path) -> None:
    """The second line of an unknown-package error names the table to add and the choices."""
    text = edit(RULE_2, 'glob = "executorch/include/**"\npackage = "executorch-x"\n')(
        SHIPPED.read_text(encoding="utf-8")
    )
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    fix = str(info.value).splitlines()[1]
    assert "[packages.executorch-x]" in fix
    assert "'executorch-runtime'" in fix


@pytest.fixture(scope="module")
def small_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Any valid wheel: a bad recipe must be refused before the wheel is read."""
    return make_wheel(tmp_path_factory.mktemp("wheel"), {"executorch/__init__.py": b""})


@pytest.mark.parametrize("case", CASES)
def test_cli_reports_malformed_recipe(case: BadRecipe, small_wheel: Path, tmp_path: Path) -> None:
    """`plan --recipe BAD` exits with RecipeError's code and prints exactly its message."""
    path, line = write_bad(case, tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "splitter", "plan", "--recipe", str(path), str(small_wheel)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == RecipeError.exit_code, result.stderr
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith("error: ")
    assert lines[0].endswith(f": {path}:{line}"), result.stderr
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert result.stderr == f"error: {info.value}\n"
    assert result.stdout == ""
    assert sorted(cwd.iterdir()) == []
