"""verify's row names have one home (splitter.verify.rows.Row): no other module of verify/
spells one as a string literal, so renaming a row is one edit."""

from __future__ import annotations

import ast
from pathlib import Path

import splitter.verify
from splitter.verify.rows import EXPECTED, FOREIGN, Row

VERIFY = Path(splitter.verify.__file__).parent


def test_no_module_but_rows_spells_a_row_name() -> None:
    names = {row.value for row in Row}
    found = [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for path in sorted(VERIFY.glob("*.py"))
        if path.name != "rows.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []


def test_every_row_a_foreign_output_reports_has_its_expectation() -> None:
    assert {row for rows in FOREIGN.values() for row in rows} <= set(EXPECTED)
