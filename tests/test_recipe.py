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
from splitter.plan.recipe import load_recipe

SHIPPED = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"


MMAN_HEADER = 'header = "executorch/extension/data_loader/mman_windows.h"'
COMPLEX_UTILS_HEADER = (
    'header = "executorch/runtime/core/portable_type/c10/torch/headeronly/util/complex_utils.h"'
)


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
ETDUMP = (
    'etdump = { library = ["libexecutorch_etdump.so", "libexecutorch_etdump.dylib"], '
    'platforms = ["manylinux_*", "macosx_*"] }'
)
EXCLUDE = 'exclude = ["executorch/lib/libexecutorch_kernels_quantized.so*"]'
EXCLUDES = EXCLUDE.replace("exclude =", "excludes =")
TOGETHER_FILES = (
    'files = ["executorch/lib/libexecutorch_backend_mlx.dylib", "executorch/lib/mlx.metallib"]'
)
TOGETHER_REASON = next(
    line + "\n"
    for line in SHIPPED.read_text().splitlines()
    if line.startswith('reason = "MLX loads')
)
SECOND = 'second = "executorch/lib/libexecutorch_kernels_quantized.so"\n'
# (case id, shipped text, its replacement, key path of the unknown key, start of its line)
UNKNOWN_KEYS = [
    ("rule", EXCLUDE, EXCLUDES, "rules[1].excludes", "excludes ="),
    (
        "rule-platform",
        RULE_2,
        f'{RULE_2}platform = "manylinux_*"\n',
        "rules[2].platform",
        "platform =",
    ),
    (
        "package",
        "[packages.executorch-runtime]\n",
        "[packages.executorch-runtime]\npyhton = true\n",
        "packages.executorch-runtime.pyhton",
        "pyhton =",
    ),
    (
        "component",
        ETDUMP,
        ETDUMP.replace("platforms", "platform"),
        "components.etdump.platform",
        "etdump =",
    ),
    ("external", "site_dirs =", "site_dir =", "externals.torch.site_dir", "site_dir ="),
    ("recipe", "schema = 1\n", 'schema = 1\nversion = "1.5.1"\n', "recipe.version", "version ="),
    (
        "system",
        "[system]\n",
        '[system]\nlibraries = ["libz.so.1"]\n',
        "system.libraries",
        "libraries",
    ),
    (
        "conda",
        "[conda.names]\n",
        '[conda]\nchannel = "x"\n\n[conda.names]\n',
        "conda.channel",
        "channel",
    ),
    ("exclusive", SECOND, f'{SECOND}third = "x"\n', "process_exclusive[0].third", "third ="),
    ("together", TOGETHER_FILES, f"{TOGETHER_FILES}\nfile = 1", "together[0].file", "file ="),
]
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
            change=edit(
                '"libexecutorch-kernels-quantized"\nexecutorch-export = "python3-executorch"\n',
                '"libexecutorch-kernels-quantized"\n',
            ),
            what="no deb name for executorch-export",
            key="deb.names",
            at=lambda t: line_of(t, "[deb.names]"),
        ),
        id="deb-name-missing",
    ),
    pytest.param(
        BadRecipe(
            change=edit(
                "[deb.system]\n",
                '[deb.dev_names]\nexecutorch-runtime = "python3-executorch"\n\n[deb.system]\n',
            ),
            what="'python3-executorch' names both a package and a development package",
            key="deb.dev_names",
            at=lambda t: line_of(t, "[deb.dev_names]"),
        ),
        id="deb-dev-name-taken",
    ),
    pytest.param(
        BadRecipe(
            change=edit(
                "[deb.system]\n",
                '[deb.dev_names]\nexecutorch-runtim = "libexecutorch-dev"\n\n[deb.system]\n',
            ),
            what="unknown package 'executorch-runtim'",
            key="deb.dev_names.executorch-runtim",
            at=lambda t: line_of(t, "executorch-runtim ="),
        ),
        id="deb-dev-name-unknown-package",
    ),
    pytest.param(
        BadRecipe(
            change=edit(
                'executorch-runtime = "executorch"\n', 'executorch-runtime = "Executorch"\n'
            ),
            what="not a package name",
            key="rpm.names.executorch-runtime",
            at=lambda t: line_of(t, 'executorch-runtime = "Executorch"'),
        ),
        id="rpm-name-invalid",
    ),
    pytest.param(
        BadRecipe(
            change=edit('[deb]\nrevision = "1"\n', '[deb]\nrevision = "1 beta"\n'),
            what="not a deb revision",
            key="deb.revision",
            at=lambda t: line_of(t, 'revision = "1 beta"'),
        ),
        id="deb-revision-invalid",
    ),
    pytest.param(
        BadRecipe(
            change=edit(
                '[rpm]\nrelease = "1"\nmaintainer = "ExecuTorch split packages '
                '<executorch-split@example.org>"\n',
                '[rpm]\nrelease = "1"\nmaintainer = "nobody"\n',
            ),
            what="not a 'Name <address>' maintainer",
            key="rpm.maintainer",
            at=lambda t: line_of(t, 'maintainer = "nobody"'),
        ),
        id="rpm-maintainer-invalid",
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
    *[
        pytest.param(
            BadRecipe(
                change=edit(old, new),
                what=f"unknown key '{key.rsplit('.', 1)[1]}'",
                key=key,
                at=lambda t, needle=needle: line_of(t, needle),
            ),
            id=f"unknown-key-{name}",
        )
        for name, old, new, key, needle in UNKNOWN_KEYS
    ],
    pytest.param(
        BadRecipe(
            change=edit("\netdump = {", '\n"etdump lib" = {'),
            what="not a CMake component name: 'etdump lib'",
            key="components.etdump lib",
            at=lambda t: line_of(t, '"etdump lib" = {'),
        ),
        id="component-name-invalid",
    ),
    pytest.param(
        BadRecipe(
            change=edit("[packages.executorch-export]", "[packages.Executorch-Export]"),
            what="not a package name: 'Executorch-Export'",
            key="packages.Executorch-Export",
            at=lambda t: line_of(t, "[packages.Executorch-Export]"),
        ),
        id="package-name-invalid",
    ),
    pytest.param(
        BadRecipe(
            change=edit("[system.conda]\n", "[system.conda]\nbad = 3\n"),
            what="expected str, got int",
            key="system.conda.bad",
            at=lambda t: line_of(t, "bad = 3"),
        ),
        id="conda-system-value-not-a-string",
    ),
    pytest.param(
        BadRecipe(
            change=edit("schema = 1", "schema = 2"),
            what="schema 2",
            key="recipe.schema",
            at=lambda t: line_of(t, "schema = 2"),
        ),
        id="schema-2",
    ),
    pytest.param(
        BadRecipe(
            change=edit("schema = 1", 'schema = "1"'),
            what="expected int, got str",
            key="recipe.schema",
            at=lambda t: line_of(t, "schema ="),
        ),
        id="schema-not-an-int",
    ),
    pytest.param(
        BadRecipe(
            change=edit(TOGETHER_FILES, 'files = ["executorch/lib/mlx.metallib"]'),
            what="files that travel together are at least two distinct paths",
            key="together[0].files",
            at=lambda t: line_of(t, 'files = ["executorch/lib/mlx.metallib"]'),
        ),
        id="together-one-file",
    ),
    pytest.param(
        BadRecipe(
            change=edit(TOGETHER_FILES, 'files = ["executorch/lib/*.dylib", "executorch/lib/x"]'),
            what="not a file's path in the wheel (no globs, no directories): 'executorch/lib/*",
            key="together[0].files",
            at=lambda t: line_of(t, 'files = ["executorch/lib/*.dylib"'),
        ),
        id="together-glob",
    ),
    pytest.param(
        BadRecipe(
            change=edit(TOGETHER_REASON, ""),
            what="missing required key 'reason'",
            key="together[0].reason",
            at=lambda t: line_of(t, "[[together]]"),
        ),
        id="together-without-reason",
    ),
    pytest.param(
        BadRecipe(
            change=edit(MMAN_HEADER, 'header = "executorch/include/executorch/x/mman_windows.h"'),
            what="not a header's path under the include directory: 'executorch/include/",
            key="headers_not_alone[0].header",
            at=lambda t: line_of(t, 'header = "executorch/include/'),
        ),
        id="header-as-a-wheel-path",
    ),
    pytest.param(
        BadRecipe(
            change=edit(MMAN_HEADER, 'header = "executorch/extension/*/mman_windows.h"'),
            what="not a header's path under the include directory",
            key="headers_not_alone[0].header",
            at=lambda t: line_of(t, 'header = "executorch/extension/*'),
        ),
        id="header-glob",
    ),
    pytest.param(
        BadRecipe(
            change=edit(
                COMPLEX_UTILS_HEADER,
                'header = "executorch/runtime/core/portable_type/c10/c10/util/complex_math.h"',
            ),
            what="listed twice",
            key="headers_not_alone[2].header",
            at=lambda t: line_of(t, "[[headers_not_alone]]", 2) + 1,
        ),
        id="header-twice",
    ),
]


