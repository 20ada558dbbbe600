"""Third-party components in the binaries: the plan's findings against an independent scan
(binutils `nm -D` for ELF, LLVM's `llvm-nm` for Mach-O, binutils `strings` for the literal
strings hidden code leaves, zipfile's names for the path patterns with `strings`
corroborating each binary recognised by its path) with the recipe's own patterns, and
malformed [[third_party]] tables refused with their line."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from splitter.errors import RecipeError
from splitter.model import Plan, Recipe
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe

SHIPPED = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"
ELF, MACHO = b"\x7fELF", b"\xcf\xfa\xed\xfe"
LLVM_NM = "llvm-nm-14"


def scan_strings(wheel: Path, directory: Path) -> dict[tuple[str, str], Counter[str]]:
    """(path, component) -> how many times each of its `strings` occurs, from binutils
    `strings -a -n 5` of every binary (a literal of five or more printable characters lies
    inside one of the runs it prints)."""
    recipe = load_recipe()
    found: dict[tuple[str, str], Counter[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            data = archive.read(member)
            if data[:4] not in (ELF, MACHO):
                continue
            target = directory / "strings" / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            runs = subprocess.run(
                ["strings", "-a", "-n", "5", str(target)], capture_output=True, text=True,
                check=True, errors="replace",
            ).stdout.splitlines()  # fmt: skip
            for component in recipe.third_party:
                for mark in component.strings:
                    count = sum(run.count(mark) for run in runs)
                    if count:
                        found.setdefault((member, component.name), Counter())[mark] = count
    return found


def path_claims(wheel: Path, plan: Plan) -> set[tuple[str, str]]:
    """(member, component) for each shipped member a component's path patterns claim, from
    zipfile's names: of several claims (a tree vendored inside another's) the one whose
    matching pattern is the longest."""
    excluded = {e.path for e in plan.excluded}
    found = set()
    for member in zipfile.ZipFile(wheel).namelist():
        if member.endswith("/") or member in excluded:
            continue
        claims = [
            (len(p), c.name)
            for c in plan.recipe.third_party
            for p in c.paths
            if fnmatch.fnmatchcase(member, p)
        ]
        if claims:
            found.add((member, max(claims)[1]))
    return found


def components_found(wheel: Path, plan: Plan, directory: Path) -> set[tuple[str, str]]:
    """(member, component) for every component binutils (nm, strings) or the path patterns
    find in a shipped member of `wheel`."""
    return (
        set(scan(wheel, directory)) | set(scan_strings(wheel, directory)) | path_claims(wheel, plan)
    )


def scan(wheel: Path, directory: Path) -> dict[tuple[str, str], Counter[str]]:
    """(path, component) -> pattern counts, from nm / llvm-nm output of every binary."""
    recipe = load_recipe()
    patterns = [(c.name, p) for c in recipe.third_party for p in c.symbols]
    found: dict[tuple[str, str], Counter[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            data = archive.read(member)
            if data[:4] not in (ELF, MACHO):
                continue
            target = directory / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            macho = data[:4] == MACHO
            command = (
                [LLVM_NM, "--defined-only", "--extern-only", str(target)]
                if macho
                else ["nm", "-D", "--defined-only", str(target)]
            )
            listing = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            for line in listing.splitlines():
                name = line.split()[-1].split("@")[0]  # ELF: name@@VERSION
                if macho:
                    name = name.removeprefix("_")
                hit = next(((c, p) for c, p in patterns if fnmatch.fnmatchcase(name, p)), None)
                if hit is not None:
                    found.setdefault((member, hit[0]), Counter())[hit[1]] += 1
    return found


@pytest.mark.integration
@pytest.mark.parametrize(
    "fixture", ["real_wheel", "real_wheel_aarch64", "real_wheel_macos"], ids=str
)
def test_components_match_nm(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Every component is found in exactly the files nm finds its symbols in, same counts."""
    if shutil.which("nm") is None or shutil.which(LLVM_NM) is None:
        pytest.skip(f"needs binutils nm and {LLVM_NM}")
    wheel: Path = request.getfixturevalue(fixture)
    plan = make_plan(wheel, load_recipe())
    expected = scan(wheel, tmp_path)
    marked = scan_strings(wheel, tmp_path)
    got = {(f.path, f.component): Counter(dict(f.patterns)) for f in plan.third_party}
    got_strings = {(f.path, f.component): Counter(dict(f.strings)) for f in plan.third_party}
    by_path = path_claims(wheel, plan)
    for key in by_path | set(marked):
        expected.setdefault(key, Counter())
    assert got == expected
    assert {k: v for k, v in got_strings.items() if v} == marked
    assert {(f.path, f.component) for f in plan.third_party if f.paths} == by_path
    for member, component in by_path:  # a binary known by its path names its project
        if (tmp_path / member).exists():
            listing = subprocess.run(
                ["strings", "-n", "6", str(tmp_path / member)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert component.casefold() in listing.casefold(), (member, component)
    assert all(f.package == plan.owners[f.path][0] for f in plan.third_party)
    seen = {component for _, component in expected}
    assert plan.third_party_missing == tuple(
        c.name for c in plan.recipe.third_party if c.name not in seen
    )
    # the survey this recipe was written from: each wheel carries these
    assert {"XNNPACK", "Eigen", "flatcc", "cpuinfo", "abseil", "CMSIS-NN", "PyTorch"} <= seen
    assert ("executorch/data/bin/flatc", "flatbuffers") in by_path
    # code linked with hidden visibility, found by its strings alone (issue 50)
    assert {"pybind11", "darts-clone"} <= {c for _, c in marked}
    if fixture == "real_wheel_macos":
        assert {"pthreadpool", "nlohmann_json"} <= seen
    c10 = [m for m, c in by_path if c == "PyTorch"]
    assert len(c10) == 25 and all("/portable_type/c10/" in m for m in c10)
    if fixture != "real_wheel":
        assert "KleidiAI" in seen
    if fixture == "real_wheel_macos":
        assert {"MLX", "metal-cpp"} <= seen
        assert ("executorch/lib/mlx.metallib", "MLX") in by_path


THIRD_PARTY = """
[[third_party]]
name = "Example"
license = "MIT"
url = "https://example.org/example"
license_text = { repo = "example/example", path = "LICENSE", revision = "0123456789abcdef0123456789abcdef01234567" }
symbols = ["example_*"]
"""  # noqa: E501


@pytest.mark.parametrize(
    ("old", "new", "what", "key"),
    [
        pytest.param(
            'symbols = ["example_*"]',
            'symbols = ["*example"]',
            "not a symbol pattern (a literal prefix, then * or ? globs): '*example'",
            "third_party[24].symbols",
            id="wildcard-first",
        ),
        pytest.param(
            'symbols = ["example_*"]',
            'symbols = ["xnn_*"]',
            "pattern 'xnn_*' is already XNNPACK's",
            "third_party[24].symbols",
            id="pattern-twice",
        ),
        pytest.param(
            'license = "MIT"\n',
            "",
            "missing required key 'license'",
            "third_party[24].license",
            id="no-license",
        ),
        pytest.param(
            'license = "MIT"',
            'license = "MIT or BSD"',
            "not an SPDX licence expression: 'MIT or BSD'",
            "third_party[24].license",
            id="expression",
        ),
        pytest.param(
            'path = "LICENSE",',
            'file = "LICENSE",',
            "missing required key 'path'",
            "third_party[24].license_text.path",
            id="license-text-without-path",
        ),
        pytest.param(
            'symbols = ["example_*"]',
            "symbols = []",
            "no symbol, string or path patterns",
            "third_party[24].symbols",
            id="no-patterns",
        ),
        pytest.param(
            'revision = "0123',
            'revision = "g123',
            "not a commit: 'g123",
            "third_party[24].license_text.revision",
            id="bad-revision",
        ),
        pytest.param(
            'path = "LICENSE",',
            'path = "COPYING",',
            "cannot read Example's copy",
            "third_party[24].license_text",
            id="no-licence-text",
        ),
        pytest.param(
            'symbols = ["example_*"]',
            'paths = ["/abs/*"]',
            "not a path pattern (a literal directory, then globs): '/abs/*'",
            "third_party[24].paths",
            id="absolute-path-pattern",
        ),
    ],
)
def test_bad_third_party_is_refused_with_its_line(
    old: str, new: str, what: str, key: str, tmp_path: Path
) -> None:
    """A malformed [[third_party]] table: RecipeError naming the file, line and key."""
    assert len(load_recipe().third_party) == 24  # the index in the keys above
    text = SHIPPED.read_text(encoding="utf-8") + THIRD_PARTY.replace(old, new)
    shutil.copytree(SHIPPED.parent / "licenses", tmp_path / "licenses")
    (tmp_path / "licenses" / "Example-LICENSE").write_text("Example licence\n")
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    first = str(info.value).splitlines()[0]
    lines = text.splitlines()
    header = max(n for n, line in enumerate(lines, 1) if line == "[[third_party]]")
    leaf = key.split(".")[1]  # the table's own key: a nested one is on its line
    at = next(
        (n for n, line in enumerate(lines, 1) if n > header and line.startswith(f"{leaf} =")),
        header,
    )
    assert what in first
    assert f"(recipe key {key})" in first
    assert first.endswith(f": {path}:{at}")


def test_recipe_declares_components() -> None:
    """The shipped recipe reads into typed records with their lines."""
    recipe: Recipe = load_recipe()
    xnnpack = recipe.third_party[0]
    assert (xnnpack.name, xnnpack.license, xnnpack.symbols) == (
        "XNNPACK",
        "BSD-3-Clause",
        ("xnn_*",),
    )
    text = SHIPPED.read_text(encoding="utf-8").splitlines()
    assert text[xnnpack.line - 1] == "[[third_party]]"
