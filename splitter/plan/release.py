"""A release: every wheel of one version of the project, split together.

Each wheel gets its plan (make_plan). The wheels are grouped by platform (conda subdir). In
each group the packages the recipe does not mark `python = true` (the runtime and the
quantized kernels) do not depend on the Python version, so they are packaged once, from one
wheel: the one for the oldest Python, a stated and deterministic choice. That is only sound
when each of their files is the same in every wheel of the group, so each is compared: equal
digests, or, for an ELF file, equal bytes once the GNU build-id (which the linker stamps per
link) is set aside; for a Mach-O file, the LC_UUID and the code signature (whose page hashes
cover the UUID). A third stamp is defined narrowly: a binary may also differ inside
NUL-terminated strings of its read-only string section (`__TEXT,__cstring`, ELF `.rodata`)
where each wheel's string names that wheel's own Python build and is the other's but for
that name (1.5.1's MLX embeds its build directory, `...-cpython-3XY/...`, as a fallback path
to `mlx.metallib`, which it finds beside the library first). Any other difference, a file
missing from one wheel, two wheels of one platform and Python, or wheels of two versions, is
a ReleaseError naming the file and the wheels; every problem is reported at once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from splitter.binaries.detect import stamp_layout
from splitter.binaries.stamps import Spans, StringComparison, compare_strings
from splitter.errors import ReleaseError, SplitterError
from splitter.input.payload import Payload
from splitter.input.wheel import Known
from splitter.model import PackagePlan, Plan, Platform, Progress, Recipe
from splitter.plan.facts import platform_of
from splitter.plan.make import make_plan


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAsideString:
    """A string a release set aside in one wheel's copy of a stamped file: it names that
    wheel's Python build (splitter.binaries.stamps.compare_strings)."""

    wheel: str
    offset: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StampedFile:
    """A file of a Python-independent package whose bytes differ between the wheels of a
    platform only in what the linker stamps (link_stamps: an ELF file's GNU build-id, a Mach-O
    file's LC_UUID and code signature) and, if `strings`, in NUL-terminated strings of a
    read-only string section where each wheel's copy names its own Python build."""

    path: str
    wheels: tuple[str, ...]  # the wheels whose copy differs from the source wheel's there
    region: str  # ELF_STAMPS or MACHO_STAMPS
    strings: tuple[SetAsideString, ...] = ()  # every wheel's, the source's too; by offset

    @property
    def set_aside(self) -> str:
        """What was set aside, in words: the region, and the build strings if any."""
        if not self.strings:
            return self.region
        return f"{self.region} and {BUILD_STRINGS}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformGroup:
    """The wheels of one platform: their plans (oldest Python first) and the one wheel the
    Python-independent packages are packaged from."""

    subdir: str
    plans: tuple[Plan, ...]
    shared_packages: tuple[str, ...]  # packaged once, from `source`
    stamped: tuple[StampedFile, ...]

    @property
    def inputs(self) -> tuple[tuple[str, str], ...]:
        """(file name, sha256) of the group's wheels, which its shared packages stand for."""
        return wheel_inputs(self.plans)

    @property
    def source(self) -> Plan:
        """The plan of the wheel for the oldest Python: the shared packages come from it."""
        return self.plans[0]

    def packaged_from(self, plan: Plan) -> tuple[PackagePlan, ...]:
        """The packages a release builds from `plan`, one of the group's: every one from the
        source wheel, the Python packages alone from the others."""
        return tuple(
            p for p in plan.packages if plan is self.source or p.name not in self.shared_packages
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """Every wheel of one version, grouped by platform."""

    project: str
    version: str
    groups: tuple[PlatformGroup, ...]  # by subdir

    @property
    def inputs(self) -> tuple[tuple[str, str], ...]:
        """(file name, sha256) of every input wheel, sorted."""
        return tuple(
            sorted((p.wheel.filename, p.wheel.sha256) for g in self.groups for p in g.plans)
        )


def make_release(
    paths: Sequence[Path], recipe: Recipe, progress: Progress | None = None
) -> Release:
    """Plan every wheel in `paths` and check that they form one release (see the module)."""
    return planned(ReleasePlanning(paths, recipe), progress)


def planned(release: Release | ReleasePlanning, progress: Progress | None = None) -> Release:
    """The checked release: `release` itself, or a planning's, each wheel planned in turn."""
    if isinstance(release, Release):
        return release
    for _ in release.plans(progress):
        pass
    return release.release()


class ReleasePlanning:
    """A release planned one wheel at a time, then checked as a whole: what a build that
    packs each wheel as soon as its plan is made consumes (`plans`, then `release`), and what
    make_release runs through at once. The checks are the same either way, so `splitter plan`
    refuses exactly what a build does; a build that has already packed some wheels when
    `release` refuses leaves nothing, as its output is moved in only when complete.

    The wheels are planned in release order (`release_order`): by platform, the oldest Python
    first, so the first plan of each platform is its group's source."""

    def __init__(self, paths: Sequence[Path], recipe: Recipe) -> None:
        self.paths = release_order(paths)
        self.recipe = recipe
        self._plans: list[Plan] = []
        # What the wheels planned so far verified: the next one's members stored with the
        # same bytes are not inflated again (read_wheel's `known`), which is most of them.
        self._known: Known = {}
        self._release: Release | None = None
        # Each platform's check, made once: a build checks a platform as soon as its wheels
        # are planned (to pack its shared packages), and `release` reuses it.
        self._checked: Checked = {}

    @classmethod
    def of(cls, release: Release) -> ReleasePlanning:
        """A release already planned and checked, as a planning that is done."""
        plans = [p for group in release.groups for p in group.plans]
        recipe = plans[0].recipe
        planning = cls([p.wheel.path for p in plans], recipe)
        planning._plans, planning._release = plans, release
        return planning

    def plans(self, progress: Progress | None = None) -> Iterator[Plan]:
        """Each wheel's plan, in release order, as it is made."""
        for index, path in enumerate(self.paths):
            if index < len(self._plans):
                yield self._plans[index]
                continue
            if progress is not None:
                progress(f"planning {path.name}", index, len(self.paths))
            try:
                plan = make_plan(path, self.recipe, known=self._known)
            except SplitterError as exc:
                # A wheel's own error names the file inside it; among several wheels, say
                # which wheel (a note, which the CLI prints under the error).
                if len(self.paths) > 1 and str(path) not in str(exc):
                    exc.add_note(f"in {path}")
                raise
            self._plans.append(plan)
            if len(self._plans) == len(self.paths):
                self._known = {}  # every wheel read: its memory back
            yield plan

    def platform(self, subdir: str) -> PlatformGroup:
        """The checked group of platform `subdir`, once each of its wheels is planned (the
        wheels are planned platform by platform): what a build packs that platform's shared
        packages by before it plans the next. A ReleaseError names that platform's
        problems; `release` reuses the check."""
        members = [p for p in self._plans if p.platform.conda_subdir == subdir]
        return check_release(members, self.recipe, self._checked).groups[0]

    def release(self) -> Release:
        """The release the plans form, once every wheel is planned; a ReleaseError lists
        every problem found."""
        assert len(self._plans) == len(self.paths), "plan every wheel first"
        if self._release is None:
            self._release = check_release(self._plans, self.recipe, self._checked)
        return self._release


def release_order(paths: Sequence[Path]) -> tuple[Path, ...]:
    """The order a release plans its wheels in: by conda subdir, then Python, then file name,
    from the tags of each file name, as check_release groups the plans; a name that is not a
    wheel's (its plan fails, naming it) or names no conda platform comes first."""

    def key(path: Path) -> tuple[str, tuple[int, int], str]:
        try:
            _, _, _, tags = parse_wheel_filename(path.name)
            tag = sorted(tags, key=str)[0]
            platform = platform_of(tag.interpreter, tag.platform)
        except (InvalidWheelFilename, SplitterError, ValueError, IndexError):
            return ("", (0, 0), path.name)
        return (platform.conda_subdir, platform.python, path.name)

    return tuple(sorted(paths, key=key))


def shared_packages(recipe: Recipe) -> tuple[str, ...]:
    """The packages a release packages once per platform: those the recipe does not mark
    `python`."""
    return tuple(spec.name for spec in recipe.packages if not spec.python)


def wheel_inputs(plans: Iterable[Plan]) -> tuple[tuple[str, str], ...]:
    """(file name, sha256) of the plans' wheels, sorted: what a shared package stands for."""
    return tuple(sorted((p.wheel.filename, p.wheel.sha256) for p in plans))


# A platform's check by its wheels' file names: its group, and the problems found.
Checked = dict[tuple[str, ...], tuple["PlatformGroup", list[str]]]


def check_release(plans: Sequence[Plan], recipe: Recipe, checked: Checked | None = None) -> Release:
    """The release `plans` form, grouped by platform (see the module); a ReleaseError lists
    every problem. `checked` keeps each platform's check for the next call (a platform's
    wheels compared once, not again for the whole release)."""
    problems = _check_versions(list(plans))
    by_subdir: dict[str, list[Plan]] = defaultdict(list)
    for plan in plans:
        by_subdir[plan.platform.conda_subdir].append(plan)
    shared = shared_packages(recipe)
    groups = []
    for subdir, members in sorted(by_subdir.items()):
        members.sort(key=lambda p: (p.platform.python, p.wheel.filename))
        key = tuple(p.wheel.filename for p in members)
        found = None if checked is None else checked.get(key)
        if found is None:
            found = _check_platform(subdir, members, shared)
            if checked is not None:
                checked[key] = found
        groups.append(found[0])
        problems += found[1]
    if problems:
        raise ReleaseError("\n".join(problems))
    return Release(project=recipe.project, version=plans[0].wheel.version, groups=tuple(groups))


def _check_platform(
    subdir: str, members: list[Plan], shared: tuple[str, ...]
) -> tuple[PlatformGroup, list[str]]:
    """One platform's group, its wheels sorted oldest Python first, and its problems."""
    problems = _check_pythons(members)
    stamped, found = _compare_shared(members, shared)
    group = PlatformGroup(
        subdir=subdir, plans=tuple(members), shared_packages=shared, stamped=stamped
    )
    return group, problems + found


def _check_versions(plans: list[Plan]) -> list[str]:
    versions = {p.wheel.version for p in plans}
    if len(versions) <= 1:
        return []
    listed = ", ".join(f"{p.wheel.filename} ({p.wheel.version})" for p in plans)
    return [
        f"the wheels of one release have different versions ({', '.join(sorted(versions))}): "
        f"{listed}\nsplit each version on its own"
    ]


def _check_pythons(members: list[Plan]) -> list[str]:
    problems = []
    seen: dict[tuple[int, int], Plan] = {}
    for plan in members:
        other = seen.setdefault(plan.platform.python, plan)
        if other is not plan:
            problems.append(
                f"two wheels for one platform and Python ({plan.platform.conda_subdir}, "
                "{}.{}): {} and {}\ngive one wheel per platform and Python".format(
                    *plan.platform.python, other.wheel.filename, plan.wheel.filename
                )
            )
    return problems


def _compare_shared(
    members: list[Plan], shared: tuple[str, ...]
) -> tuple[tuple[StampedFile, ...], list[str]]:
    """Compare every file of the shared packages in each wheel with the source wheel's: by
    the RECORD digests the plans verified, and where those differ, for a binary, by the digest
    its plan recorded with the link stamps set aside (BinaryInfo.unstamped_sha256); where
    that differs too, both copies are read again (verified) and compared string by string
    (_build_strings)."""
    source, others = members[0], members[1:]
    problems: list[str] = []
    stamped: dict[str, list[str]] = defaultdict(list)
    regions: dict[str, str] = {}
    strings: dict[str, set[SetAsideString]] = defaultdict(set)
    wanted = sorted(f for name in shared for f in source.package(name).files)
    digests = {e.path: e.sha256 for e in source.wheel.entries}
    binaries = {b.path: b for b in source.binaries}
    mine = _SourceCopies(source)
    for other in others:
        theirs = {e.path: e.sha256 for e in other.wheel.entries}
        their_binaries = {b.path: b for b in other.binaries}
        theirs_shared = {f for name in shared for f in other.package(name).files}
        for path in sorted(theirs_shared.symmetric_difference(wanted)):
            holder = other if path in theirs_shared else source
            problems.append(
                f"a file of a Python-independent package is in only one of two wheels of a "
                f"release ({holder.wheel.filename} has it): {path}; "
                f"wheels {source.wheel.filename} and {other.wheel.filename}\n"
                "give wheels of one build, or a recipe rule that puts the file in a "
                "package per Python"
            )
        for path in wanted:
            if path not in theirs or theirs[path] == digests[path]:
                continue
            binary, their_binary = binaries.get(path), their_binaries.get(path)
            stamp = MACHO_STAMPS if binary is not None and binary.macho else ELF_STAMPS
            if binary is None or their_binary is None:
                reason = "it is not a binary, so nothing in it is a stamp"
            elif binary.unstamped_sha256 == their_binary.unstamped_sha256:
                reason = ""
            else:
                found = _build_strings(mine, other, path)
                reason = found.refused
                for s in found.strings:
                    strings[path].add(
                        SetAsideString(wheel=source.wheel.filename, offset=s.offset, text=s.mine)
                    )
                    strings[path].add(
                        SetAsideString(wheel=other.wheel.filename, offset=s.offset, text=s.theirs)
                    )
            if not reason:
                stamped[path].append(other.wheel.filename)
                regions[path] = stamp
                continue
            problems.append(
                "a file of a Python-independent package differs between two wheels of a "
                f"release beyond its {stamp}: {path}; wheels {source.wheel.filename} and "
                f"{other.wheel.filename}\nwhere: {reason}\nthe package cannot be shared: "
                "rebuild the wheels from one source tree, or split them one at a time"
            )
    files = tuple(
        StampedFile(
            path=p,
            wheels=tuple(w),
            region=regions[p],
            strings=tuple(sorted(strings[p], key=lambda s: (s.offset, s.wheel))),
        )
        for p, w in sorted(stamped.items())
    )
    return files, problems


class _SourceCopies:
    """The source wheel's copies of the binaries a platform's check reads again (verified
    against RECORD), with where each holds its stamps and strings: read once, as every other
    wheel of the platform is compared with them."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._read: dict[str, tuple[bytes, tuple[Spans, Spans]]] = {}

    def get(self, path: str) -> tuple[bytes, tuple[Spans, Spans]]:
        """The source's copy of `path` and its stamp layout."""
        if path not in self._read:
            with Payload(self.plan.wheel) as payload:
                data = payload.read(path)
            self._read[path] = (data, stamp_layout(path, data))
        return self._read[path]


def _build_strings(mine: _SourceCopies, other: Plan, path: str) -> StringComparison:
    """The source's and `other`'s copies of the binary `path`, read again (verified against
    RECORD) and compared with their link stamps set aside: the strings that differ only in the
    Python build each names, or why the copies differ beyond that."""
    data, layout = mine.get(path)
    with Payload(other.wheel) as payload:
        theirs = payload.read(path)
    their_layout = stamp_layout(path, theirs)
    return compare_strings(
        data,
        theirs,
        spans=(layout[0], their_layout[0]),
        sections=(layout[1], their_layout[1]),
        pythons=(mine.plan.platform.python, other.platform.python),
    )


ELF_STAMPS = "GNU build-id"
MACHO_STAMPS = "LC_UUID and code signature"
BUILD_STRINGS = "strings naming each wheel's Python build"


def link_stamps(platform: Platform) -> str:
    """What the linker stamps per link in this platform's binaries, which a release sets
    aside when it compares them: said in the shared packages' descriptions, so a macOS
    package does not claim its files differ only in an ELF note."""
    return MACHO_STAMPS if platform.macos else ELF_STAMPS


def release_note(group: PlatformGroup, package: PackagePlan) -> str:
    """What a shared package of a release says it stands for, in every target's metadata
    (wheel METADATA, conda about.json): each wheel of its platform with its sha256, and each of
    its files the release compared with something set aside, with what (the strings it set
    aside, per wheel)."""
    files = set(package.files)
    mine = [f for f in group.stamped if f.path in files]
    strings = (
        ", and in one file strings naming each wheel's Python build"
        if any(f.strings for f in mine)
        else ""
    )
    listed = "".join(f"\n- {name} (sha256 {sha})" for name, sha in group.inputs)
    text = (
        "Its files are the same in every wheel of the release (binaries but for their "
        f"{link_stamps(group.source.platform)}{strings}), which were:{listed}\n"
    )
    if mine:
        source = group.source.wheel.filename
        text += f"What differs, and was set aside (this package holds {source}'s copy):"
        for stamped in mine:
            text += f"\n- {stamped.path}: its {stamped.set_aside}"
            text += "".join(f"\n  - {s.wheel} at {s.offset:#x}: {s.text}" for s in stamped.strings)
        text += "\n"
    return text