def write_bad(case: BadRecipe, directory: Path) -> tuple[Path, int]:
    """Write the edited recipe; return its path and the line its error must name."""
    text = case.change(SHIPPED.read_text(encoding="utf-8"))
    path = directory / "bad.toml"
    path.write_text(text, encoding="utf-8")
    return path, case.at(text)


def test_shipped_recipe_loads() -> None:
    """The default recipe: three packages and the declared process-exclusive pair (per
    platform: the Linux `.so` and the macOS `.dylib` files)."""
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
        ),
        (
            "executorch/kernels/quantized/libquantized_ops_aot_lib.dylib",
            "executorch/lib/libexecutorch_kernels_quantized.dylib",
        ),
    ]
    assert [x.platforms for x in recipe.exclusive] == [("manylinux_*",), ("macosx_*",)]
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


def load_edited(tmp_path: Path, *changes: Callable[[str], str]) -> tuple[Path, str, RecipeError]:
    """Apply `changes` to the shipped text, load it; return path, text and the error."""
    text = SHIPPED.read_text(encoding="utf-8")
    for change in changes:
        text = change(text)
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    return path, text, info.value


@pytest.mark.parametrize(
    ("change", "suggested", "others"),
    [
        pytest.param(edit(EXCLUDE, EXCLUDES), ["exclude"], ["glob"], id="excludes"),
        pytest.param(
            edit("[components]\n", "[component]\n"), ["components"], ["rules"], id="component"
        ),
        pytest.param(
            edit(RULE_2, f'{RULE_2}platform = "manylinux_*"\n'),
            ["platforms"],
            ["exclude", "glob"],
            id="platform-in-rule",
        ),
        pytest.param(
            edit(RULE_2, f'{RULE_2}arch = "x86_64"\n'),
            ["exclude", "glob", "package", "platforms", "reason"],
            [],
            id="arch-in-rule",
        ),
    ],
)
def test_unknown_key_fix_names_close_match_or_known_keys(
    change: Callable[[str], str], suggested: list[str], others: list[str], tmp_path: Path
) -> None:
    """The fix line offers the close known key alone, or every known key when none is close."""
    _, _, error = load_edited(tmp_path, change)
    fix = str(error).splitlines()[1]
    assert all(key in fix for key in suggested), fix
    assert not any(key in fix for key in others), fix


