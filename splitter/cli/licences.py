"""`splitter licences`: the licence review of a wheel (scan, worksheet, draft); parse, call
splitter.plan.review, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from splitter.cli.console import out, progress_bar, reporter
from splitter.plan.resolve import Request, request_wheels
from splitter.plan.review import scan_wheels, write_drafts, write_scan
from splitter.plan.review import worksheet as worksheet_of

licences = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Review the licences of a wheel's files: scan them, list what the recipe does not "
    "settle, write draft entries.",
)

WheelArg = Annotated[
    list[str] | None,
    typer.Argument(help="Wheel paths or a requirement; default: the recipe's pin."),
]
RecipeOpt = Annotated[
    Path | None, typer.Option("--recipe", help="Recipe TOML (default: the shipped one).")
]
PythonOpt = Annotated[str | None, typer.Option("--python", help="CPythons: 3.10,3.12 or all.")]
PlatformOpt = Annotated[str | None, typer.Option("--platform", help="Platforms, or all.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


@licences.command("scan")
def scan(
    wheel: WheelArg = None,
    recipe: RecipeOpt = None,
    python: PythonOpt = None,
    platform: PlatformOpt = None,
    write: Annotated[
        bool, typer.Option("--write", help="Write the findings into the recipe's scan.")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Scan every file but the binaries with ScanCode (about half a second of CPU a file;
    what the recipe's scan and ScanCode's cache hold is not scanned again); print how many
    files each licence was found in; --write records the findings in the recipe's scan."""
    request = Request(wheels=tuple(wheel or ()), recipe=recipe, python=python, platform=platform)
    loaded, paths = request_wheels(request)
    with progress_bar(not quiet) as bar:
        found = scan_wheels(paths, loaded, reporter(bar, "scanning with ScanCode"))
    counts: dict[str, int] = {}
    for evidence in found.values():
        for licence in evidence.licenses or ("(none found)",):
            counts[licence] = counts.get(licence, 0) + 1
    scanners = ", ".join(sorted({e.scanner for e in found.values()}))
    out.print(f"{len(found)} files, {scanners}", highlight=False)
    for licence, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        out.print(f"  {count:6d}  {licence}", highlight=False)
    if write:
        target = write_scan(loaded, found)
        out.print(f"written: {target}", highlight=False)


@licences.command("worksheet")
def worksheet(
    wheel: WheelArg = None,
    recipe: RecipeOpt = None,
    python: PythonOpt = None,
    platform: PlatformOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    draft: Annotated[
        bool,
        typer.Option("--draft", help="Append a DRAFT [[license_conclusion]] per question."),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """The files whose scanned licences the recipe does not settle, by folder: what was found,
    what they would be concluded as, and the expression that would cover them."""
    request = Request(wheels=tuple(wheel or ()), recipe=recipe, python=python, platform=platform)
    loaded, paths = request_wheels(request)
    with progress_bar(not (quiet or as_json)) as bar:
        asked = worksheet_of(paths, loaded, reporter(bar, "planning for review"))
    if as_json:
        rows = [
            {
                "folder": q.folder,
                "files": [
                    {"path": f.path, "package": f.package, "copyrights": list(f.copyrights)}
                    for f in q.files
                ],
                "detected": list(q.detected),
                "concluded": q.concluded,
                "suggested": q.suggested,
            }
            for q in asked
        ]
        sys.stdout.write(json.dumps({"questions": rows}, indent=2) + "\n")
    else:
        for q in asked:
            out.print(f"{q.folder}/  ({len(q.files)} files)", highlight=False)
            for each in q.files:
                out.print(f"  {each.path}  [{'; '.join(each.copyrights)}]", highlight=False)
            out.print(f"  detected:  {' ; '.join(q.detected)}", highlight=False)
            out.print(f"  concluded: {q.concluded}", highlight=False)
            out.print(f"  covers it: {q.suggested}", highlight=False)
        out.print(f"{len(asked)} questions", highlight=False)
    if draft and asked:
        count = write_drafts(loaded.path, asked)
        out.print(f"{count} draft entries appended to {loaded.path}", highlight=False)
