"""The stages import only downward (STYLE.md: input -> plan -> targets -> verify/doctor, the CLI
on top): every `import` and `from` of a splitter module, read with ast, against the layers."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import splitter

ROOT = Path(splitter.__file__).parent

# Low to high; a module may import its own layer and those below it.
LAYERS = (
    (
        "splitter",
        "splitter.errors",
        "splitter.model",
        "splitter.licensing",
        "splitter.manifest",
        "splitter.platforms",
        "splitter.tools",
    ),
    ("splitter.binaries",),
    ("splitter.input",),
    ("splitter.plan",),
    ("splitter.targets",),
    ("splitter.verify",),
    ("splitter.doctor",),
    ("splitter.cli",),
    ("splitter.__main__",),
)
DATA = "splitter.checks"  # the checks' data (consumer project, model): importable by anything
# These read what a build wrote (its manifest), never how a target wrote it.
NEVER = {"splitter.verify": "splitter.targets", "splitter.doctor": "splitter.targets"}


def module_names() -> dict[str, Path]:
    """Every module under splitter/, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def within(name: str, prefix: str) -> bool:
    """Whether module `name` is `prefix` or inside it."""
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> int | None:
    """The index of the layer holding `name` (the longest prefix wins); None for data."""
    if within(name, DATA):
        return None
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if within(name, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is None:
        raise AssertionError(f"module in no layer (add it to LAYERS in {__file__}): {name}")
    return best[1]


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The splitter modules `name` imports (anywhere: module level, functions, TYPE_CHECKING),
    with their line numbers; `from package import module` counts as that module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full if full in known else base, node.lineno))
    return [(target, line) for target, line in found if within(target, "splitter")]


def violations() -> list[str]:
    """Every import of a higher layer, or of a layer a stage must never read, as text."""
    modules = module_names()
    problems = set()
    for name, path in modules.items():
        here = layer_of(name)
        for target, line in imports_of(name, path, set(modules)):
            there = layer_of(target)
            rel = path.relative_to(ROOT.parent)
            if here is not None and there is not None and there > here:
                problems.add(f"{name} -> {target} ({rel}:{line}: a higher layer)")
            for importer, forbidden in NEVER.items():
                if within(name, importer) and within(target, forbidden):
                    problems.add(
                        f"{name} -> {target} ({rel}:{line}: {importer} never imports {forbidden})"
                    )
    return sorted(problems)


def test_every_module_has_a_layer() -> None:
    """A new top-level module must be placed in LAYERS (layer_of raises otherwise)."""
    for name in module_names():
        layer_of(name)


def test_imports_go_down_the_layers() -> None:
    """Nothing imports a higher layer; verify and doctor never import targets."""
    found = violations()
    for problem in found:
        print(problem)
    assert not found, f"{len(found)} layering violation(s):\n" + "\n".join(found)


def test_layers_are_checked() -> None:
    """The checker sees the imports it is meant to judge: a real one, a relative one, and a
    submodule named in `from package import module`."""
    modules = module_names()
    known = set(modules)
    app = dict(imports_of("splitter.cli.app", modules["splitter.cli.app"], known))
    assert "splitter.errors" in app
    assert layer_of("splitter.checks.consumer") is None
    assert layer_of("splitter.targets.conda.build") == 4
    assert layer_of("splitter.__main__") == len(LAYERS) - 1


# The CLI parses and prints: it reaches the core through these modules only (the request and
# its resolution, the builders' registry and driver, the plan's JSON and types, diff, verify
# and doctor's entry points), never the wheel reader, the binaries or the planning steps.
CLI_MAY_IMPORT = (
    "splitter.errors",
    "splitter.model",
    "splitter.manifest",
    "splitter.platforms",
    "splitter.cli",
    "splitter.plan.request",
    "splitter.plan.resolve",
    "splitter.plan.report",
    "splitter.plan.release",
    "splitter.plan.diff",
    "splitter.plan.review",
    "splitter.targets.builder",
    "splitter.targets.registry",
    "splitter.verify",
    "splitter.doctor",
)


def cli_violations() -> list[str]:
    """Every import by splitter.cli of a module outside CLI_MAY_IMPORT, as text."""
    modules = module_names()
    problems = []
    for name, path in modules.items():
        if not within(name, "splitter.cli"):
            continue
        for target, line in imports_of(name, path, set(modules)):
            # a prefix: splitter.plan.diff covers the modules diff is split into; the package
            # itself holds only splitter's version (--version)
            if target != "splitter" and not target.startswith(CLI_MAY_IMPORT):
                problems.append(f"{name} -> {target} ({path.name}:{line})")
    return sorted(set(problems))


def test_the_cli_only_parses_and_prints() -> None:
    """splitter.cli imports nothing of input/, binaries/ or the planning steps (make, recipe,
    selector, layout, facts, exclusive) and no target's internals: it asks the core."""
    found = cli_violations()
    assert not found, "the CLI reaches into the core:\n" + "\n".join(found)


def test_the_cli_rule_sees_a_violation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The rule fails on a CLI module that imports the wheel reader or make_plan."""
    fake = tmp_path / "splitter" / "cli" / "sneaky.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        "from splitter.input.fetch import resolve_input\nfrom splitter.plan.make import make_plan\n"
    )
    real = module_names()
    monkeypatch.setattr(
        sys.modules[__name__], "module_names", lambda: {**real, "splitter.cli.sneaky": fake}
    )
    assert [p for p in cli_violations() if "sneaky" in p] == [
        "splitter.cli.sneaky -> splitter.input.fetch (sneaky.py:1)",
        "splitter.cli.sneaky -> splitter.plan.make (sneaky.py:2)",
    ]


LONGEST = 450  # lines: a module past it does more than one job (STYLE.md)


def test_no_module_is_over_the_limit() -> None:
    """Every module of splitter/ is at most LONGEST lines, counted as wc -l does."""
    long = {
        str(path.relative_to(ROOT.parent)): count
        for path in module_names().values()
        if (count := path.read_bytes().count(b"\n")) > LONGEST
    }
    assert not long, f"modules over {LONGEST} lines: {long}"
