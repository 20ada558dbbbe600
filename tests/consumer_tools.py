"""Real CMake versions from PyPI (cached) for the consumer checks; the rest lives in splitter."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from splitter.binaries.elf import analyse_elf
from splitter.verify.consumer import (  # noqa: F401  (re-exported for the tests)
    MODEL,
    RUN_PTE,
    build_consumer,
    cmake_version,
    expected_output,
    run_model,
)

# Spec given to pip for each CMake under test; "system" is the machine's own (3.25 here).
CMAKE_SPECS = {
    "3.24": "cmake==3.24.*",
    "3.25": "cmake==3.25.*",  # the machine's own cmake when that is 3.25
    "3.28": "cmake==3.28.*",
    "4.x": "cmake==4.*",
}


def cache_root() -> Path:
    """The splitter test cache ($SPLITTER_CACHE or ~/.cache/splitter)."""
    return Path(os.environ.get("SPLITTER_CACHE") or Path.home() / ".cache" / "splitter")


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock on one cache entry while filling it: the test processes of
    pytest-xdist ask for the same venvs and wheels at once."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cmake_executable(label: str) -> Path:
    """A cmake binary of the given version line, installed from PyPI once into the cache."""
    spec = CMAKE_SPECS[label]
    system = shutil.which("cmake")
    # Check the version itself: a venv's own cmake wheel could shadow the system one on PATH.
    if system and label[0].isdigit() and "x" not in label:
        wanted = tuple(int(part) for part in label.split("."))
        if cmake_version(Path(system)) == wanted:
            return Path(system)
    target = cache_root() / "cmake" / label
    binary = target / "cmake" / "data" / "bin" / "cmake"
    with cache_lock(f"cmake-{label}"):
        if not binary.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), spec],
                check=True,
                capture_output=True,
            )
    return binary


def needed(binary: Path) -> list[str]:
    """NEEDED entries of an ELF, read with splitter's own analyser."""
    return list(analyse_elf(binary.name, binary.read_bytes()).needed)
