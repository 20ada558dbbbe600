"""Usage errors and missing tools: typed, with their own exit codes (12, 13), one line each at
the CLI, and never a traceback."""

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
from splitter.tools import need_tool
from splitter.verify.consumer import cmake_version


def test_every_error_has_its_own_exit_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    codes = sorted(c.exit_code for c in classes)
    assert codes == list(range(1, 15)), codes
    assert (UsageError.exit_code, MissingToolError.exit_code) == (12, 13)
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
    pytest.param(("doctor",), r"doctor needs exactly one of", id="doctor-without-subject"),
    pytest.param(
        ("verify", ".", "--python", "/no/such/python"),
        r"--python /no/such/python does not run as a Python interpreter",
        id="verify-python-missing",
    ),
    pytest.param(
        ("verify", ".", "--only", "nope"), r"unknown check 'nope'", id="verify-unknown-check"
    ),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_refused_before_anything_is_done(
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
