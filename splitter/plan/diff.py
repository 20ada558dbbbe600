"""The comparison behind `splitter diff OLD NEW`: what changed between two splits, package by
package, as typed records (the report's words are splitter.plan.diffreport's).

Both wheels are planned with the same recipe; each package of either split is compared:
- files: added, removed, changed (their content), and moved (the same content at a new path,
  or the same path now in another package; listed under the package that holds it now). A
  binary whose bytes differ only in its build stamp (GNU build-id; LC_UUID and code
  signature: BinaryInfo.unstamped_sha256) is not changed. The .dist-info directory is
  compared under the new version's name.
- binaries (changed, or kept with other facts): soname, NEEDED, RUNPATH, exported dynamic
  symbols (read from both wheels again, verified), ExecuTorch kernel registrations, torch
  operator schemas (BinaryChange);
- metadata (MetadataChange): the package itself, dependencies between the packages, external
  requirements, CMake components, and the process-exclusivity verdicts it is part of.
Each package gets a verdict: unchanged; compatible (what was built against OLD keeps working
with NEW); or incompatible, with a Reason per break: a removed file, a soname change, removed
exported symbols or kernels, a removed CMake component, or a file moved in from another
package (whose old version conflicts with the new one).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from splitter.binaries.detect import exported_symbols
from splitter.errors import UsageError
from splitter.input.payload import Payload
from splitter.model import BinaryInfo, Plan
from splitter.plan.diffmeta import MetadataChange, diff_metadata


class Verdict(StrEnum):
    """What a package's changes mean for what was built against the old one."""

    UNCHANGED = "unchanged"
    COMPATIBLE = "compatible"  # what was built against OLD works with NEW
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """A file at a new path or in another package, with the same content."""

    old: str
    new: str
    old_package: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BinaryChange:
    """How one binary kept at its path differs; empty fields did not change."""

    path: str
    soname: tuple[str, str] | None = None  # (old, new)
    needed_added: tuple[str, ...] = ()
    needed_removed: tuple[str, ...] = ()
    runpath: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    symbols_added: tuple[str, ...] = ()  # mangled, as the dynamic symbol table has them
    symbols_removed: tuple[str, ...] = ()
    kernels_added: tuple[str, ...] = ()
    kernels_removed: tuple[str, ...] = ()
    schemas_added: tuple[str, ...] = ()
    schemas_removed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether nothing but the bytes changed."""
        return not any(
            (
                self.soname,
                self.needed_added,
                self.needed_removed,
                self.runpath,
                self.symbols_added,
                self.symbols_removed,
                self.kernels_added,
                self.kernels_removed,
                self.schemas_added,
                self.schemas_removed,
            )
        )


class Break(StrEnum):
    """Why a package is incompatible: one kind per way a change breaks its users."""

    REMOVED = "removed"  # a file
    SONAME = "soname"  # a library's soname changed
    SYMBOLS = "symbols"  # exported symbols removed
    KERNELS = "kernels"  # kernel registrations removed
    METADATA = "metadata"  # a metadata change that is not compatible
    MOVED_IN = "moved in"  # a file from another package, whose old version conflicts with it


@dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    """One incompatibility of a package."""

    kind: Break
    subject: str  # the file's path; METADATA: the change's subject
    was: str = ""  # SONAME: the old soname; MOVED_IN: the package the file was in
    now: str = ""  # SONAME: the new soname
    names: tuple[str, ...] = ()  # SYMBOLS, KERNELS: the ones removed
    metadata: MetadataChange | None = None  # METADATA: the change


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageDiff:
    """One package's changes from the old split to the new."""

    name: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    moved: tuple[Moved, ...] = ()
    binaries: tuple[BinaryChange, ...] = ()
    metadata: tuple[MetadataChange, ...] = ()
    verdict: Verdict = Verdict.UNCHANGED
    reasons: tuple[Reason, ...] = ()  # why incompatible
    # what it holds of other projects, old and new (shown changed or not: a packager reviews
    # the licences of a release), and its SPDX expression, old and new ("": absent)
    third_party: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    license: tuple[str, str] = ("", "")


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitDiff:
    """Every package's changes between two splits."""

    old: str  # the old wheel's file name
    new: str
    packages: tuple[PackageDiff, ...] = field(default_factory=tuple)
    # wheel files the new recipe excludes from every package and the old did not, and the
    # other way round (a licence review reads both)
    excluded_added: tuple[str, ...] = ()
    excluded_removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether anything differs."""
        return (
            any(p.verdict is not Verdict.UNCHANGED for p in self.packages)
            or bool(self.excluded_added)
            or bool(self.excluded_removed)
        )


@dataclass(slots=True)
class _Found:
    """One package's changes while the files are compared."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    moved: list[Moved] = field(default_factory=list)
    binaries: list[BinaryChange] = field(default_factory=list)


