"""How `splitter diff` shows a comparison: the readable report and the `--json` form."""

from __future__ import annotations

import shutil
from collections.abc import Iterable

from splitter.plan.diff import SplitDiff, Verdict
from splitter.plan.diffabi import AbiReport
from splitter.tools import run_status

PINS = (
    "programs and packages built against the old version need a rebuild: pin exactly "
    "(conda run_exports max_pin='x.x.x', a deb shlibs/symbols bump, an rpm Requires on the "
    "exact version)"
)


def demangled(names: Iterable[str]) -> dict[str, str]:
    """Each C++ name demangled by binutils' c++filt (a Mach-O name without its leading
    underscore), itself where c++filt is not installed or leaves it as it is."""
    ordered = sorted(set(names))
    tool = shutil.which("c++filt")
    if not ordered or tool is None:
        return {name: name for name in ordered}
    plain = [n[1:] if n.startswith("__Z") else n for n in ordered]
    result = run_status([tool], stdin="\n".join(plain) + "\n")
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(ordered):
        return {name: name for name in ordered}
    return dict(zip(ordered, lines, strict=True))


def diff_json(found: SplitDiff, abi: list[AbiReport] | None = None) -> dict[str, object]:
    """The diff as `--json` prints it: `from`, `to`, `changed`, and `packages` mapping each
    package name to its verdict, reasons, added, removed, changed and moved entries, metadata
    lines and binaries (symbols demangled, with the mangled name); with `abi`, abidiff's
    reports under `abi`."""
    names = demangled(
        s for p in found.packages for b in p.binaries for s in b.symbols_added + b.symbols_removed
    )

    def symbols(listed: tuple[str, ...]) -> list[dict[str, str]]:
        return [{"name": names[s], "mangled": s} for s in listed]

    def pair(value: tuple[object, object] | None) -> dict[str, object] | None:
        return None if value is None else {"from": value[0], "to": value[1]}

    shown: dict[str, object] = {
        "from": found.old,
        "to": found.new,
        "changed": found.changed,
        "packages": {
            p.name: {
                "verdict": str(p.verdict),
                "reasons": list(p.reasons),
                "pins": PINS if p.verdict is Verdict.INCOMPATIBLE else "",
                "added": list(p.added),
                "removed": list(p.removed),
                "changed": list(p.changed),
                "moved": [
                    {"from": m.old, "to": m.new, "from_package": m.old_package} for m in p.moved
                ],
                "metadata": list(p.metadata),
                "binaries": [
                    {
                        "path": b.path,
                        "soname": pair(b.soname),
                        "needed_added": list(b.needed_added),
                        "needed_removed": list(b.needed_removed),
                        "runpath": pair(b.runpath),
                        "symbols_added": symbols(b.symbols_added),
                        "symbols_removed": symbols(b.symbols_removed),
                        "kernels_added": list(b.kernels_added),
                        "kernels_removed": list(b.kernels_removed),
                        "schemas_added": list(b.schemas_added),
                        "schemas_removed": list(b.schemas_removed),
                    }
                    for b in p.binaries
                ],
            }
            for p in found.packages
        },
    }
    if abi is not None:
        shown["abi"] = [
            {
                "path": r.path,
                "status": r.status,
                "summary": r.summary,
                "debug_info": r.debug_info,
                "report": r.report,
            }
            for r in abi
        ]
    return shown


def report_lines(
    found: SplitDiff, abi: list[AbiReport] | None = None, limit: int = 10
) -> list[str]:
    """The readable report: a line per package with its verdict (and nothing more when it is
    unchanged), then what changed, then abidiff's findings per library (`abi`); long lists
    show their first `limit` entries."""
    names = demangled(
        s for p in found.packages for b in p.binaries for s in b.symbols_added + b.symbols_removed
    )
    lines = [f"{found.old} -> {found.new}"]

    def listed(mark: str, label: str, items: Iterable[str]) -> None:
        items = list(items)
        for item in items[:limit]:
            lines.append(f"  {mark} {label}{item}")
        if len(items) > limit:
            lines.append(f"  {mark} {label}... and {len(items) - limit} more")

    for package in found.packages:
        lines.append(f"{package.name}: {package.verdict}")
        lines += [f"  incompatible: {reason}" for reason in package.reasons]
        if package.verdict is Verdict.INCOMPATIBLE:
            lines.append(f"  pins: {PINS}")
        listed("+", "", package.added)
        listed("-", "", package.removed)
        listed("~", "", package.changed)
        listed(">", "", (f"{m.old} -> {m.new} (was in {m.old_package})" for m in package.moved))
        lines += [f"  * {line}" for line in package.metadata]
        for b in package.binaries:
            lines.append(f"  binary {b.path}:")
            if b.soname is not None:
                lines.append(f"    soname {b.soname[0]} -> {b.soname[1]}")
            if b.runpath is not None:
                lines.append(f"    RUNPATH {':'.join(b.runpath[0])} -> {':'.join(b.runpath[1])}")
            listed("  + NEEDED", " ", b.needed_added)
            listed("  - NEEDED", " ", b.needed_removed)
            listed("  + symbol", " ", (names[s] for s in b.symbols_added))
            listed("  - symbol", " ", (names[s] for s in b.symbols_removed))
            listed("  + kernel", " ", b.kernels_added)
            listed("  - kernel", " ", b.kernels_removed)
            listed("  + schema", " ", b.schemas_added)
            listed("  - schema", " ", b.schemas_removed)
    for report in abi or []:
        lines.append(f"abidiff {report.path}: {report.summary}")
    return lines
