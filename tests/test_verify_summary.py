"""verify's summary on a real output: passed and skipped counted apart, each skip reason once
with its rows, `--strict`, C++ rows present (skipped) without CMake, the co-load matrix grouped
in a table that fits 100 columns while `--json` keeps every row."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from consumer_tools import cmake_executable
from rich.console import Console

from splitter.cli.console import verify_table
from splitter.verify.run import NO_CMAKE, Status, verify
from splitter.verify.summary import summarize

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def channel(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("summary") / "out"
    command = [sys.executable, "-m", "splitter", "-q", "build", str(real_wheel), "-t", "conda"]
    result = subprocess.run(
        [*command, "--compression-level", "1", "-o", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return out


def run_verify(channel: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "splitter", "verify", str(channel), "--python", sys.executable]
    return subprocess.run([*command, *extra], capture_output=True, text=True)


def test_without_cmake_the_cpp_checks_are_skipped_rows(channel: Path) -> None:
    checks = verify(channel, [], [], 2, ("cmake", "relocation"))
    rows = {c.check: c for c in checks}
    assert set(rows) == {"model (C++)", "missing component", "relocation"}
    assert all(c.status is Status.SKIP for c in checks)
    assert rows["model (C++)"].detail == NO_CMAKE
    assert "found none" in rows["relocation"].detail
    summary = summarize(checks)
    assert (summary.passed, summary.skipped, summary.failed) == (0, 3, 0)
    assert dict(summary.reasons) == {NO_CMAKE: 2, rows["relocation"].detail: 1}


def test_counts_and_reasons_match_the_rows(channel: Path) -> None:
    """The JSON's counts are the rows' statuses counted; the text says the same numbers and
    each skip reason once, with its rows."""
    result = run_verify(channel, "--only", "co-load", "--only", "python", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    statuses = Counter(c["status"] for c in report["checks"])
    summary = report["summary"]
    assert (summary["passed"], summary["skipped"], summary["failed"]) == (
        statuses["pass"],
        statuses["skip"],
        statuses["fail"],
    )
    assert sum(c["check"] == "co-load" for c in report["checks"]) >= 2 * 55  # every pair a row
    assert summary["passed"] > 0 and summary["skipped"] > 0 and summary["failed"] == 0
    reasons = Counter(c["detail"] for c in report["checks"] if c["status"] == "skip")
    assert {r["reason"]: r["rows"] for r in summary["skip_reasons"]} == dict(reasons)

    text = run_verify(channel, "--only", "co-load", "--only", "python")
    assert text.returncode == 0, text.stderr
    head = f"{summary['passed']} passed, {summary['skipped']} skipped, 0 failed"
    assert head in text.stdout
    assert "passed or skipped" not in text.stdout
    for reason, rows in reasons.items():
        assert text.stdout.count(f"({rows} row{'s' if rows != 1 else ''}): {reason}") == 1


def test_strict_fails_every_skip(channel: Path) -> None:
    """Relocation needs CMake >= 3.28: with 3.24 it is skipped, and `--strict` fails it."""
    old = str(cmake_executable("3.24"))
    lenient = run_verify(channel, "--only", "relocation", "--cmake", old, "--json")
    strict = run_verify(channel, "--only", "relocation", "--cmake", old, "--json", "--strict")
    assert lenient.returncode == 0, lenient.stderr
    assert strict.returncode == 1, strict.stderr
    before, after = json.loads(lenient.stdout), json.loads(strict.stdout)
    assert before["summary"]["skipped"] == after["summary"]["failed"] == 1
    assert after["strict"] and not after["ok"]
    assert after["checks"][0]["detail"] == before["checks"][0]["detail"]  # the reason stays


def test_table_groups_the_matrix_and_fits_100_columns(channel: Path) -> None:
    checks = verify(channel, [], [], 2, ("co-load",))
    assert len(checks) >= 2 * 55
    console = Console(width=100, record=True, color_system=None)
    console.print(verify_table(checks))
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert len(lines) < len(checks)  # grouped, not a row a pair
    groups = Counter((c.expected, c.outcome, c.status, c.detail) for c in checks)
    for count in groups.values():
        if count > 1:
            assert f"{count} pairs" in text