def diff_plans(old: Plan, new: Plan) -> SplitDiff:
    """Compare the split of `old` with the split of `new` (see the module)."""
    rename = (f"{old.wheel.dist_info}/", f"{new.wheel.dist_info}/")

    def normal(path: str) -> str:
        return rename[1] + path[len(rename[0]) :] if path.startswith(rename[0]) else path

    before = _files(old, normal)  # path -> (package, sha256)
    after = _files(new, normal)
    old_binaries = {normal(b.path): b for b in old.binaries}
    new_binaries = {b.path: b for b in new.binaries}
    gone_by_sha: dict[str, list[str]] = defaultdict(list)
    for path in sorted(set(before) - set(after)):
        gone_by_sha[before[path][1]].append(path)

    names = [p.name for p in old.packages] + [p.name for p in new.packages]
    found = {name: _Found() for name in dict.fromkeys(names)}
    moved_away: set[str] = set()
    for path in sorted(set(after) - set(before)):
        package, sha = after[path]
        sources = gone_by_sha.get(sha)
        if sources:
            source = sources.pop(0)
            moved_away.add(source)
            found[package].moved.append(Moved(old=source, new=path, old_package=before[source][0]))
        else:
            found[package].added.append(path)
    for path in sorted(set(before) - set(after) - moved_away):
        found[before[path][0]].removed.append(path)
    changed_binaries: list[tuple[str, BinaryInfo, BinaryInfo]] = []
    for path in sorted(set(before) & set(after)):
        (was, old_sha), (now, new_sha) = before[path], after[path]
        if was != now:
            found[now].moved.append(Moved(old=path, new=path, old_package=was))
        mine, theirs = old_binaries.get(path), new_binaries.get(path)
        if old_sha == new_sha:
            continue
        if mine is not None and theirs is not None:
            if mine.unstamped_sha256 != theirs.unstamped_sha256:
                found[now].changed.append(path)
            changed_binaries.append((path, mine, theirs))
        else:
            found[now].changed.append(path)
    for path, change in _binary_changes(old, new, changed_binaries):
        found[after[path][0]].binaries.append(change)
    packages = []
    for name, lists in found.items():
        metadata = diff_metadata(name, old, new)
        held, holds = _held(old, name), _held(new, name)
        judged = _judged(name, lists, metadata)
        packages.append(
            dataclasses.replace(
                judged, third_party=(held[0], holds[0]), license=(held[1], holds[1])
            )
        )
    was_excluded = {normal(e.path) for e in old.excluded}
    now_excluded = {e.path for e in new.excluded}
    return SplitDiff(
        old=old.wheel.filename,
        new=new.wheel.filename,
        packages=tuple(packages),
        excluded_added=tuple(sorted(now_excluded - was_excluded)),
        excluded_removed=tuple(sorted(was_excluded - now_excluded)),
    )


def _files(plan: Plan, normal: Callable[[str], str]) -> dict[str, tuple[str, str]]:
    digests = {e.path: e.sha256 for e in plan.wheel.entries}
    return {
        normal(path): (owner[0], digests[path])
        for path, owner in plan.owners.items()
        if path in digests
    }


