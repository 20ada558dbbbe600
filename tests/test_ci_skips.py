"""CI cannot skip silently: under CI=true a skipped test fails unless tests/conftest.py's
CI_ALLOWED_SKIPS names it, and the run says which skips the allow-list let through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def run_pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\n\ndef test_needs_a_tool():\n    pytest.skip('the tool is missing')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(TESTS)}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_skipping.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_a_skip_fails_under_ci(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, ci=True)
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout
    assert "skipped under CI=true, and not on CI_ALLOWED_SKIPS" in result.stdout
    assert "the tool is missing" in result.stdout
    assert "CI=true: 0 skipped, each on CI_ALLOWED_SKIPS" in result.stdout


def test_a_skip_is_a_skip_elsewhere(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
