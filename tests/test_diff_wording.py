"""`splitter diff` decides from records, never from its own words: with every sentence the
report and --json render reworded (the wording tables of splitter.plan.diffreport), the
verdicts, reasons, counts and exit status stay the same while every rendered line changes."""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
from builders import make_wheel
from conftest import _download
from test_diff import RECIPE, library, plain_library, small
from typer.testing import CliRunner

from splitter.model import Plan
from splitter.plan import diffreport
from splitter.plan.diff import (
    BinaryChange,
    Break,
    Moved,
    PackageDiff,
    Reason,
    SplitDiff,
    Verdict,
    diff_plans,
)
from splitter.plan.diffabi import AbiReport, abi_reports
from splitter.plan.diffmeta import Meta, MetadataChange, Requirement
from splitter.plan.make import make_plan
from splitter.plan.recipe import default_recipe_path, load_recipe

pytestmark = pytest.mark.integration

TABLES = ("METADATA", "STATES", "REASONS", "ABI", "LINES", "PHRASES")
PROSE = ("reasons", "metadata", "pins")  # a package's --json fields that are sentences
Rendered = tuple[dict[str, Any], list[str]]


def reworded(template: str) -> str:
    """The same fields in other words: every literal run reversed, behind a mark of its own."""
    parts = ["~ "]
    for literal, name, spec, conversion in string.Formatter().parse(template):
        parts.append(literal[::-1])
        if name is not None:
            parts.append("{" + name + (f"!{conversion}" if conversion else ""))
            parts.append((f":{spec}" if spec else "") + "}")
    return "".join(parts)


class Recording(dict[Any, str]):
    """A wording table that notes which of its entries were read."""

    def __init__(self, entries: dict[Any, str]) -> None:
        super().__init__(entries)
        self.read: set[Any] = set()

    def __getitem__(self, key: Any) -> str:
        self.read.add(key)
        return super().__getitem__(key)


def reword(monkeypatch: pytest.MonkeyPatch) -> dict[str, Recording]:
    """Replace every wording table of the diff's report by its rewording (until the test ends)."""
    tables = {
        name: Recording({k: reworded(v) for k, v in getattr(diffreport, name).items()})
        for name in TABLES
    }
    for name, table in tables.items():
        monkeypatch.setattr(diffreport, name, table)
    return tables


def rendered(found: SplitDiff, abi: list[AbiReport] | None = None) -> Rendered:
    """The --json form (as printed, read back) and the report's lines."""
    shown = json.loads(json.dumps(diffreport.diff_json(found, abi)))
    return shown, diffreport.report_lines(found, abi)


