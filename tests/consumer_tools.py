"""Real CMake versions (PyPI wheels, cached) and the C++ consumer build used by several tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CONSUMER = Path(__file__).parent / "consumer"
MODEL = Path(__file__).parent / "data" / "model"
# Spec given to pip for each CMake under test; "system" is the machine's own (3.25 here).
CMAKE_SPECS = {
    "3.24": "cmake==3.24.*",
    "3.25": "system",
    "3.28": "cmake==3.28.*",
    "4.x": "cmake==4.*",
}


def cache_root() -> Path:
    """The splitter test cache ($SPLITTER_CACHE or ~/.cache/splitter)."""
    return Path(os.environ.get("SPLITTER_CACHE") or Path.home() / ".cache" / "splitter")


def cmake_executable(label: str) -> Path:
    """A cmake binary of the given version line, installed from PyPI once into the cache."""
    spec = CMAKE_SPECS[label]
    if spec == "system":
        found = shutil.which("cmake")
        assert found, "the system cmake is required"
        return Path(found)
    target = cache_root() / "cmake" / label
    binary = target / "cmake" / "data" / "bin" / "cmake"
    if not binary.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), spec],
            check=True,
            capture_output=True,
        )
    return binary


def cmake_version(binary: Path) -> tuple[int, int]:
    """Major and minor version printed by `cmake --version`."""
    first = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[2]
    major, minor = first.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class Configured:
    """The result of configuring (and building, when configure passed) the consumer."""

    returncode: int
    output: str
    build_dir: Path

    @property
    def runner(self) -> Path:
        return self.build_dir / "runner"

    def variable(self, name: str) -> str:
        """A contract variable as the consumer printed it."""
        for line in self.output.splitlines():
            if f"consumer: {name}=" in line:
                return line.split(f"consumer: {name}=", 1)[1]
        raise AssertionError(f"{name} not printed:\n{self.output}")


def build_consumer(
    cmake: Path,
    build_dir: Path,
    *,
    prefix: Path | None = None,
    config_dir: Path | None = None,
    quantized: bool,
) -> Configured:
    """Configure and build tests/consumer against an install prefix or a config directory."""
    args = [
        str(cmake),
        "-S",
        str(CONSUMER),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DWITH_QUANTIZED={'ON' if quantized else 'OFF'}",
    ]
    if prefix is not None:
        args.append(f"-DCMAKE_PREFIX_PATH={prefix}")
    if config_dir is not None:
        args.append(f"-Dexecutorch_DIR={config_dir}")
    configure = subprocess.run(args, capture_output=True, text=True, check=False)
    output = configure.stdout + configure.stderr
    if configure.returncode != 0:
        return Configured(configure.returncode, output, build_dir)
    build = subprocess.run(
        [str(cmake), "--build", str(build_dir), "-j2"], capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return Configured(0, output, build_dir)


def run_model(runner: Path, out_file: Path) -> subprocess.CompletedProcess[str]:
    """Run the committed quantized model; the output bytes land in `out_file`."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return subprocess.run(
        [str(runner), str(MODEL / "model.pte"), str(MODEL / "input0.bin"), str(out_file)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def expected_output() -> bytes:
    """What executorch's own Python runtime gave for the committed model."""
    return (MODEL / "expected_output0.bin").read_bytes()


def needed(binary: Path) -> list[str]:
    """NEEDED entries of an ELF, read with splitter's own analyser."""
    from splitter.binaries.elf import analyse_elf

    return list(analyse_elf(binary.name, binary.read_bytes()).needed)
