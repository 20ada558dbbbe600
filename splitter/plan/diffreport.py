"""How `splitter diff` shows a comparison: the readable report and the `--json` form. Every
sentence is worded here, from the comparison's records, by the tables below; no verdict or
count reads these words (tests/test_diff_wording.py rewords them all)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable

from splitter.plan.diff import Break, Reason, SplitDiff, Verdict
from splitter.plan.diffabi import AbiFinding, AbiReport
from splitter.plan.diffmeta import Meta, MetadataChange
from splitter.tools import run_status

# A metadata change: {subject} is what it concerns (see MetadataChange); {was} and {now} the
# old and new requirement (.pip, .conda) or exclusivity state (STATES).
METADATA: dict[Meta, str] = {
    Meta.PACKAGE_NEW: "the package is new",
    Meta.PACKAGE_GONE: "the package is gone",
    Meta.DEPENDS_ADDED: "depends on {subject}: added",
    Meta.DEPENDS_REMOVED: "depends on {subject}: removed",
    Meta.COMPONENT_ADDED: "CMake component {subject}: added",
    Meta.COMPONENT_REMOVED: "CMake component {subject}: removed",
    Meta.REQUIRES_ADDED: "requires {now.pip} (conda {now.conda}): added",
    Meta.REQUIRES_REMOVED: "requires {was.pip} (conda {was.conda}): removed",
    Meta.REQUIRES_CHANGED: (
        "requires {subject}: {was.pip} (conda {was.conda}) -> {now.pip} (conda {now.conda})"
    ),
    Meta.EXCLUSIVE_STATE: "process-exclusive {subject}: {was} -> {now}",
    Meta.EXCLUSIVE_EVIDENCE: "process-exclusive {subject}: {now}, evidence changed",
    Meta.THIRD_PARTY_ADDED: "third-party component {subject}: added (review its licence)",
    Meta.THIRD_PARTY_REMOVED: "third-party component {subject}: removed",
    Meta.LICENSE_CHANGED: "licence: {was} -> {now}",
}
# An exclusivity verdict's state in a split: None where the split has no such verdict.
STATES: dict[bool | None, str] = {None: "absent", True: "in effect", False: "not in effect"}

# Why a package is incompatible: {subject} is the file (see Reason); {was} and {now} the
# sonames, or {was} the package a file was in; {count} and {names} the symbols or kernels
# removed; {metadata} the metadata change as METADATA words it.
REASONS: dict[Break, str] = {
    Break.REMOVED: "{subject} removed",
    Break.SONAME: "{subject}: soname {was} -> {now}",
    Break.SYMBOLS: "{subject}: {count} exported symbols removed",
    Break.KERNELS: "{subject}: kernels removed: {names}",
    Break.METADATA: "{metadata}",
    Break.MOVED_IN: "{subject}: moved here from {was} (the old {was} conflicts with it)",
}

ABI: dict[AbiFinding, str] = {
    AbiFinding.FAILED: "abidiff failed",
    AbiFinding.INCOMPATIBLE: "incompatible ABI change",
    AbiFinding.CHANGED: "ABI change",
    AbiFinding.NONE: "no ABI change",
}

# The report's lines; {item} is one entry of a list (long lists end with a "more" entry).
LINES: dict[str, str] = {
    "header": "{old} -> {new}",
    "excluded_added": "excluded from every package: + {item}",
    "excluded_removed": "excluded from every package: - {item}",
    "package": "{name}: {verdict}",
    "reason": "  incompatible: {reason}",
    "pins": "  pins: {pins}",
    "added": "  + {item}",
    "removed": "  - {item}",
    "changed": "  ~ {item}",
    "moved": "  > {item}",
    "metadata": "  * {item}",
    "binary": "  binary {path}:",
    "soname": "    soname {was} -> {now}",
    "runpath": "    RUNPATH {was} -> {now}",
    "needed_added": "    + NEEDED  {item}",
    "needed_removed": "    - NEEDED  {item}",
    "symbols_added": "    + symbol  {item}",
    "symbols_removed": "    - symbol  {item}",
    "kernels_added": "    + kernel  {item}",
    "kernels_removed": "    - kernel  {item}",
    "schemas_added": "    + schema  {item}",
    "schemas_removed": "    - schema  {item}",
    "abidiff": "abidiff {path}: {summary}",
}
PHRASES: dict[str, str] = {
    "pins": (
        "programs and packages built against the old version need a rebuild: pin exactly "
        "(conda run_exports max_pin='x.x.x', a deb shlibs/symbols bump, an rpm Requires on "
        "the exact version)"
    ),
    "more": "... and {count} more",
    "moved": "{old} -> {new} (was in {package})",
    "symbols only": (
        " (no debug info in the libraries: abidiff compared their symbols only, not type layouts)"
    ),
}


def metadata_text(change: MetadataChange) -> str:
    """One metadata change in words."""
    exclusive = change.kind in (Meta.EXCLUSIVE_STATE, Meta.EXCLUSIVE_EVIDENCE)
    was: object
    now: object
    if exclusive:
        was, now = STATES[change.in_effect[0]], STATES[change.in_effect[1]]
    elif change.kind is Meta.LICENSE_CHANGED:
        was, now = change.license
    else:
        was, now = change.requires
    return METADATA[change.kind].format(subject=change.subject, was=was, now=now)


def reason_text(reason: Reason) -> str:
    """One reason a package is incompatible, in words."""
    return REASONS[reason.kind].format(
        subject=reason.subject,
        was=reason.was,
        now=reason.now,
        count=len(reason.names),
        names=", ".join(reason.names),
        metadata="" if reason.metadata is None else metadata_text(reason.metadata),
    )


def abi_summary(report: AbiReport) -> str:
    """One line: what abidiff found, and what it could not see."""
    return ABI[report.finding] + ("" if report.debug_info else PHRASES["symbols only"])


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


def _demangled_of(found: SplitDiff) -> dict[str, str]:
    return demangled(
        s for p in found.packages for b in p.binaries for s in b.symbols_added + b.symbols_removed
    )


def diff_json(found: SplitDiff, abi: list[AbiReport] | None = None) -> dict[str, object]:
    """The diff as `--json` prints it: `from`, `to`, `changed`, and `packages` mapping each
    package name to its verdict, reasons, added, removed, changed and moved entries, metadata
    lines and binaries (symbols demangled, with the mangled name); with `abi`, abidiff's
    reports under `abi`."""
    names = _demangled_of(found)

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
                "reasons": [reason_text(r) for r in p.reasons],
                "pins": PHRASES["pins"] if p.verdict is Verdict.INCOMPATIBLE else "",
                "added": list(p.added),
                "removed": list(p.removed),
                "changed": list(p.changed),
                "moved": [
                    {"from": m.old, "to": m.new, "from_package": m.old_package} for m in p.moved
                ],
                "metadata": [metadata_text(m) for m in p.metadata],
                "third_party": {"from": list(p.third_party[0]), "to": list(p.third_party[1])},
                "license": {"from": p.license[0], "to": p.license[1]},
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
        "excluded": {"added": list(found.excluded_added), "removed": list(found.excluded_removed)},
    }
    if abi is not None:
        shown["abi"] = [
            {
                "path": r.path,
                "status": r.status,
                "summary": abi_summary(r),
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
    names = _demangled_of(found)
    lines: list[str] = []

    def line(key: str, **fields: object) -> None:
        lines.append(LINES[key].format(**fields))

    def listed(key: str, items: Iterable[str]) -> None:
        items = list(items)
        for item in items[:limit]:
            line(key, item=item)
        if len(items) > limit:
            line(key, item=PHRASES["more"].format(count=len(items) - limit))

    line("header", old=found.old, new=found.new)
    for package in found.packages:
        line("package", name=package.name, verdict=package.verdict)
        for reason in package.reasons:
            line("reason", reason=reason_text(reason))
        if package.verdict is Verdict.INCOMPATIBLE:
            line("pins", pins=PHRASES["pins"])
        listed("added", package.added)
        listed("removed", package.removed)
        listed("changed", package.changed)
        listed(
            "moved",
            (
                PHRASES["moved"].format(old=m.old, new=m.new, package=m.old_package)
                for m in package.moved
            ),
        )
        for change in package.metadata:
            line("metadata", item=metadata_text(change))
        for b in package.binaries:
            line("binary", path=b.path)
            if b.soname is not None:
                line("soname", was=b.soname[0], now=b.soname[1])
            if b.runpath is not None:
                line("runpath", was=":".join(b.runpath[0]), now=":".join(b.runpath[1]))
            listed("needed_added", b.needed_added)
            listed("needed_removed", b.needed_removed)
            listed("symbols_added", (names[s] for s in b.symbols_added))
            listed("symbols_removed", (names[s] for s in b.symbols_removed))
            listed("kernels_added", b.kernels_added)
            listed("kernels_removed", b.kernels_removed)
            listed("schemas_added", b.schemas_added)
            listed("schemas_removed", b.schemas_removed)
    listed("excluded_added", found.excluded_added)
    listed("excluded_removed", found.excluded_removed)
    for report in abi or []:
        line("abidiff", path=report.path, summary=abi_summary(report))
    return lines
