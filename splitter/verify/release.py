"""The environments of a release's output, for `splitter verify` and `splitter doctor --output`.

An environment is what a user installs together: per platform, the Python-independent packages
beside one export build (a conda package, a wheel, or a tree). Which artifact is which comes
from the output's manifest (splitter.manifest), never from file names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from splitter.manifest import Manifest

# .deb and .rpm outputs hold one Python per platform; verify picks this machine's packages.
PER_ENVIRONMENT = ("conda", "wheel", "tree")


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """One installable environment of a release's output."""

    label: str
    subdir: str  # the conda subdir of its platform
    python: str  # the CPython of its export, e.g. 3.11
    source: Path  # the output it is installed from
    paths: tuple[str, ...]  # its artifacts (relative to `source`) to install


def release_environments(out: Path, manifest: Manifest) -> list[Environment] | None:
    """The environments of `out` when it is a release's output (conda channel, wheelhouse or
    trees holding several Python packages' builds), else None."""
    exports = sorted(
        (a for a in manifest.artifacts if a.python is not None),
        key=lambda a: (a.platform, a.python or "", a.path),
    )
    if manifest.target not in PER_ENVIRONMENT or len(exports) <= 1:
        return None
    found = []
    for export in exports:
        assert export.python is not None
        shared = [
            a.path for a in manifest.artifacts if a.platform == export.platform and a.python is None
        ]
        name = PurePosixPath(export.path).name
        name = name.removesuffix(".json") if manifest.target == "tree" else name
        found.append(
            Environment(
                label=f"{export.platform}, python {export.python}: {name}",
                subdir=export.platform,
                python=export.python,
                source=out,
                paths=(*sorted(shared), export.path),
            )
        )
    return found
