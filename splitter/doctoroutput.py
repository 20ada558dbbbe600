"""`splitter doctor --output`: a built output (single or release), one environment at a time.

An environment is what a user installs together: for a single wheel's output, all of it; for a
release's channel, per subdir, the Python-independent packages beside one export build (as
`verify` installs them). Each is installed into scratch space and scanned as a prefix, with
static analysis only, so every platform of a release is diagnosed, not only this machine's.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from splitter.doctor import Diagnosis, diagnose_dirs
from splitter.errors import DoctorError
from splitter.verify.install import Installed, install
from splitter.verify.release import export_environment, python_of, release_exports


def diagnose_output(out: Path) -> list[Diagnosis]:
    """One diagnosis per environment of `out`, with paths relative to the installed root."""
    if not out.is_dir():
        raise DoctorError(f"not a directory (give the -o directory of `splitter build`): {out}")
    diagnoses = []
    for name, installed in _environments(out):
        found = diagnose_dirs(
            "output",
            name,
            [installed.libdir],
            [installed.sitedir] if installed.sitedir is not None else [],
        )
        diagnoses.append(_relative(found, installed.root))
    return diagnoses


def _environments(out: Path) -> Iterator[tuple[str, Installed]]:
    with tempfile.TemporaryDirectory(prefix="splitter-doctor-") as scratch_name:
        scratch = Path(scratch_name)
        for index, (label, source, only) in enumerate(_release_environments(out, scratch)):
            yield label, install(source, scratch / f"env-{index}", only)


Environment = tuple[str, Path, tuple[str, ...] | None]


def _release_environments(out: Path, scratch: Path) -> list[Environment]:
    """(label, output to install, packages to install) per environment: a release's channel
    per subdir and export build, its wheelhouse per platform and export wheel, its trees per
    subdir and export tree; any other output whole."""
    found: list[Environment] = []
    exports = release_exports(out)
    if exports is not None:
        for subdir, builds in sorted(exports.items()):
            for export in builds:
                view = export_environment(
                    out, subdir, export, scratch / f"view-{subdir}-{export.name}"
                )
                label = f"{subdir}, python {python_of(export)}: {export.name}"
                found.append((label, view, None))
        return found
    wheels = sorted(out.glob("*.whl"))
    python_wheels = [w for w in wheels if not w.name.split("-")[2].startswith("py3")]
    if len(python_wheels) > 1:
        for export in python_wheels:
            platform = export.name.removesuffix(".whl").rsplit("-", 1)[1]
            view = scratch / f"view-{export.name}"
            view.mkdir()
            for wheel in wheels:
                if wheel == export or wheel.name.endswith(f"-py3-none-{platform}.whl"):
                    os.link(wheel, view / wheel.name)
            found.append((f"{platform}: {export.name}", view, None))
        return found
    subdirs = [d for d in sorted(out.iterdir()) if d.is_dir() and any(d.glob("*.install"))]
    if subdirs and not any(out.glob("*.install")):
        for folder in subdirs:
            names = [m.name.removesuffix(".install") for m in sorted(folder.glob("*.install"))]
            python = [n for n in names if n.rsplit("-", 1)[-1].startswith("py3")]
            common = tuple(n for n in names if n not in python)
            for name in python:
                found.append((f"{folder.name}: {name}", folder, (*common, name)))
        return found
    return [(str(out), out, None)]


def _relative(diagnosis: Diagnosis, root: Path) -> Diagnosis:
    """The diagnosis with scratch paths written relative to the installed root."""
    prefix = str(root.resolve()) + "/"

    def short(text: str) -> str:
        return text.replace(prefix, "")

    return dataclasses.replace(
        diagnosis,
        libraries=tuple(dataclasses.replace(x, path=short(x.path)) for x in diagnosis.libraries),
        hazards=tuple(
            dataclasses.replace(h, message=short(h.message), files=tuple(map(short, h.files)))
            for h in diagnosis.hazards
        ),
        notes=tuple(map(short, diagnosis.notes)),
    )
