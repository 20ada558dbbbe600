"""Usage errors and missing tools: typed, with their own exit codes, and a combination of
options no command can serve refused from the arguments alone, before any wheel is fetched or
read (the wheels named here do not exist, and the download cache stays empty)."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import splitter.errors as errors
from splitter.errors import ExternalToolError, MissingToolError, OwnershipError, UsageError
from splitter.model import Target
from splitter.plan.request import check_build_request, check_plan_request, requested_wheels
from splitter.targets.registry import BuildOptions, target_limits
from splitter.tools import need_tool
from splitter.verify.consumer import cmake_version

X86 = "executorch-1.5.1-{cp}-{cp}-manylinux_2_28_x86_64.whl"
ARM = "executorch-1.5.1-{cp}-{cp}-manylinux_2_28_aarch64.whl"
MAC = "executorch-1.5.1-cp311-cp311-macosx_14_0_arm64.whl"


def test_every_error_has_its_own_exit_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    codes = sorted(c.exit_code for c in classes)
    assert codes == list(range(1, 16)), codes
    assert (UsageError.exit_code, MissingToolError.exit_code) == (12, 13)
    assert errors.LicenceError.exit_code == 15
    assert issubclass(UsageError, errors.SplitterError)
    assert issubclass(MissingToolError, errors.SplitterError)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ExternalToolError("pip failed", ["pip", "x"], 2, "boom"), id="tool-failed"),
        pytest.param(MissingToolError("rpmbuild", "why", "apt-get install rpm"), id="missing"),
        pytest.param(OwnershipError(["a"], ["b"]), id="ownership"),
    ],
)
def test_errors_survive_a_worker_process(error: errors.SplitterError) -> None:
    """A worker answers with a pickled exception: one with its own constructor comes back
    whole, notes included, rather than as a TypeError."""
    error.add_note("in worker 1")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert back.__notes__ == ["in worker 1"]


def test_missing_tool_names_the_tool_and_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError) as info:
        need_tool("rpmbuild", "rpm")
    assert str(info.value) == (
        "rpmbuild is not installed (needed to build these packages): rpmbuild\n"
        "install it: apt-get install rpm"
    )
    assert info.value.exit_code == 13


def test_a_cmake_that_does_not_run_is_a_typed_error(tmp_path: Path) -> None:
    """`verify --cmake` with a path that is not there, fails, or prints no version."""
    with pytest.raises(MissingToolError, match=r"cmake is not installed .*: .*/no-cmake\n"):
        cmake_version(tmp_path / "no-cmake")
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    failing.chmod(0o755)
    with pytest.raises(ExternalToolError, match=r"does not print a CMake version .*exit 3"):
        cmake_version(failing)
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    with pytest.raises(ExternalToolError, match=r"does not print a CMake version"):
        cmake_version(silent)


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`splitter ARGS` with an empty download cache of its own, in an empty directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "SPLITTER_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "splitter", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=120,
    )


REFUSED = [
    pytest.param(
        ("build", "--target", "deb", "--python", "3.10,3.11"),
        r"--target deb builds for one Python per platform .*not 2 \(3\.10, 3\.11\) for "
        r"linux-64\ngive one --python",
        id="deb-two-pythons",
    ),
    pytest.param(
        ("build", "--target", "rpm", X86.format(cp="cp311"), X86.format(cp="cp310")),
        r"--target rpm builds for one Python per platform .*\(3\.10, 3\.11\) for linux-64",
        id="rpm-two-wheel-paths",
    ),
    pytest.param(
        ("build", "--target", "deb", "--platform", "osx-arm64", "--python", "3.12"),
        r"--target deb packages linux-64, linux-aarch64 wheels only .*macosx_14_0_arm64\): "
        r".* for CPython 3\.12 on osx-arm64\ngive a manylinux wheel",
        id="deb-for-macos",
    ),
    pytest.param(
        ("build", "--target", "deb", "--platform", "all", "--python", "3.12"),
        r"--target deb packages linux-64, linux-aarch64 wheels only, and --platform all names "
        r"linux-64, linux-aarch64, osx-arm64: osx-arm64 has no deb\nname the platforms it "
        r"packages: --platform linux-64,linux-aarch64",
        id="deb-for-all-platforms",
    ),
    pytest.param(
        ("build", "--target", "rpm", MAC),
        rf"--target rpm packages linux-64, linux-aarch64 wheels only .*: {MAC}\n",
        id="rpm-of-a-macos-wheel",
    ),
    pytest.param(
        ("build", "--backend", "rattler-build", "--platform", "all"),
        r"a release is packaged with --backend assemble, not rattler-build",
        id="release-by-recipe-backend",
    ),
    pytest.param(
        ("plan", "--graph", "--python", "3.10,3.11"),
        r"--graph shows one wheel, not a release .*2 wheels\): 3\.10 linux-64, 3\.11 linux-64",
        id="graph-of-pythons",
    ),
    pytest.param(
        ("plan", "--graph-format", "mermaid", X86.format(cp="cp311"), ARM.format(cp="cp311")),
        r"--graph shows one wheel, not a release .*: executorch-1\.5\.1-cp311",
        id="graph-of-two-wheels",
    ),
    pytest.param(
        ("plan", "--why", "executorch/__init__.py", "--platform", "all"),
        r"--why shows one wheel, not a release",
        id="why-of-platforms",
    ),
    pytest.param(("doctor",), r"doctor needs exactly one of", id="doctor-without-subject"),
    pytest.param(
        ("verify", ".", "--python", "/no/such/python"),
        r"--python /no/such/python does not run as a Python interpreter",
        id="verify-python-missing",
    ),
]


def test_an_unknown_check_is_a_usage_error_naming_the_choices(tmp_path: Path) -> None:
    """--only takes the checks' StrEnum: click refuses another value, listing the choices
    (its own usage error, exit 2), before anything is read."""
    result = run(tmp_path, "verify", ".", "--only", "nope")
    assert result.returncode == 2, result.stderr
    assert "'nope' is not one of 'co-load', 'cmake', 'relocation', 'python', 'depends'" in (
        result.stderr
    )
    assert sorted((tmp_path / "cwd").iterdir()) == []


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_refused_before_anything_is_fetched(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = run(tmp_path, *args)
    assert result.returncode == UsageError.exit_code, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert len(result.stderr.splitlines()) <= 2, result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert "wheel not found" not in result.stderr
    assert not (tmp_path / "cache").exists()  # nothing was downloaded, not even looked up
    assert sorted((tmp_path / "cwd").iterdir()) == []  # and nothing written


@pytest.mark.parametrize(
    ("specs", "pythons", "platforms", "target"),
    [
        pytest.param([], "3.11", "linux-64,linux-aarch64", "deb", id="one-python-two-platforms"),
        pytest.param(
            [X86.format(cp="cp311"), ARM.format(cp="cp311")],
            None,
            None,
            "rpm",
            id="two-platforms-by-path",
        ),
        pytest.param(["executorch==1.5.1"], "3.12", None, "deb", id="one-requirement"),
        pytest.param(
            [X86.format(cp="cp311")] * 2,
            None,
            None,
            "deb",
            id="same-wheel-twice-is-the-release-check's",
        ),
        pytest.param(
            ["not-a-wheel-name.whl", "x.whl"],
            None,
            None,
            "deb",
            id="unreadable-names-are-the-wheel-reader's",
        ),
        pytest.param([], "3.10,3.11", "linux-64", "conda", id="conda-release"),
        pytest.param([], "3.10,3.11", None, "wheel", id="wheel-release"),
    ],
)
def test_what_the_arguments_allow_passes(
    specs: list[str], pythons: str | None, platforms: str | None, target: str
) -> None:
    check_build_request(
        specs, pythons, platforms, target_limits(BuildOptions(target=Target(target)))
    )


def test_requested_wheels_count_as_the_fetch_does() -> None:
    """One per path, one per requirement and --python/--platform target; a single wheel,
    even named through --python, is not a release."""
    assert len(requested_wheels([], None, None)) == 1
    assert len(requested_wheels(["executorch==1.5.1"], "3.12", None)) == 1
    every = requested_wheels([], "all", "all")  # cp310-cp314 on each platform, macOS too
    assert len(every) == 15
    assert sorted({w.subdir for w in every}) == ["linux-64", "linux-aarch64", "osx-arm64"]
    both = requested_wheels([X86.format(cp="cp312"), "executorch==1.5.1"], "3.10,3.11", "linux-64")
    assert [(w.python, w.subdir) for w in both] == [
        ("3.12", "linux-64"),
        ("3.10", "linux-64"),
        ("3.11", "linux-64"),
    ]
    check_plan_request(["executorch==1.5.1"], "3.12", "linux-64", True, "executorch/x.py")
