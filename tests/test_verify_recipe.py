"""`verify` checks an output against the recipe its build used, which the manifest records
(path, sha256, and a copy in OUT for a --recipe build), not against the recipe splitter ships.

The builds are trees of the real macOS arm64 wheel: everything verify runs for them is static
(signatures, dyld's resolution, kernels, the [[together]] groups, CMake as Darwin), so each
takes seconds; the recipes are the shipped one with one rule changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from builders import run_splitter

from splitter.manifest import NAME, RECIPE_COPY
from splitter.plan.recipe import default_recipe_path

pytestmark = pytest.mark.integration

HEADER = "executorch/include/executorch/devtools/etdump/utils.h"
INCLUDE_RULE = """glob = "executorch/include/**"
package = "executorch-runtime"
reason = "C++ headers of the runtime"
"""
MOVED_RULE = f"""glob = "executorch/include/**"
exclude = ["{HEADER}"]
package = "executorch-runtime"
reason = "C++ headers of the runtime"

[[rules]]
glob = "{HEADER}"
package = "executorch-kernels-quantized"
reason = "a test: one header moved to another package"
"""
TOGETHER = "[[together]]\n"


def changed_recipe(path: Path, old: str, new: str) -> Path:
    """The shipped recipe with `old` (which it holds once) replaced by `new`, written at `path`."""
    text = default_recipe_path().read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def build_tree(wheel: Path, out: Path, recipe: Path | None) -> Path:
    """`splitter build -t tree` of `wheel` into `out` (with `--recipe recipe` when given)."""
    options = ["--recipe", str(recipe)] if recipe is not None else []
    result = run_splitter("-q", "build", "-t", "tree", *options, "-o", str(out), str(wheel))
    assert result.returncode == 0, result.stderr
    return out


def verify_json(out: Path) -> tuple[int, dict[str, object], str]:
    """verify's exit code, its --json report ({} when none) and its stderr."""
    result = run_splitter("verify", str(out), "--json")
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


@pytest.fixture(scope="module")
def moved(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(OUT, recipe): a --recipe build whose recipe moves one header to kernels-quantized."""
    root = tmp_path_factory.mktemp("moved")
    recipe = changed_recipe(root / "moved.toml", INCLUDE_RULE, MOVED_RULE)
    return build_tree(real_wheel_macos, root / "out", recipe), recipe


def copy_of(out: Path, tmp_path: Path) -> Path:
    """A copy of the output `out` to alter."""
    copy = tmp_path / "out"
    shutil.copytree(out, copy, symlinks=True)
    return copy


def test_a_recipe_build_records_its_recipe_and_a_copy(moved: tuple[Path, Path]) -> None:
    """The manifest names the recipe as given with its sha256 and the copy in OUT, which holds
    the recipe's bytes and is a file the build wrote; the header is where that recipe put it."""
    out, recipe = moved
    manifest = json.loads((out / NAME).read_text())
    sha = hashlib.sha256(recipe.read_bytes()).hexdigest()
    assert manifest["recipe"] == {"path": recipe.name, "sha256": sha, "copy": RECIPE_COPY}
    assert (out / RECIPE_COPY).read_bytes() == recipe.read_bytes()
    assert RECIPE_COPY in manifest["files"]
    assert RECIPE_COPY not in {a["path"] for a in manifest["artifacts"]}
    moved_header = HEADER.removeprefix("executorch/")
    quantized = (out / "executorch-kernels-quantized").rglob(Path(moved_header).name)
    runtime = (out / "executorch-runtime").rglob(Path(moved_header).name)
    assert [p.as_posix() for p in quantized if p.as_posix().endswith(moved_header)]
    assert not [p.as_posix() for p in runtime if p.as_posix().endswith(moved_header)]


def test_verify_passes_a_recipe_build(moved: tuple[Path, Path]) -> None:
    out, _ = moved
    code, report, stderr = verify_json(out)
    assert code == 0, stderr
    assert report["ok"] is True


@pytest.mark.parametrize("change", ["altered", "swapped", "missing"])
def test_verify_refuses_a_recipe_copy_that_is_not_the_builds(
    moved: tuple[Path, Path], tmp_path: Path, change: str
) -> None:
    """The copy under OUT changed after the build (a byte added, the shipped recipe put in its
    place, removed): verify exits 14 naming it, before anything is installed."""
    out = copy_of(moved[0], tmp_path)
    copy = out / RECIPE_COPY
    if change == "altered":
        copy.write_bytes(copy.read_bytes() + b"\n")
    elif change == "swapped":
        copy.write_bytes(default_recipe_path().read_bytes())
    else:
        copy.unlink()
    code, _, stderr = verify_json(out)
    assert code == 14, stderr
    problem = "is missing" if change == "missing" else "has changed since the build"
    assert f"the recipe this output was built with {problem}" in stderr
    assert str(copy) in stderr


def test_verify_uses_the_builds_recipe_not_the_shipped_one(
    real_wheel_macos: Path, tmp_path: Path
) -> None:
    """A recipe without the shipped [[together]] group: verify has no `together` row (the
    shipped recipe would give one, for MLX's library and mlx.metallib)."""
    recipe = changed_recipe(tmp_path / "apart.toml", TOGETHER, "[together_removed]\n")
    text = recipe.read_text(encoding="utf-8")
    start = text.index("[together_removed]")
    end = text.index("\n\n", start)
    recipe.write_text(text[:start] + text[end + 2 :], encoding="utf-8")
    out = build_tree(real_wheel_macos, tmp_path / "out", recipe)
    code, report, stderr = verify_json(out)
    assert code == 0, stderr
    rows = report["checks"]
    assert isinstance(rows, list)
    assert not [r for r in rows if r["check"] == "together"]
    assert [r for r in rows if r["check"] == "signature"]


@pytest.fixture(scope="module")
def shipped(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build with the shipped recipe."""
    return build_tree(real_wheel_macos, tmp_path_factory.mktemp("shipped") / "out", None)


def test_a_shipped_recipe_build_records_it_without_a_copy(shipped: Path) -> None:
    manifest = json.loads((shipped / NAME).read_text())
    sha = hashlib.sha256(default_recipe_path().read_bytes()).hexdigest()
    assert manifest["recipe"] == {"path": "executorch.toml", "sha256": sha, "copy": None}
    assert not (shipped / RECIPE_COPY).exists()


def test_a_manifest_without_a_recipe_is_verified_with_the_shipped_one(
    shipped: Path, tmp_path: Path
) -> None:
    """A manifest an older splitter wrote (no "recipe") still reads."""
    out = copy_of(shipped, tmp_path)
    manifest = json.loads((out / NAME).read_text())
    del manifest["recipe"]
    (out / NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    code, report, stderr = verify_json(out)
    assert code == 0, stderr
    assert report["ok"] is True


def test_a_shipped_recipe_that_changed_since_the_build_is_refused(
    shipped: Path, tmp_path: Path
) -> None:
    """The build used another shipped recipe than this splitter's (its sha256 differs): verify
    refuses, naming the shipped recipe."""
    out = copy_of(shipped, tmp_path)
    manifest = json.loads((out / NAME).read_text())
    manifest["recipe"]["sha256"] = "0" * 64
    (out / NAME).write_text(json.dumps(manifest, indent=1) + "\n")
    code, _, stderr = verify_json(out)
    assert code == 14, stderr
    assert f"(sha256 differs): {default_recipe_path()}" in " ".join(stderr.split())
