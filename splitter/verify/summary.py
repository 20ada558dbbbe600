"""What a verify run adds up to, said so that it cannot be misread: passed, skipped and failed
counted apart, each distinct skip reason once with the rows it covers, `--strict` (a skip is a
failure, for CI), and the rows a table shows (the co-load matrix grouped; `--json` keeps every
row)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from splitter.verify.rows import Check, Row, Status

STRICT = "skipped, and --strict counts a skip as a failure"


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """The counts of a verify run, and why rows were skipped (reason, rows), most rows first."""

    passed: int
    skipped: int
    failed: int
    reasons: tuple[tuple[str, int], ...]

    @property
    def ok(self) -> bool:
        """Whether no row failed."""
        return self.failed == 0

    def lines(self) -> list[str]:
        """`N passed, M skipped, K failed`, then each skip reason with its row count."""
        head = f"{self.passed} passed, {self.skipped} skipped, {self.failed} failed"
        return [head] + [
            f"  skipped ({rows} row{'s' if rows != 1 else ''}): {reason}"
            for reason, rows in self.reasons
        ]

    def as_json(self) -> dict[str, object]:
        """The counts and reasons as `--json` prints them."""
        return {
            "passed": self.passed,
            "skipped": self.skipped,
            "failed": self.failed,
            "skip_reasons": [{"reason": r, "rows": n} for r, n in self.reasons],
        }


def summarize(checks: list[Check]) -> Summary:
    """The counts of `checks`."""
    counts = Counter(c.status for c in checks)
    reasons = Counter(c.detail or "no reason given" for c in checks if c.status is Status.SKIP)
    return Summary(
        passed=counts[Status.PASS],
        skipped=counts[Status.SKIP],
        failed=counts[Status.FAIL],
        reasons=tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
    )


def strict(checks: list[Check]) -> list[Check]:
    """`checks` with every skipped row failed, its reason kept (`verify --strict`)."""
    return [
        replace(c, status=Status.FAIL, outcome=STRICT) if c.status is Status.SKIP else c
        for c in checks
    ]


def table_rows(checks: list[Check]) -> list[Check]:
    """The rows a table shows: the co-load pairs that passed or were skipped grouped by what
    was expected, what happened and why (subject `N pairs`), each failed pair on its own row;
    every other check as it is."""
    rows: list[Check] = []
    groups: dict[tuple[str, str, Status, str], list[Check]] = {}
    for check in checks:
        if check.check != Row.CO_LOAD or check.status is Status.FAIL:
            rows.append(check)
            continue
        key = (check.expected, check.outcome, check.status, check.detail)
        if key not in groups:
            groups[key] = []
            rows.append(check)  # the group's place: its first pair's
        groups[key].append(check)
    shown = []
    for row in rows:
        members = groups.get((row.expected, row.outcome, row.status, row.detail))
        if row.check == Row.CO_LOAD and row.status is not Status.FAIL and members:
            subject = members[0].subject if len(members) == 1 else f"{len(members)} pairs"
            row = replace(row, subject=subject)
        shown.append(row)
    return shown
