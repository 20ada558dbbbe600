"""A program that never finishes fails its verify row in the time allowed, natively and under
qemu, instead of hanging verify (and the suite): the row says it timed out."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import splitter.verify.consumer as consumer
from splitter.verify.checks import _model_check
from splitter.verify.consumer import TIMED_OUT, Configured, run_model
from splitter.verify.emulate import Emulator, emulator_for
from splitter.verify.rows import Status


def hung_runner(directory: Path) -> Path:
    """A `runner` that never answers, as a deadlocked program would."""
    runner = directory / "runner"
    runner.write_text("#!/bin/sh\nexec sleep 600\n")
    runner.chmod(0o755)
    return runner


def test_a_hung_runner_is_killed_and_its_row_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer, "RUN_TIMEOUT", 1)
    hung_runner(tmp_path)
    started = time.monotonic()
    row = _model_check(Configured(0, "", tmp_path), tmp_path / "out.bin", "CMake 3.28")
    assert time.monotonic() - started < 30
    assert row.status is Status.FAIL and row.outcome == "timed out"
    assert row.detail == "runner: no answer in 1 s, killed"


@pytest.mark.integration
def test_a_hung_guest_under_qemu_is_killed(tmp_path: Path) -> None:
    """An aarch64 program spinning forever, cross-built and run under qemu-aarch64."""
    emulator = emulator_for("linux-aarch64")
    assert isinstance(emulator, Emulator), emulator  # .ci/run installs qemu-user and the g++
    source = tmp_path / "spin.c"
    source.write_text("int main(void) { for (;;) { } }\n")
    program = tmp_path / "spin"
    subprocess.run([str(emulator.cxx), "-x", "c", str(source), "-o", str(program)], check=True)
    started = time.monotonic()
    run = run_model(program, tmp_path / "out.bin", emulator, timeout=2)
    assert time.monotonic() - started < 30
    assert run.returncode == TIMED_OUT
    assert run.stderr.endswith("no answer in 2 s, killed\n")
