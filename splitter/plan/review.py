"""The licence review of a new wheel: scan its files into the recipe's scan, list what the
recipe does not settle yet (the worksheet), and write draft entries for it into the recipe.

Drafts are written with tomlkit, so the recipe keeps its comments and layout, and each draft's
reason starts with DRAFT: the recipe loader refuses such an entry until a reviewer has read
the files and written the reason (a draft must not settle a licence by itself)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import tomlkit

from splitter.binaries.detect import is_binary
from splitter.errors import OutputError
from splitter.input.scan import gather_scancode, read_scan, render_scan
from splitter.input.wheel import read_wheel
from splitter.licensing import Evidence, FileLicence
from splitter.model import Plan, Progress, Recipe
from splitter.plan.conclude import join_all
from splitter.plan.layout import regenerated
from splitter.plan.make import make_plan
from splitter.plan.recipethird import DRAFT, terms


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """Files of one folder whose findings name licences their conclusion does not cover."""

    folder: str
    files: tuple[FileLicence, ...]
    detected: tuple[str, ...]  # every licence the scanner found in them, sorted
    concluded: str  # what they are concluded as without a review
    suggested: str  # the expression that would cover the findings

    @property
    def paths(self) -> tuple[str, ...]:
        """The files a draft entry names, each by its path: a folder's glob could conclude
        its other files too."""
        return tuple(f.path for f in self.files)


def scan_wheels(
    wheels: Sequence[Path], recipe: Recipe, progress: Progress | None = None
) -> dict[str, Evidence]:
    """ScanCode's findings for every file of `wheels` that no output writes anew and that is
    not a binary (the recipe's scan and ScanCode's cache are not scanned again)."""
    found: dict[str, Evidence] = {}
    for wheel_path in wheels:
        loadable: list[str] = []

        def wants(path: str, head: bytes, loadable: list[str] = loadable) -> bool:
            if is_binary(head):
                loadable.append(path)
            return False

        wheel = read_wheel(wheel_path, None, wants)
        again = [e.path for e in wheel.entries if regenerated(e.path, wheel.dist_info)]
        label = f"scanning {wheel_path.name} with ScanCode"
        report = None if progress is None else partial(progress, label)
        found.update(gather_scancode(wheel, [*loadable, *again], recipe.scan_file, report))
    return found


def write_scan(recipe: Recipe, found: dict[str, Evidence]) -> Path:
    """Write the findings into the recipe's scan beside it (`<stem>.scan.json`), keeping the
    findings it holds for files of other wheels."""
    target = recipe.path.with_suffix(".scan.json")
    merged = dict(read_scan(target)) if target.is_file() else {}
    merged.update(found)
    try:
        target.write_bytes(render_scan(merged))
    except OSError as exc:
        raise OutputError(
            f"cannot write the licence scan ({exc.strerror or exc}): {target}"
        ) from exc
    return target


def questions(plan: Plan) -> tuple[Question, ...]:
    """The worksheet of a plan made with review=True: its unsettled files, by folder and
    findings."""
    groups: dict[tuple[str, tuple[str, ...], str], list[FileLicence]] = {}
    for each in plan.licences:
        if each.covered:
            continue
        key = (posixpath.dirname(each.path), tuple(sorted(each.detected)), each.concluded)
        groups.setdefault(key, []).append(each)
    found = []
    for (folder, detected, concluded), files in sorted(groups.items()):
        found.append(
            Question(
                folder=folder,
                files=tuple(files),
                detected=detected,
                concluded=concluded,
                suggested=join_all([concluded, *detected]),
            )
        )
    return tuple(found)


def write_drafts(recipe_path: Path, asked: Iterable[Question]) -> int:
    """Append a draft [[license_conclusion]] per question to the recipe, its comments and
    layout kept; how many were written."""
    document = tomlkit.parse(recipe_path.read_text(encoding="utf-8"))
    tables = document.get("license_conclusion")
    if tables is None:
        tables = tomlkit.aot()
        document.append("license_conclusion", tables)
    count = 0
    for question in asked:
        table = tomlkit.table()
        table.add("paths", list(question.paths))
        table.add("license", question.suggested)
        found = ", ".join(sorted({t for d in question.detected for t in terms(d)}))
        holders = sorted({c for f in question.files for c in f.copyrights})[:3]
        table.add(
            "reason",
            f"{DRAFT} the scanner found {found} in {len(question.files)} file(s)"
            + (f" ({'; '.join(holders)})" if holders else "")
            + f"; concluded {question.concluded} without review. Read the files, then say "
            "why they are under this licence (or exclude them).",
        )
        tables.append(table)
        count += 1
    try:
        recipe_path.write_text(tomlkit.dumps(document), encoding="utf-8")
    except OSError as exc:
        raise OutputError(
            f"cannot write the recipe ({exc.strerror or exc}): {recipe_path}"
        ) from exc
    return count


def worksheet(
    wheels: Sequence[Path], recipe: Recipe, progress: Progress | None = None
) -> tuple[Question, ...]:
    """The questions of every wheel's plan, made with review=True, each once."""
    asked: list[Question] = []
    for wheel in wheels:
        for question in questions(make_plan(wheel, recipe, progress, review=True)):
            if all(question.paths != q.paths for q in asked):
                asked.append(question)
    return tuple(asked)
