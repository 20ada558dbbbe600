"""The environments of a release's output, for `splitter verify` and `splitter doctor --output`.

An environment is what a user installs together: per platform, the Python-independent packages
beside one export build (a conda package, a wheel, or a tree)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from splitter.plan.facts import subdir_of_tag
from splitter.verify.install import EXPORT


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """One installable environment of a release's output."""

    label: str
    subdir: str  # the conda subdir of its platform
    python: str  # the CPython of its export, e.g. 3.11
    source: Path  # an output holding it: installed from, with `packages`
    packages: tuple[str, ...] | None = None  # the packages of `source` to install; None: all


def release_environments(out: Path, scratch: Path) -> list[Environment] | None:
    """The environments of `out` when it is a release's output (a channel with several export
    builds, a wheelhouse with several export wheels, or trees with several export trees),
    else None. Channels and wheelhouses are viewed through hard links under `scratch`."""
    channel = release_exports(out)
    if channel is not None:
        found = []
        for subdir, builds in sorted(channel.items()):
            for export in builds:
                view = export_environment(
                    out, subdir, export, scratch / f"view-{subdir}-{export.name}"
                )
                label = f"{subdir}, python {python_of(export)}: {export.name}"
                found.append(
                    Environment(label=label, subdir=subdir, python=python_of(export), source=view)
                )
        return found
    if not out.is_dir():
        return None
    wheels = sorted(out.glob("*.whl"))
    python_wheels = [w for w in wheels if not w.name.split("-")[2].startswith("py3")]
    if len(python_wheels) > 1:
        found = []
        for export in python_wheels:
            tags = export.name.removesuffix(".whl").split("-")
            platform, cpython = tags[-1], tags[-3]
            view = scratch / f"view-{export.name}"
            view.mkdir(parents=True)
            for wheel in wheels:
                if wheel == export or wheel.name.endswith(f"-py3-none-{platform}.whl"):
                    os.link(wheel, view / wheel.name)
            label = f"{platform}: {export.name}"
            found.append(
                Environment(
                    label=label,
                    subdir=subdir_of_tag(platform),
                    python=_dotted(cpython),
                    source=view,
                )
            )
        return found
    subdirs = [d for d in sorted(out.iterdir()) if d.is_dir() and any(d.glob("*.install"))]
    if subdirs and not any(out.glob("*.install")):
        found = []
        for folder in subdirs:
            names = [m.name.removesuffix(".install") for m in sorted(folder.glob("*.install"))]
            exports = [n for n in names if n.rsplit("-", 1)[-1].startswith("py3")]
            common = tuple(n for n in names if n not in exports)
            for name in exports:
                version = _dotted(name.rsplit("-", 1)[-1].removeprefix("py"))
                found.append(
                    Environment(
                        label=f"{folder.name}: {name}",
                        subdir=folder.name,
                        python=version,
                        source=folder,
                        packages=(*common, name),
                    )
                )
        return found
    return None


def _dotted(tag: str) -> str:
    """cp311 or 311 -> 3.11."""
    digits = tag.removeprefix("cp")
    return f"{digits[0]}.{digits[1:]}"


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
    return _dotted(build[2 : build.index("h")])


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
