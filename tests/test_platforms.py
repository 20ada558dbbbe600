"""One platform table (splitter.platforms): every platform fact has one home, and adding a
platform is adding its record. A fake riscv64 record added to the table shows in every lookup,
in `--platform`'s choices and in every refusal that lists platforms."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import splitter
import splitter.input.fetch as fetch
import splitter.platforms as platforms
from splitter.__main__ import main
from splitter.errors import UsageError
from splitter.input.fetch import WheelTarget, machine_subdir, wheel_targets
from splitter.model import Plan
from splitter.plan.facts import platform_of, subdir_of_tag
from splitter.plan.request import check_planned, unsupported_platform
from splitter.platforms import (
    SupportedPlatform,
    by_binary_machine,
    by_elf_machine,
    by_subdir,
    by_wheel_tag,
    cpython_of,
    cpython_tag,
    cpython_version,
    subdirs,
)
from splitter.targets.conan import ConanBuilder
from splitter.targets.distro.deb import DebBuilder
from splitter.targets.distro.rpm import RpmBuilder
from splitter.verify.emulate import emulator_for

RISCV = SupportedPlatform(
    subdir="linux-riscv64",
    family=platforms.MANYLINUX,
    wheel_tag="manylinux_2_35_riscv64",
    machine="riscv64",
    elf_machine=243,  # EM_RISCV
    elf_name="EM_RISCV",
    elf_relocations=(3, 2),  # R_RISCV_RELATIVE, R_RISCV_64
    macho_cpu="",
    deb="riscv64",
    triplet="riscv64-linux-gnu",
    rpm="riscv64",
    conan_os="Linux",
    conan_arch="riscv64",
    qemu="qemu-riscv64",
    cross_cxx="riscv64-linux-gnu-g++",
    cross_package="g++-riscv64-linux-gnu",
)


@pytest.fixture
def riscv(monkeypatch: pytest.MonkeyPatch) -> SupportedPlatform:
    """The table with one more record, as a new platform would be added."""
    monkeypatch.setattr(platforms, "SUPPORTED", (*platforms.SUPPORTED, RISCV))
    return RISCV


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int | str | None, str]:
    """`splitter ARGS` in this process (the table monkeypatched here holds): exit code, and
    stdout and stderr together."""
    monkeypatch.setattr(sys, "argv", ["splitter", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    return exited.value.code, captured.out + captured.err


@pytest.mark.parametrize(
    ("tag", "parsed", "text"),
    [
        pytest.param("cp311", (3, 11), "3.11", id="cp311"),
        pytest.param("cp310", (3, 10), "3.10", id="cp310"),
        pytest.param("cp39", (3, 9), "3.9", id="cp39"),
        pytest.param("py3", None, "", id="not-cpython"),
        pytest.param("cp3", None, "", id="no-minor"),
        pytest.param("cpython", None, "", id="not-digits"),
    ],
)
def test_one_cpython_tag_parser(tag: str, parsed: tuple[int, int] | None, text: str) -> None:
    assert cpython_of(tag) == parsed
    assert cpython_version(tag) == text
    if parsed is not None:
        assert cpython_tag(text) == tag


def test_the_lookups_find_each_shipped_platform() -> None:
    x86 = by_subdir("linux-64")
    assert x86 is not None
    assert by_wheel_tag("manylinux_2_28_x86_64") is x86
    assert by_wheel_tag("manylinux2014_x86_64") is x86
    assert by_elf_machine(62) is x86 and by_binary_machine("EM_X86_64") is x86
    mac = by_wheel_tag("macosx_14_0_arm64")
    assert mac is not None and mac.subdir == "osx-arm64"
    assert by_binary_machine("CPU_TYPE_ARM64") is mac
    assert by_binary_machine("") is None and by_elf_machine(0) is None
    assert by_wheel_tag("musllinux_1_2_x86_64") is None
    assert by_wheel_tag("macosx_14_0_x86_64") is None  # upstream ships no macOS x86_64 wheel
    assert subdirs() == ("linux-64", "linux-aarch64", "osx-arm64")


def test_a_record_added_to_the_table_shows_in_every_lookup(riscv: SupportedPlatform) -> None:
    assert by_subdir("linux-riscv64") is riscv
    assert by_wheel_tag("manylinux_2_31_riscv64") is riscv
    assert by_elf_machine(243) is riscv and by_binary_machine("EM_RISCV") is riscv
    assert subdir_of_tag("manylinux_2_31_riscv64") == "linux-riscv64"
    platform = platform_of("cp312", "manylinux_2_31_riscv64")
    assert (platform.conda_subdir, platform.machine) == ("linux-riscv64", "riscv64")
    assert (platform.glibc, platform.python) == ("2.31", (3, 12))
    # what the targets package, and the fetch targets
    assert "linux-riscv64" in (DebBuilder().limits.platforms or ())
    assert "linux-riscv64" in (RpmBuilder().limits.platforms or ())
    assert "linux-riscv64" in (ConanBuilder().limits.platforms or ())
    assert [t.subdir for t in wheel_targets("3.11", "all")][-1] == "linux-riscv64"
    options = WheelTarget("3.11", "linux-riscv64").pip_options()
    assert options[:2] == ("--platform", "manylinux_2_35_riscv64")


def test_a_new_platform_says_what_its_emulation_needs(
    riscv: SupportedPlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither qemu nor the cross compiler
    found = emulator_for("linux-riscv64")
    assert isinstance(found, str)
    assert "qemu-riscv64 (Debian: apt-get install qemu-user)" in found
    assert "riscv64-linux-gnu-g++ (Debian: apt-get install g++-riscv64-linux-gnu" in found
    assert emulator_for("osx-arm64") == "osx-arm64 programs cannot be emulated here"


def test_the_distro_refusal_lists_the_table(riscv: SupportedPlatform) -> None:
    message = str(unsupported_platform(DebBuilder().limits, "macosx_14_0_arm64", "w.whl"))
    assert message.startswith(
        "--target deb packages linux-64, linux-aarch64, linux-riscv64 wheels only"
    )


def test_platform_choices_and_refusals_of_the_cli(
    riscv: SupportedPlatform,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """`--platform bogus` is refused naming the new platform; `--platform linux-riscv64` is
    accepted and fetched by its wheel tag; deb refusals list it."""
    code, output = run_cli(monkeypatch, capsys, "plan", "--platform", "bogus")
    assert code != 0 and "Traceback" not in output
    assert "use linux-64, linux-aarch64, osx-arm64, linux-riscv64 or all" in output

    asked: list[tuple[str, ...]] = []

    def download(requirement: str, directory: Path, options: tuple[str, ...] = ()) -> list[Path]:
        asked.append(options)
        return []

    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(fetch, "download_wheels", download)
    args: tuple[str, ...] = ("plan", "--platform", "linux-riscv64", "--python", "3.11")
    code, output = run_cli(monkeypatch, capsys, *args, "executorch==1.5.1")
    assert code != 0 and asked and asked[0][:2] == ("--platform", "manylinux_2_35_riscv64"), output
    assert "pip downloaded no wheel" in output and "cannot split yet" not in output

    args = ("build", "-t", "deb", "--platform", "osx-arm64", "--python", "3.12")
    code, output = run_cli(monkeypatch, capsys, *args)
    assert code == 12 and "riscv64" in output, output
    args = ("build", "-t", "rpm", "--platform", "all", "--python", "3.12")
    code, output = run_cli(monkeypatch, capsys, *args)
    assert code == 12 and "--platform linux-64,linux-aarch64,linux-riscv64" in output, output
    assert asked == [asked[0]]  # refused before anything was fetched


def test_platform_help_lists_the_table() -> None:
    """--platform's help is written when the CLI is imported: a record in the table then
    is listed."""
    code = (
        "import splitter.platforms as p\n"
        "from splitter.platforms import SupportedPlatform\n"
        f"p.SUPPORTED = (*p.SUPPORTED, {RISCV!r})\n"
        "from splitter.__main__ import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "plan", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # as the help is wrapped
    assert "platforms: linux-64,linux-aarch64,osx-arm64,linux-riscv64 or all" in text
    assert "two Linux" not in text


# Facts distinctive enough to find in code: a string literal outside splitter/platforms.py that
# contains one is a second home for it (docstrings and comments are prose, not looked at).
DISTINCT = ("subdir", "wheel_tag", "elf_name", "triplet", "qemu", "cross_cxx", "cross_package")
# What is left, each for its own reason
ALLOWED = {
    # --cross-cxx's help gives an example
    ("cli/app.py", "aarch64-linux-gnu-g++"),
    ("cli/app.py", "aarch64-linux-gnu"),
}


def test_each_platform_fact_has_one_home() -> None:
    root = Path(splitter.__file__).parent
    facts = {getattr(p, f) for p in platforms.SUPPORTED for f in DISTINCT} - {""}
    machines = {p.machine for p in platforms.SUPPORTED}  # words prose uses: arm64, aarch64
    facts |= {n for p in platforms.SUPPORTED for n in (p.deb, p.conan_arch)} - machines - {""}
    found = set()
    for path in sorted(root.rglob("*.py")):
        if path.name == "platforms.py":
            continue
        tree = ast.parse(path.read_text())
        prose = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        name = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
            ):
                found |= {(name, fact) for fact in facts if fact in node.value}
    assert found - ALLOWED == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux machine's subdir")
def test_this_machine_is_looked_up_in_the_table() -> None:
    expected = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}.get(os.uname().machine, "")
    assert machine_subdir() == expected


def test_a_platform_without_conan_settings_is_refused_by_conan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], real_plan: Plan
) -> None:
    """A record with no Conan settings: `build -t conan` for it is refused from the request
    (before anything is fetched), and a plan of it from the builder, naming what conan
    packages; the conda target takes it."""
    bare = dataclasses.replace(RISCV, conan_os="", conan_arch="")
    monkeypatch.setattr(platforms, "SUPPORTED", (*platforms.SUPPORTED, bare))
    args = ("build", "-t", "conan", "--platform", "linux-riscv64", "--python", "3.11")
    code, output = run_cli(monkeypatch, capsys, *args)
    assert code == 12, output
    assert (
        "--target conan packages linux-64, linux-aarch64, osx-arm64 wheels only (the wheel's "
        "platform is manylinux_2_35_riscv64): the recipe's pin for CPython 3.11 on "
        "linux-riscv64\nleave this platform out (--platform) or use --target wheel for it"
    ) in output
    limits = ConanBuilder().limits
    riscv_plan = dataclasses.replace(
        real_plan,
        platform=dataclasses.replace(
            real_plan.platform, conda_subdir="linux-riscv64", tag="manylinux_2_35_riscv64"
        ),
    )
    with pytest.raises(UsageError, match=r"--target conan packages .* wheels only .*riscv64"):
        check_planned([riscv_plan], limits)
    assert check_planned([real_plan], limits) == [real_plan]