def split_prose(shown: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The --json form with each sentence replaced by a count (or, for pins, whether there is
    one), and the sentences in order."""
    decided = json.loads(json.dumps(shown))
    prose: list[str] = []
    for package in decided["packages"].values():
        for key in PROSE:
            value = package.pop(key)
            prose += value if isinstance(value, list) else [value]
            package[f"{key} count"] = len(value) if isinstance(value, list) else bool(value)
    for report in decided.get("abi", []):
        prose.append(report.pop("summary"))
    return decided, prose


def assert_same_decisions(words: Rendered, other: Rendered) -> None:
    """The same --json but for its sentences (verdicts, counts, paths, symbols, abidiff's
    status), and every sentence and every report line in other words."""
    (shown, lines), (again, relines) = words, other
    decided, prose = split_prose(shown)
    redecided, reprose = split_prose(again)
    assert redecided == decided
    assert len(reprose) == len(prose)
    assert all(b != a for a, b in zip(prose, reprose, strict=True) if a)
    assert len(relines) == len(lines)
    assert not set(relines) & set(lines), sorted(set(relines) & set(lines))


# --- every entry of the tables, from records made by hand ------------------------------------


def every_kind() -> tuple[SplitDiff, list[AbiReport]]:
    """A comparison holding each kind of record, lists past the limit, each abidiff finding."""
    many = tuple(f"executorch/exir/f{i}.py" for i in range(12))
    torch = Requirement(pip="torch>=2.13,<2.14", conda="pytorch >=2.13,<2.14")
    c10 = Requirement(pip="c10", conda="libc10")
    requires = {
        Meta.REQUIRES_ADDED: (None, c10),
        Meta.REQUIRES_REMOVED: (c10, None),
        Meta.REQUIRES_CHANGED: (torch, c10),
    }
    in_effect = {Meta.EXCLUSIVE_STATE: (None, False), Meta.EXCLUSIVE_EVIDENCE: (True, True)}
    metadata = tuple(
        MetadataChange(
            kind=kind,
            subject=f"subject-{i}",
            requires=requires.get(kind, (None, None)),
            in_effect=in_effect.get(kind, (None, None)),
        )
        for i, kind in enumerate(Meta)
    )
    breaking = next(m for m in metadata if not m.compatible)
    reasons = (
        Reason(kind=Break.REMOVED, subject="executorch/lib/a.so"),
        Reason(kind=Break.SONAME, subject="executorch/lib/b.so", was="b.so.1", now="b.so.2"),
        Reason(kind=Break.SYMBOLS, subject="executorch/lib/b.so", names=("_Z1fv", "g")),
        Reason(kind=Break.KERNELS, subject="executorch/lib/b.so", names=("q::add.out",)),
        Reason(kind=Break.METADATA, subject=breaking.subject, metadata=breaking),
        Reason(kind=Break.MOVED_IN, subject="executorch/include/c.h", was="executorch-export"),
    )
    assert {r.kind for r in reasons} == set(Break)
    lists = {
        f"{what}_{how}": tuple(f"{what}-{how}-{i}" for i in range(12))
        for what in ("needed", "symbols", "kernels", "schemas")
        for how in ("added", "removed")
    }
    binary = BinaryChange(
        path="executorch/lib/b.so",
        soname=("b.so.1", "b.so.2"),
        runpath=(("$ORIGIN",), ("$ORIGIN", "$ORIGIN/../lib")),
        **lists,
    )
    package = PackageDiff(
        name="executorch-runtime",
        added=many,
        removed=many,
        changed=many,
        moved=tuple(Moved(old=p, new=f"{p}.moved", old_package="executorch-export") for p in many),
        binaries=(binary,),
        metadata=metadata,
        verdict=Verdict.INCOMPATIBLE,
        reasons=reasons,
    )
    abi = [
        AbiReport(path=f"executorch/lib/{s}.so", status=s, report="", debug_info=debug)
        for s in (0, 4, 12, 1)
        for debug in (False, True)
    ]
    excluded = SplitDiff(
        old="old.whl",
        new="new.whl",
        packages=(package,),
        excluded_added=tuple(f"executorch/x/third-party/{i}.py" for i in range(12)),
        excluded_removed=("executorch/y/tests/old.py",),
    )
    return excluded, abi


def test_every_sentence_is_in_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records of every kind: each table entry is used, and reworded tables change every report
    line and every sentence of --json, and nothing else."""
    found, abi = every_kind()
    words = rendered(found, abi)
    tables = reword(monkeypatch)
    other = rendered(found, abi)
    for name, table in tables.items():
        assert table.read == set(table), f"{name}: entries no record renders"
    assert_same_decisions(words, other)


# --- the verdicts of real comparisons, decided again under other words ----------------------


def variant(tmp_path: Path, name: str, edits: list[tuple[str, str]]) -> Path:
    """The shipped recipe with each edit (old text, new text) made once."""
    text = default_recipe_path().read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


# The quantized kernel library moved into the runtime package (a file moved in, dependencies
# and an exclusivity verdict gone), a component renamed, a requirement changed, one added.
MOVED = [
    (
        'glob = "executorch/lib/libexecutorch_kernels_quantized.so*"\n'
        'package = "executorch-kernels-quantized"',
        'glob = "executorch/lib/libexecutorch_kernels_quantized.so*"\n'
        'package = "executorch-runtime"',
    ),
    ("\nthreadpool = {", "\nthreadpool2 = {"),
    ('pip = "torch>=2.13,<2.14"', 'pip = "torch>=2.13,<2.15"'),
    ('"libtorch_python.so", "libc10.so",', '"libtorch_python.so",'),
    (
        "\n# Libraries the platform provides",
        '\n[externals.c10]\nsonames = ["libc10.so"]\nsite_dirs = ["torch/lib"]\n'
        'conda = "libc10"\npip = "c10"\n\n# Libraries the platform provides',
    ),
]
# The headers in a package of their own: a new package, every header moved.
HEADERS = [
    (
        "[packages.executorch-export]",
        '[packages.executorch-headers]\nsummary = "headers"\n\n[packages.executorch-export]',
    ),
    (
        'glob = "executorch/include/**"\npackage = "executorch-runtime"',
        'glob = "executorch/include/**"\npackage = "executorch-headers"',
    ),
    (
        '[deb.names]\nexecutorch-runtime = "libexecutorch"',
        '[deb.names]\nexecutorch-headers = "executorch-headers"\n'
        'executorch-runtime = "libexecutorch"',
    ),
    (
        '[rpm.names]\nexecutorch-runtime = "executorch"',
        '[rpm.names]\nexecutorch-headers = "executorch-headers"\nexecutorch-runtime = "executorch"',
    ),
]


@pytest.fixture(scope="module")
def small_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small wheels with one kind of change each (see tests/test_diff.py), and their recipe
    (an optional component `extra`)."""
    root = tmp_path_factory.mktemp("wording")
    recipe = root / "recipe.toml"
    recipe.write_text(
        RECIPE.replace(
            "[system]", 'extra = { library = "libexecutorch_extra.so", platforms = [] }\n\n[system]'
        )
    )
    old_lib = library(
        root,
        "",
        "int kept(void) { return 1; }\nint dropped(void) { return 2; }",
        "libexecutorch.so",
    )
    new_lib = library(
        root,
        '{"quantized_decomposed::mul.out", 0, mul_out},',
        "int kept(void) { return 1; }\nint fresh(void) { return 3; }",
        "libexecutorch.so.2",
    )
    extra = plain_library(root, "int other(void) { return 5; }", "libexecutorch_extra.so")
    (root / "with").mkdir()
    return {
        "recipe": recipe,
        "old": small(root / "old", "1.5.0", old_lib, "executorch/exir/moved.py"),
        "new": small(root / "new", "1.5.1", new_lib, "executorch/include/moved.py"),
        "with": make_wheel(
            root / "with",
            {
                "executorch/lib/libexecutorch.so": old_lib,
                "executorch/lib/libexecutorch_extra.so": extra,
                "executorch/include/executorch.h": b"#pragma once\n",
                "executorch/exir/moved.py": b"VALUE = 1\n",
            },
            version="1.5.1",
        ),
    }


def test_small_wheels_decide_the_same(
    small_wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A soname, symbols, kernels, a file moved between packages and a CMake component, each
    way, with abidiff's findings: the same decisions in other words."""
    recipe = load_recipe(small_wheels["recipe"])
    plans = {k: make_plan(small_wheels[k], recipe) for k in ("old", "new", "with")}
    pairs = [("old", "new"), ("new", "old"), ("old", "with"), ("with", "old")]
    abidiff = shutil.which("abidiff") is not None
    abi = {
        p: abi_reports(plans[p[0]], plans[p[1]], diff(plans, p)) if abidiff else [] for p in pairs
    }
    words = {p: rendered(diff(plans, p), abi[p]) for p in pairs}
    verdicts = {p: [x["verdict"] for x in words[p][0]["packages"].values()] for p in pairs}
    assert verdicts[("new", "old")] == ["incompatible", "incompatible"]
    assert verdicts[("with", "old")] == ["incompatible", "compatible"]
    reword(monkeypatch)
    for pair in pairs:
        assert_same_decisions(words[pair], rendered(diff(plans, pair), abi[pair]))


def diff(plans: dict[str, Plan], pair: tuple[str, str]) -> SplitDiff:
    return diff_plans(plans[pair[0]], plans[pair[1]])


def test_real_wheels_decide_the_same(
    real_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.5.0 -> 1.5.1 split by recipes that move a library, a component, requirements and the
    headers: dependencies, components, requirements, exclusivity and packages that come and
    go, the same decisions in other words."""
    wheel_150 = _download("executorch==1.5.0", None)
    recipes = {
        "shipped": None,
        "moved": variant(tmp_path, "moved", MOVED),
        "headers": variant(tmp_path, "headers", HEADERS),
    }
    pairs = [("shipped", "moved"), ("moved", "shipped"), ("shipped", "headers")]
    pairs.append(("headers", "shipped"))
    olds = {n: make_plan(wheel_150, load_recipe(path)) for n, path in recipes.items()}
    news = {n: make_plan(real_wheel, load_recipe(path)) for n, path in recipes.items()}
    found = {p: diff_plans(olds[p[0]], news[p[1]]) for p in pairs}
    kinds = {m.kind for f in found.values() for p in f.packages for m in p.metadata}
    # a licence that changes: tests/test_diff.py::test_a_new_third_party_component (these
    # recipes move components between packages whose licences are already each other's)
    assert kinds >= set(Meta) - {Meta.EXCLUSIVE_EVIDENCE, Meta.LICENSE_CHANGED}, set(Meta) - kinds
    assert {Meta.THIRD_PARTY_ADDED, Meta.THIRD_PARTY_REMOVED} <= kinds
    words = {p: rendered(found[p]) for p in pairs}
    reword(monkeypatch)
    for pair in pairs:
        assert_same_decisions(words[pair], rendered(diff_plans(olds[pair[0]], news[pair[1]])))


def test_the_command_exits_the_same(
    small_wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`splitter diff --json --exit-code`, run in this process: the same exit status and the
    same decisions in other words."""
    from splitter.cli.app import app

    args = ["-q", "diff", str(small_wheels["with"]), str(small_wheels["old"])]
    args += ["--recipe", str(small_wheels["recipe"]), "--exit-code"]
    runner = CliRunner()
    shown, text = (runner.invoke(app, args + extra) for extra in (["--json"], []))
    reword(monkeypatch)
    again, retext = (runner.invoke(app, args + extra) for extra in (["--json"], []))
    assert shown.exit_code == again.exit_code == text.exit_code == retext.exit_code == 1
    assert len(text.stdout.splitlines()) > 4, text.stdout + text.stderr  # a report, not an error
    assert_same_decisions(
        (json.loads(shown.stdout), text.stdout.splitlines()),
        (json.loads(again.stdout), retext.stdout.splitlines()),
    )
