"""Build the shipped C++ consumer with a real CMake and run the shipped quantized model."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import splitter.checks
from splitter.errors import ExternalToolError, MissingToolError
from splitter.verify.emulate import Emulator

CONSUMER = Path(splitter.checks.__file__).parent / "consumer"
MODEL = Path(splitter.checks.__file__).parent / "model"
# Seconds a step may take before it is killed and its row fails: CMake's configure or build,
# and a run of the model (about 0.1 s natively and under qemu; torch's import takes seconds).
# A hung program, or a guest qemu never finishes, fails its row instead of hanging verify.
BUILD_TIMEOUT = 900
RUN_TIMEOUT = 300
TIMED_OUT = -9  # the return code of a step killed at its timeout (SIGKILL, as subprocess does)


def run_step(
    command: list[str], timeout: float, *, text: bool = True, **options: Any
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run with output captured and `timeout`: a step still running then is killed
    and returns TIMED_OUT, its output so far and a last line saying so."""
    try:
        return subprocess.run(
            command, capture_output=True, check=False, timeout=timeout, text=text, **options
        )
    except subprocess.TimeoutExpired as expired:
        said = f"\n{Path(command[0]).name}: no answer in {timeout:g} s, killed\n".encode()
        stdout, stderr = expired.stdout or b"", (expired.stderr or b"") + said  # bytes, always
        if text:
            return subprocess.CompletedProcess(
                command, TIMED_OUT, stdout.decode(errors="replace"), stderr.decode(errors="replace")
            )
        return subprocess.CompletedProcess(command, TIMED_OUT, stdout, stderr)


@dataclass(frozen=True)
class Configured:
    """The result of configuring (and building, when configure passed) the consumer."""

    returncode: int
    output: str
    build_dir: Path

    @property
    def runner(self) -> Path:
        """The built program."""
        return self.build_dir / "runner"

    def variable(self, name: str) -> str:
        """A contract variable as the consumer printed it."""
        for line in self.output.splitlines():
            if f"consumer: {name}=" in line:
                return line.split(f"consumer: {name}=", 1)[1]
        raise KeyError(name)


def cmake_version(cmake: Path) -> tuple[int, int]:
    """Major and minor version printed by `cmake --version`; a --cmake that does not run, or
    prints no version, is a typed error rather than a traceback."""
    command = [str(cmake), "--version"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise MissingToolError(
            "cmake",
            f"verify builds the C++ consumer with it; {exc.strerror or exc}",
            "pip install cmake, or pass --cmake with the path of a CMake executable",
            (str(cmake),),
        ) from exc
    found = re.search(r"cmake version (\d+)\.(\d+)", result.stdout)
    if result.returncode != 0 or found is None:
        raise ExternalToolError(
            f"{cmake} does not print a CMake version (pass --cmake with a CMake executable)",
            command,
            result.returncode,
            result.stderr + result.stdout,
        )
    return int(found.group(1)), int(found.group(2))


def build_consumer(
    cmake: Path,
    build_dir: Path,
    *,
    prefix: Path | None = None,
    config_dir: Path | None = None,
    quantized: bool,
    toolchain: Path | None = None,
    spelling: str = "executorch",
) -> Configured:
    """Configure and build the consumer against an install prefix or a config directory;
    with a CMake `toolchain` file, for another architecture (splitter.verify.emulate);
    `spelling` is the name the consumer gives find_package."""
    args = [
        str(cmake),
        "-S",
        str(CONSUMER),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DWITH_QUANTIZED={'ON' if quantized else 'OFF'}",
        f"-DPACKAGE_SPELLING={spelling}",
    ]
    if prefix is not None:
        args.append(f"-DCMAKE_PREFIX_PATH={prefix}")
    if config_dir is not None:
        args.append(f"-D{spelling}_DIR={config_dir}")
    if toolchain is not None:
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    configure = run_step(args, BUILD_TIMEOUT, text=True)
    output = configure.stdout + configure.stderr
    if configure.returncode != 0:
        return Configured(configure.returncode, output, build_dir)
    build = run_step([str(cmake), "--build", str(build_dir), "-j2"], BUILD_TIMEOUT, text=True)
    return Configured(build.returncode, output + build.stdout + build.stderr, build_dir)


def run_model(
    runner: Path,
    out_file: Path,
    emulator: Emulator | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the shipped quantized model (under `emulator`, a runner of another architecture);
    the output bytes land in `out_file`. Killed after `timeout` s (TIMED_OUT; by default
    RUN_TIMEOUT)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    args = (str(MODEL / "model.pte"), str(MODEL / "input0.bin"), str(out_file))
    if emulator is None:
        command = [str(runner), *args]
    else:
        command = emulator.command(runner, *args, environ=env)
    return run_step(command, RUN_TIMEOUT if timeout is None else timeout, env=env)


def expected_output() -> bytes:
    """What executorch's own Python runtime gave for the shipped model."""
    return (MODEL / "expected_output0.bin").read_bytes()


RUN_PTE = """
import sys
import numpy as np
import torch
import executorch.kernels.quantized  # loads the export plugin; a failed load is only logged
assert hasattr(torch.ops.quantized_decomposed, "add"), "export plugin did not load"
torch.ops.quantized_decomposed.add.out  # raises if the schema was not registered
from executorch.runtime import Runtime
model = sys.argv[1]
x = np.frombuffer(open(model + "/input0.bin", "rb").read(), dtype=np.float32).reshape(2, 8)
method = Runtime.get().load_program(model + "/model.pte").load_method("forward")
sys.stdout.buffer.write(method.execute([torch.from_numpy(x.copy())])[0].numpy().tobytes())
"""


def run_model_python(
    python: Path, sitedir: Path, library_path: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the shipped model through executorch.runtime from `sitedir` with `python`;
    `library_path` stands for a system libdir the scratch root's libraries are installed in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(sitedir)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = str(library_path)
    return run_step([str(python), "-c", RUN_PTE, str(MODEL)], RUN_TIMEOUT, text=False, env=env)
