"""`splitter doctor --output`: a built output (single or release), one environment at a time.

An environment is what a user installs together: for a single wheel's output, all of it; for a
release's channel, per subdir, the Python-independent packages beside one export build (as
`verify` installs them). Each is installed into scratch space and scanned as a prefix, with
static analysis only, so every platform of a release is diagnosed, not only this machine's.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path

from splitter.doctor.diagnose import Diagnosis, diagnose_dirs
from splitter.errors import DoctorError
from splitter.manifest import check_artifacts, read_manifest
from splitter.verify.install import Installed, install
from splitter.verify.release import release_environments


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
    manifest = read_manifest(out)
    check_artifacts(out, manifest)
    with tempfile.TemporaryDirectory(prefix="splitter-doctor-") as scratch_name:
        scratch = Path(scratch_name)
        environments = release_environments(out, manifest)
        if environments is None:
            yield str(out), install(out, scratch / "env-0")
            return
        for index, environment in enumerate(environments):
            installed = install(
                environment.source, scratch / f"env-{index}", paths=environment.paths
            )
            yield environment.label, installed


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
