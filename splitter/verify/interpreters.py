"""The interpreters `splitter verify` runs Python checks with: the ones given (--python), else
this one and each `python3.X` a release needs, found on PATH."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from splitter.errors import UsageError


def interpreters(given: Sequence[Path], wanted: list[str]) -> dict[str, Path]:
    """CPython version ("3.11") -> an interpreter of it: the `given` ones (each must run),
    else this interpreter and each `python3.X` of `wanted` found on PATH that runs (a pyenv
    shim for a version not installed does not)."""
    found: dict[str, Path] = {}
    if given:
        for interpreter in given:
            version = _python_version(interpreter)
            if version is None:
                raise UsageError(
                    f"--python {interpreter} does not run as a Python interpreter: pass the "
                    "path of a python executable"
                )
            found.setdefault(version, interpreter)
        return found
    candidates = [Path(sys.executable)]
    candidates += [Path(p) for v in wanted if (p := shutil.which(f"python{v}"))]
    for interpreter in candidates:
        version = _python_version(interpreter)
        if version is not None:
            found.setdefault(version, interpreter)
    return found


def _python_version(interpreter: Path) -> str | None:
    try:
        result = subprocess.run(
            [str(interpreter), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    version = result.stdout.strip()
    return version if result.returncode == 0 and version else None


def torch_available(python: Path) -> bool:
    """Whether `python` can import torch."""
    result = subprocess.run([str(python), "-c", "import torch"], capture_output=True, check=False)
    return result.returncode == 0
