"""verify of an output of another architecture when its cross compiler is broken: failed rows
that name the compiler, exit 1, no traceback (splitter.verify.emulate)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from builders import run_splitter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="emulates aarch64 on x86_64"),
]


def fake_tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return tool


def verify_co_load(out: Path, tools: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "splitter", "verify", str(out), "--only", "co-load", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )


def test_a_cross_compiler_that_fails_gives_failed_rows_naming_it(
    real_wheel_aarch64: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tree"
    built = run_splitter("-q", "build", "-t", "tree", "-o", str(out), str(real_wheel_aarch64))
    assert built.returncode == 0, built.stderr
    tools = tmp_path / "bin"
    cxx = fake_tool(tools, "aarch64-linux-gnu-g++", "echo 'cc1: out of order' >&2\nexit 1\n")
    fake_tool(tools, "qemu-aarch64", "exit 99\n")  # never run: there is no loader to run
    result = verify_co_load(out, tools)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    rows = json.loads(result.stdout)["checks"]
    failed = [r for r in rows if r["status"] == "fail"]
    assert failed and {r["check"] for r in failed} == {"co-load"}
    for row in failed:
        assert str(cxx) in row["detail"] and "cc1: out of order" in row["detail"], row


@pytest.mark.integration
def test_the_guest_loads_the_sysroots_libc(tmp_path: Path) -> None:
    """A cross-built program run through Emulator.command maps the cross sysroot's libc (its
    /proc/self/maps, as qemu-user shows the guest's mappings), also on a machine holding
    Debian's multiarch libc6:arm64 at /lib/aarch64-linux-gnu, which the guest's loader would
    otherwise take from its default path (.ci/run installs it, so CI runs this case)."""
    from splitter.verify.emulate import Emulator, emulator_for

    emulator = emulator_for("linux-aarch64")
    assert isinstance(emulator, Emulator), emulator  # .ci/run installs qemu-user and the g++
    source = tmp_path / "maps.c"
    source.write_text(
        "#include <stdio.h>\n"
        "int main(void) {\n"
        '    FILE *maps = fopen("/proc/self/maps", "r");\n'
        "    char line[4096];\n"
        "    while (fgets(line, sizeof line, maps)) fputs(line, stdout);\n"
        "    return 0;\n"
        "}\n"
    )
    program = tmp_path / "maps"
    subprocess.run([str(emulator.cxx), "-x", "c", str(source), "-o", str(program)], check=True)
    run = subprocess.run(
        emulator.command(program), capture_output=True, text=True, check=True, timeout=60
    )
    libc = {line.split()[-1] for line in run.stdout.splitlines() if "/libc.so" in line}
    assert libc == {str(emulator.sysroot / "lib" / "libc.so.6")}, run.stdout
