"""Recognising a release's channel for `splitter verify` (see verify.run.verify_release)."""

from __future__ import annotations

import os
from pathlib import Path

from splitter.verify.install import EXPORT


def release_exports(out: Path) -> dict[str, list[Path]] | None:
    """subdir -> its export packages, when `out` is a conda channel of a release (several
    subdirs, or several export builds in one); None for a single wheel's output."""
    if not out.is_dir():
        return None
    subdirs = {
        d.name: sorted(d.glob(f"{EXPORT}-*.conda"))
        for d in sorted(out.iterdir())
        if d.is_dir() and (d / "repodata.json").exists() and any(d.glob("*.conda"))
    }
    if len(subdirs) > 1 or any(len(exports) > 1 for exports in subdirs.values()):
        return subdirs
    return None


def python_of(export: Path) -> str:
    """The CPython of an export package from its build string (py311h... -> 3.11)."""
    build = export.name.removesuffix(".conda").rsplit("-", 1)[1]
    digits = build[2 : build.index("h")]
    return f"{digits[0]}.{digits[1:]}"


def export_environment(out: Path, subdir: str, export: Path, view: Path) -> Path:
    """A channel at `view` holding one environment of the release channel `out`: the
    Python-independent packages of `subdir` beside its export build `export` (hard links),
    with the subdir's repodata; returns `view`."""
    (view / subdir).mkdir(parents=True)
    shared = [p for p in sorted((out / subdir).glob("*.conda")) if not p.name.startswith(EXPORT)]
    for package in [*shared, export]:
        os.link(package, view / subdir / package.name)
    (view / subdir / "repodata.json").write_bytes((out / subdir / "repodata.json").read_bytes())
    return view
