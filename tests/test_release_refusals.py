"""Wheels that do not form one release are refused by `splitter plan` and `splitter build`
alike (exit 11, ReleaseError), naming the wheels and the fix, with nothing written: wheels of
two versions, two wheels for one platform and Python, and a file of a Python-independent
package in only one wheel. Small wheels (builders.make_wheel) with the small recipe of
test_diff, so each case differs from a valid release in one thing only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import pytest
from builders import make_wheel, run_splitter
from test_diff import RECIPE

LINUX = "manylinux_2_28_x86_64"


def wheel(
    directory: Path,
    *,
    version: str = "1.5.1",
    python: str = "cp311",
    platform: str = LINUX,
    extra: Mapping[str, bytes] = MappingProxyType({}),
) -> Path:
    """An executorch wheel of `version` for `python` and `platform` holding a runtime library,
    a header, a Python file and the `extra` members."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "executorch/lib/libexecutorch.so": b"not an ELF file, a plain data file\n",
        "executorch/include/executorch.h": b"#pragma once\n",
        "executorch/exir/a.py": f"PYTHON = {python!r}\n".encode(),
        **extra,
    }
    return make_wheel(directory, files, version=version, tag=f"{python}-{python}-{platform}")


def refused(tmp_path: Path, wheels: list[Path]) -> str:
    """`plan` and `build -t tree` on `wheels`: both exit 11 with the same message, and the
    build leaves no OUT. The message."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    planned = run_splitter("plan", "--recipe", str(recipe), *map(str, wheels))
    out = tmp_path / "out"
    built = run_splitter(
        "build", "-q", "-t", "tree", "--recipe", str(recipe), "-o", str(out), *map(str, wheels)
    )
    assert planned.returncode == 11, planned.stdout + planned.stderr
    assert built.returncode == 11, built.stdout + built.stderr
    assert "Traceback" not in planned.stderr + built.stderr
    assert planned.stderr == built.stderr
    assert not out.exists()
    return planned.stderr


def test_the_small_release_itself_plans(tmp_path: Path) -> None:
    """The cases below differ from this one in one thing each: cp311 and cp312 of 1.5.1."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    wheels = [wheel(tmp_path / p, python=p) for p in ("cp311", "cp312")]
    planned = run_splitter("plan", "--recipe", str(recipe), *map(str, wheels))
    assert planned.returncode == 0, planned.stderr


def test_two_versions_are_refused(tmp_path: Path) -> None:
    old = wheel(tmp_path / "old", version="1.5.0", python="cp311")
    new = wheel(tmp_path / "new", version="1.5.1", python="cp312")
    message = refused(tmp_path, [old, new])
    assert "the wheels of one release have different versions (1.5.0, 1.5.1)" in message
    assert old.name in message and new.name in message
    assert "split each version on its own" in message


def test_two_wheels_for_one_python_are_refused(tmp_path: Path) -> None:
    first = wheel(tmp_path / "a")
    second = wheel(tmp_path / "b", platform="manylinux_2_34_x86_64")
    message = refused(tmp_path, [first, second])
    assert "two wheels for one platform and Python (linux-64, 3.11)" in message
    assert first.name in message and second.name in message
    assert "give one wheel per platform and Python" in message


@pytest.mark.parametrize("holder", ["cp311", "cp312"])
def test_a_shared_file_in_one_wheel_only_is_refused(tmp_path: Path, holder: str) -> None:
    """A header of the runtime (one package for every Python) in one of the two wheels only,
    whichever of them holds it."""
    more = {"executorch/include/more.h": b"#pragma once\n"}
    wheels = [
        wheel(tmp_path / p, python=p, extra=more if p == holder else {}) for p in ("cp311", "cp312")
    ]
    message = refused(tmp_path, wheels)
    (has,) = [w for w in wheels if holder in w.name]
    assert (
        "a file of a Python-independent package is in only one of two wheels of a release "
        f"({has.name} has it): executorch/include/more.h"
    ) in message
    assert "give wheels of one build" in message