def test_every_unknown_key_is_named_once(tmp_path: Path) -> None:
    """Unknown keys all over the file: one error, one problem per key in file order, each line."""
    path, text, error = load_edited(
        tmp_path,
        edit("[components]\n", "[extras]\nfoo = 1\n\n[components]\n"),
        edit(EXCLUDE, EXCLUDES),
        edit("[packages.executorch-runtime]\n", "[packages.executorch-runtime]\nsumary = 'x'\n"),
    )
    located = [line for line in str(error).splitlines() if "(recipe key " in line]
    expected = [
        ("packages.executorch-runtime.sumary", line_of(text, "sumary =")),
        ("rules[1].excludes", line_of(text, "excludes =")),
        ("extras", line_of(text, "[extras]")),
    ]
    assert len(located) == len(expected), str(error)
    for problem, (key, line) in zip(located, expected, strict=True):
        assert f"(recipe key {key}): {path}:{line}" in problem
        assert problem.endswith(f": {path}:{line}")


def test_newer_schema_is_reported_before_its_keys(tmp_path: Path) -> None:
    """A schema-2 recipe with a key schema 1 lacks: the error is the schema, not the key."""
    path, text, error = load_edited(
        tmp_path, edit("schema = 1", "schema = 2"), edit(EXCLUDE, EXCLUDES)
    )
    first, fix = str(error).splitlines()
    assert first.endswith(f"(recipe key recipe.schema): {path}:{line_of(text, 'schema = 2')}")
    assert "2" in first.split("(recipe key")[0]
    assert "1" in fix


def test_missing_schema_reads_as_1(tmp_path: Path) -> None:
    """Recipes written before `schema` existed still load."""
    path = tmp_path / "old.toml"
    path.write_text(edit("schema = 1\n", "")(SHIPPED.read_text(encoding="utf-8")), encoding="utf-8")
    assert load_recipe(path).packages == load_recipe().packages
