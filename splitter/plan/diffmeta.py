"""The metadata half of `splitter diff`'s comparison: what a package declares beside its files
(the package itself, dependencies, CMake components, external requirements, exclusivity
verdicts), one typed MetadataChange each."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from packaging.requirements import Requirement as PipRequirement

from splitter.model import PackagePlan, Plan
from splitter.model import Verdict as Exclusive


class Meta(StrEnum):
    """What a metadata change concerns and how it changed."""

    PACKAGE_NEW = "package new"  # in the new split only
    PACKAGE_GONE = "package gone"  # in the old split only
    DEPENDS_ADDED = "depends added"  # on another package of the split
    DEPENDS_REMOVED = "depends removed"
    COMPONENT_ADDED = "component added"  # a CMake component the package provides
    COMPONENT_REMOVED = "component removed"
    REQUIRES_ADDED = "requires added"  # an external requirement, by name
    REQUIRES_REMOVED = "requires removed"
    REQUIRES_CHANGED = "requires changed"  # its pip requirement or its conda mapping
    EXCLUSIVE_STATE = "exclusive state"  # a process-exclusivity verdict: in effect, not, absent
    EXCLUSIVE_EVIDENCE = "exclusive evidence"  # the same state, on other evidence
    THIRD_PARTY_ADDED = "third party added"  # a component found in its files: review it
    THIRD_PARTY_REMOVED = "third party removed"
    LICENSE_CHANGED = "license changed"  # the package's SPDX expression


# What was built against the old package stops working without it.
BREAKING = frozenset({Meta.COMPONENT_REMOVED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """An external requirement as pip and conda spell it."""

    pip: str
    conda: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataChange:
    """One change to what a package declares beside its files."""

    kind: Meta
    # the package, the dependency, the CMake component, the requirement's name, or the
    # exclusive pair of file names ("a.so + b.so")
    subject: str
    requires: tuple[Requirement | None, Requirement | None] = (None, None)  # old, new
    in_effect: tuple[bool | None, bool | None] = (None, None)  # old, new; None: absent
    license: tuple[str, str] = ("", "")  # old, new SPDX expressions (LICENSE_CHANGED)

    @property
    def compatible(self) -> bool:
        """Whether what was built against the old package keeps working with the new."""
        return self.kind not in BREAKING


def diff_metadata(name: str, old: Plan, new: Plan) -> tuple[MetadataChange, ...]:
    """How package `name` of the old split differs from the new beside its files, in order:
    the package itself, dependencies, CMake components, third-party components, its licence,
    requirements, exclusivity."""
    mine, theirs = _package(old, name), _package(new, name)
    if mine is None or theirs is None:
        kind = Meta.PACKAGE_NEW if mine is None else Meta.PACKAGE_GONE
        return (MetadataChange(kind=kind, subject=name),)
    found: list[MetadataChange] = []
    for (added, removed), before, after in (
        (
            (Meta.DEPENDS_ADDED, Meta.DEPENDS_REMOVED),
            {d.name for d in mine.depends},
            {d.name for d in theirs.depends},
        ),
        (
            (Meta.COMPONENT_ADDED, Meta.COMPONENT_REMOVED),
            set(mine.cmake_components),
            set(theirs.cmake_components),
        ),
        (
            (Meta.THIRD_PARTY_ADDED, Meta.THIRD_PARTY_REMOVED),
            set(mine.third_party),
            set(theirs.third_party),
        ),
    ):
        found += [MetadataChange(kind=added, subject=x) for x in sorted(after - before)]
        found += [MetadataChange(kind=removed, subject=x) for x in sorted(before - after)]
    if mine.license != theirs.license:
        licences = (mine.license, theirs.license)
        found.append(MetadataChange(kind=Meta.LICENSE_CHANGED, subject=name, license=licences))
    # external requirements by name: pip's requirement and its conda mapping; those the
    # binaries need (externals) and, for a Python package, the wheel's Requires-Dist
    was = {d.name: Requirement(pip=d.pip, conda=d.conda) for d in mine.externals}
    now = {d.name: Requirement(pip=d.pip, conda=d.conda) for d in theirs.externals}
    was |= _requires_dist(old, mine)
    now |= _requires_dist(new, theirs)
    for requirement in sorted(set(was) | set(now)):
        pair = (was.get(requirement), now.get(requirement))
        if pair[0] is None:
            kind = Meta.REQUIRES_ADDED
        elif pair[1] is None:
            kind = Meta.REQUIRES_REMOVED
        elif pair[0] != pair[1]:
            kind = Meta.REQUIRES_CHANGED
        else:
            continue
        found.append(MetadataChange(kind=kind, subject=requirement, requires=pair))
    verdicts = {_pair(v): v for v in old.exclusive if mine.name in _owners(v)}
    current = {_pair(v): v for v in new.exclusive if theirs.name in _owners(v)}
    for pair_name in sorted(set(verdicts) | set(current)):
        before_verdict, after_verdict = verdicts.get(pair_name), current.get(pair_name)
        effect = (
            None if before_verdict is None else before_verdict.in_effect,
            None if after_verdict is None else after_verdict.in_effect,
        )
        if effect[0] != effect[1]:
            found.append(
                MetadataChange(kind=Meta.EXCLUSIVE_STATE, subject=pair_name, in_effect=effect)
            )
        elif (
            before_verdict is not None
            and after_verdict is not None
            and before_verdict.evidence != after_verdict.evidence
        ):
            found.append(
                MetadataChange(kind=Meta.EXCLUSIVE_EVIDENCE, subject=pair_name, in_effect=effect)
            )
    return tuple(found)


def _pair(verdict: Exclusive) -> str:
    names = (verdict.first.rsplit("/", 1)[-1], verdict.second.rsplit("/", 1)[-1])
    return " + ".join(sorted(names))


def _owners(verdict: Exclusive) -> tuple[str, str]:
    return verdict.first_package, verdict.second_package


def _package(plan: Plan, name: str) -> PackagePlan | None:
    return next((p for p in plan.packages if p.name == name), None)


def _requires_dist(plan: Plan, package: PackagePlan) -> dict[str, Requirement]:
    """A Python package's requirements from the wheel's Requires-Dist, by conda name: each as
    the wheel spells it and as the package's conda spec (conda_requires)."""
    names = dict(plan.recipe.conda_names)
    pip = {}
    for text in plan.wheel.requires_dist:
        parsed = PipRequirement(text)
        conda_name = names.get(parsed.name.lower()) or names.get(parsed.name)
        if conda_name is not None:
            pip[conda_name] = str(parsed)
    found = {}
    for spec in package.conda_requires:
        name = spec.split()[0]
        found[name] = Requirement(pip=pip.get(name, name), conda=spec)
    return found