def _binary_changes(
    old: Plan,
    new: Plan,
    pairs: list[tuple[str, BinaryInfo, BinaryInfo]],
) -> list[tuple[str, BinaryChange]]:
    """The facts that differ for each binary whose bytes changed, symbols read again."""
    if not pairs:
        return []
    changes = []
    with Payload(old.wheel) as before, Payload(new.wheel) as after:
        for path, mine, theirs in pairs:
            old_symbols = exported_symbols(mine.path, before.read(mine.path))
            new_symbols = exported_symbols(theirs.path, after.read(theirs.path))
            change = BinaryChange(
                path=path,
                soname=(mine.soname, theirs.soname) if mine.soname != theirs.soname else None,
                needed_added=_added(mine.needed, theirs.needed),
                needed_removed=_added(theirs.needed, mine.needed),
                runpath=(mine.runpath, theirs.runpath) if mine.runpath != theirs.runpath else None,
                symbols_added=_added(old_symbols, new_symbols),
                symbols_removed=_added(new_symbols, old_symbols),
                kernels_added=_added(mine.et_operators, theirs.et_operators),
                kernels_removed=_added(theirs.et_operators, mine.et_operators),
                schemas_added=_added(mine.torch_schemas, theirs.torch_schemas),
                schemas_removed=_added(theirs.torch_schemas, mine.torch_schemas),
            )
            if not change.empty:
                changes.append((path, change))
    return changes


def _held(plan: Plan, name: str) -> tuple[tuple[str, ...], str]:
    """Package `name`'s third-party components and licence in `plan` (none: absent)."""
    for package in plan.packages:
        if package.name == name:
            return package.third_party, package.license
    return (), ""


def _added(before: Iterable[str], after: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(after) - set(before)))


def _judged(name: str, found: _Found, metadata: tuple[MetadataChange, ...]) -> PackageDiff:
    """The package's changes with its verdict, decided from the records' fields."""
    reasons = [Reason(kind=Break.REMOVED, subject=p) for p in found.removed]
    for change in found.binaries:
        if change.soname is not None:
            was, now = change.soname
            reasons.append(Reason(kind=Break.SONAME, subject=change.path, was=was, now=now))
        if change.symbols_removed:
            reasons.append(
                Reason(kind=Break.SYMBOLS, subject=change.path, names=change.symbols_removed)
            )
        if change.kernels_removed:
            reasons.append(
                Reason(kind=Break.KERNELS, subject=change.path, names=change.kernels_removed)
            )
    reasons += [
        Reason(kind=Break.METADATA, subject=m.subject, metadata=m)
        for m in metadata
        if not m.compatible
    ]
    reasons += [
        Reason(kind=Break.MOVED_IN, subject=m.new, was=m.old_package)
        for m in found.moved
        if m.old_package != name
    ]
    anything = (
        found.added or found.removed or found.changed or found.moved or found.binaries or metadata
    )
    verdict = (
        Verdict.INCOMPATIBLE if reasons else Verdict.COMPATIBLE if anything else Verdict.UNCHANGED
    )
    return PackageDiff(
        name=name,
        added=tuple(found.added),
        removed=tuple(found.removed),
        changed=tuple(found.changed),
        moved=tuple(found.moved),
        binaries=tuple(found.binaries),
        metadata=metadata,
        verdict=verdict,
        reasons=tuple(reasons),
    )


def pair_plans(olds: list[Plan], news: list[Plan]) -> list[tuple[Plan, Plan]]:
    """The old and new plans paired by platform and Python (one pair per wheel of
    --platform/--python), in the new ones' order; a UsageError names a wheel without its
    counterpart."""
    if len(olds) == len(news) == 1:
        was, now = olds[0].platform.conda_subdir, news[0].platform.conda_subdir
        if was != now:
            raise UsageError(
                f"OLD is a {was} wheel and NEW a {now} one: {olds[0].wheel.filename}, "
                f"{news[0].wheel.filename}\ncompare wheels of one platform"
            )
        return [(olds[0], news[0])]

    def key(plan: Plan) -> tuple[str, tuple[int, int]]:
        return plan.platform.conda_subdir, plan.platform.python

    before = {key(p): p for p in olds}
    after = {key(p): p for p in news}
    lonely = [p.wheel.filename for p in olds if key(p) not in after]
    lonely += [p.wheel.filename for p in news if key(p) not in before]
    if lonely:
        raise UsageError(
            f"no counterpart of the same platform and Python on the other side: {', '.join(lonely)}"
            "\ngive OLD and NEW for the same platforms and Pythons"
        )
    return [(before[key(p)], p) for p in news]
