"""splitter's own distribution: it builds without packaging warnings and ships every file."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tracked(*roots: str) -> list[str]:
    """The files git tracks under `roots`, as repo-relative POSIX paths."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", *roots], cwd=REPO, capture_output=True, check=True
    ).stdout
    return sorted(p for p in listed.decode().split("\0") if p and (REPO / p).exists())


def test_wheel_builds_quietly_and_ships_every_file(tmp_path: Path) -> None:
    """setuptools builds splitter's wheel from a copy of the tracked files with no warning (a
    data directory left out of `packages` warns "Package would be ignored"), and the wheel holds
    every tracked file under splitter/ and recipes/: the consumer project, the model fixture and
    the recipe that `verify` and `build` read from the installed copy."""
    source = tmp_path / "source"
    source.mkdir()
    with tarfile.open(tmp_path / "tracked.tar", "w") as archive:
        for name in tracked("."):
            archive.add(REPO / name, arcname=name, recursive=False)
    with tarfile.open(tmp_path / "tracked.tar") as archive:
        archive.extractall(source, filter="data")
    built = subprocess.run(
        [
            sys.executable,
            "-W",
            "default",
            "-c",
            f"from setuptools import build_meta as b; print(b.build_wheel({str(tmp_path)!r}))",
        ],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert "Warning" not in built.stderr, built.stderr
    wheel = tmp_path / built.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    wanted = [n for n in tracked("splitter") if not n.endswith(".pyc")]
    wanted += ["splitter/recipes/" + n.removeprefix("recipes/") for n in tracked("recipes")]
    missing = [n for n in wanted if n not in shipped]
    assert not missing, missing
