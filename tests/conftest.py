"""Shared fixtures: the real ExecuTorch wheels, downloaded once into a cache."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from consumer_tools import cache_lock  # noqa: E402  (needs the tests directory on sys.path)

REAL_VERSION = "1.5.1"


def _cache() -> Path:
    root = Path(os.environ.get("SPLITTER_CACHE") or Path.home() / ".cache" / "splitter")
    directory = root / "wheels"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _download(requirement: str, platform: str | None, python: str = "3.11") -> Path:
    directory = _cache()
    version = requirement.split("==")[1]
    tag = platform or "manylinux_2_28_x86_64"
    cp = "cp" + python.replace(".", "")
    found = directory / f"executorch-{version}-{cp}-{cp}-{tag}.whl"
    with cache_lock(
        f"wheel-{version}-{cp}-{tag}" if python != "3.11" else f"wheel-{version}-{tag}"
    ):
        if not found.exists():
            _pip_download(requirement, platform, directory, python)
    assert found.exists(), f"pip did not produce {found}"
    return found


def _pip_download(
    requirement: str, platform: str | None, directory: Path, python: str = "3.11"
) -> None:
    """splitter's own atomic download, for a platform too (splitter's cache lookup must never
    see half a wheel)."""
    from splitter.input.fetch import download_wheels

    options = ("--platform", platform, "--python-version", python) if platform else ()
    download_wheels(requirement, directory, options)


@pytest.fixture(scope="session")
def real_wheel() -> Path:
    """The real executorch 1.5.1 cp311 manylinux x86_64 wheel."""
    override = os.environ.get("SPLITTER_TEST_WHEEL")
    return Path(override) if override else _download(f"executorch=={REAL_VERSION}", None)


@pytest.fixture(scope="session")
def real_wheel_aarch64() -> Path:
    """The real executorch 1.5.1 cp311 manylinux aarch64 wheel."""
    return _download(f"executorch=={REAL_VERSION}", "manylinux_2_28_aarch64")


@pytest.fixture(scope="session")
def real_wheel_macos() -> Path:
    """The real executorch 1.5.1 cp311 macOS arm64 wheel (Mach-O)."""
    return _download(f"executorch=={REAL_VERSION}", "macosx_14_0_arm64")


@pytest.fixture(scope="session")
def real_wheel_macos_cp310() -> Path:
    """The cp310 macOS arm64 wheel of the same release, for the release identity check."""
    return _download(f"executorch=={REAL_VERSION}", "macosx_14_0_arm64", python="3.10")


@pytest.fixture(scope="session")
def real_wheel_macos_cp312() -> Path:
    """The cp312 macOS arm64 wheel: a third Python for the release identity check."""
    return _download(f"executorch=={REAL_VERSION}", "macosx_14_0_arm64", python="3.12")


@pytest.fixture(scope="session")
def old_wheel() -> Path:
    """executorch 1.4.1, which has no C++ runtime under executorch/lib."""
    return _download("executorch==1.4.1", None)


@pytest.fixture(scope="session")
def unpacked_wheel(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real wheel unpacked once; returns the directory holding `executorch/`."""
    root = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(real_wheel) as archive:
        archive.extractall(root)
    for path in (root / "executorch" / "lib").glob("*.so"):
        path.chmod(0o755)
    return root


@pytest.fixture(scope="session")
def real_plan(real_wheel: Path):  # type: ignore[no-untyped-def]
    """The plan of the real wheel with the shipped recipe."""
    from splitter.plan.make import make_plan
    from splitter.plan.recipe import load_recipe

    return make_plan(real_wheel, load_recipe())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files")


# Under CI=true (.ci/run sets it) a skipped test fails: CI installs every tool the tests use,
# so a skip there means a missing install step, not a machine without the tool. The one
# exception, with why it cannot run on the CI machine:
CI_ALLOWED_SKIPS = {
    "tests/test_conda.py::test_conda_build_backend": (
        "conda-build installs only from a conda channel, and none is reachable here"
    ),
    # Its twin runs instead: with conda-build installed, this one skips.
    "tests/test_conda.py::test_conda_build_backend_missing": "the case cannot occur",
    # It needs a CPython other than 3.11, found on PATH, beside this interpreter's installation
    # (pyenv's versions) or through pyenv; a machine with only Debian's python3 (bookworm ships
    # 3.11 alone) and no version manager has none, and nothing reachable here installs one.
    "tests/test_release.py::test_verify_runs_each_python_given": (
        "a machine with one CPython cannot run it"
    ),
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (
        os.environ.get("CI") == "true"
        and report.skipped
        and not hasattr(report, "wasxfail")
        and item.nodeid not in CI_ALLOWED_SKIPS
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, and not on CI_ALLOWED_SKIPS (tests/conftest.py): {reason}"
        )
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Under CI=true, say which skips the allow-list let through, so none is silent."""
    if os.environ.get("CI") != "true":
        return
    skipped = [r.nodeid for r in terminalreporter.stats.get("skipped", [])]
    terminalreporter.write_line(
        f"CI=true: {len(skipped)} skipped, each on CI_ALLOWED_SKIPS: {', '.join(skipped) or '-'}"
    )
