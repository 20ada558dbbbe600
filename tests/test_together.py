"""The recipe's [[together]] rule: files that must land in one package and one directory in
every layout (MLX's library and mlx.metallib), checked by the plan and by verify."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from builders import make_wheel

from splitter.errors import RecipeError
from splitter.input.wheel import read_wheel
from splitter.model import Recipe, Together
from splitter.plan.layout import check_together
from splitter.plan.recipe import load_recipe
from splitter.verify.macos import together_rows

MLX = "executorch/lib/libexecutorch_backend_mlx.dylib"
METALLIB = "executorch/lib/mlx.metallib"
MACOS = "cp311-cp311-macosx_14_0_arm64"
RUNTIME = "executorch-runtime"


def wheel_of(tmp_path: Path, paths: list[str], tag: str = MACOS):  # type: ignore[no-untyped-def]
    return read_wheel(make_wheel(tmp_path, {p: b"x" for p in paths}, tag=tag))


def owners(paths: list[str], package: str = RUNTIME) -> dict[str, tuple[str, int]]:
    return {p: (package, 0) for p in paths}


def test_the_shipped_recipe_keeps_the_metallib_with_its_library(tmp_path: Path) -> None:
    (group,) = load_recipe().together
    assert group.files == (MLX, METALLIB) and group.platforms == ("macosx_*",)
    check_together(wheel_of(tmp_path, [MLX, METALLIB]), load_recipe(), owners([MLX, METALLIB]))


def test_a_wheel_of_another_platform_is_not_checked(tmp_path: Path) -> None:
    wheel = wheel_of(tmp_path, [MLX], tag="cp311-cp311-manylinux_2_28_x86_64")
    check_together(wheel, load_recipe(), owners([MLX]))


def test_a_library_without_its_metallib_is_refused(tmp_path: Path) -> None:
    recipe = load_recipe()
    with pytest.raises(RecipeError) as raised:
        check_together(wheel_of(tmp_path, [MLX]), recipe, owners([MLX]))
    message = str(raised.value)
    assert f"files that travel together are not all in executorch-1.5.1-{MACOS}.whl" in message
    assert f"(together, {recipe.path}:{recipe.together[0].line}): {METALLIB} missing" in message


def test_files_in_two_packages_are_refused(tmp_path: Path) -> None:
    split = {MLX: (RUNTIME, 0), METALLIB: ("executorch-export", 1)}
    with pytest.raises(RecipeError) as raised:
        check_together(wheel_of(tmp_path, [MLX, METALLIB]), load_recipe(), split)
    assert f"{MLX} in {RUNTIME}, {METALLIB} in executorch-export" in str(raised.value)


def moved(recipe: Recipe, other: str) -> Recipe:
    group = Together(files=(MLX, other), reason="a test", line=7, platforms=("macosx_*",))
    return dataclasses.replace(recipe, together=(group,))


@pytest.mark.parametrize(
    ("other", "layout"),
    [
        ("executorch/lib/sub/mlx.metallib", "wheel"),
        ("executorch/data/mlx.metallib", "wheel"),
        ("executorch/share/cmake/mlx.metallib", "wheel"),
    ],
    ids=["subdirectory", "site-packages", "regenerated"],
)
def test_files_in_two_directories_are_refused(tmp_path: Path, other: str, layout: str) -> None:
    recipe = moved(load_recipe(), other)
    with pytest.raises(RecipeError) as raised:
        check_together(wheel_of(tmp_path, [MLX, other]), recipe, owners([MLX, other]))
    message = str(raised.value)
    assert f"land in different directories of the {layout} layout" in message
    assert f"(together, {recipe.path}:7)" in message


def test_verify_row_per_group_installed(tmp_path: Path) -> None:
    """A row when the output installs a file of the group: pass beside each other, fail when
    apart or one is missing; no row for an output (Linux) with none of them."""
    recipe = load_recipe()
    lib = {"lib/libexecutorch_backend_mlx.dylib": tmp_path, "lib/mlx.metallib": tmp_path}
    assert together_rows(lib, recipe) == [
        (
            "together",
            "libexecutorch_backend_mlx.dylib + mlx.metallib",
            "installed in one directory",
            "",
            True,
        )
    ]
    apart = {"lib/libexecutorch_backend_mlx.dylib": tmp_path, "share/mlx.metallib": tmp_path}
    ((*_, detail, passed),) = together_rows(apart, recipe)
    assert not passed and detail == "libexecutorch_backend_mlx.dylib in lib; mlx.metallib in share"
    ((*_, detail, passed),) = together_rows(
        {"lib/libexecutorch_backend_mlx.dylib": tmp_path}, recipe
    )
    assert not passed and "mlx.metallib in no directory" in detail
    assert together_rows({"lib/libexecutorch.so": tmp_path}, recipe) == []
