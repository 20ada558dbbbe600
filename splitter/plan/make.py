"""make_plan: the one computation from wheel and recipe to the split; all cross-checks start
here (process exclusivity is judged in splitter.plan.exclusive)."""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from pathlib import Path
from types import MappingProxyType

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from splitter.binaries.detect import analyse_with_exports, code_spans, is_binary
from splitter.errors import (
    BinaryError,
    OwnershipError,
    RecipeError,
    UnsupportedWheel,
)
from splitter.input.scan import gather
from splitter.input.wheel import Known, read_wheel
from splitter.model import (
    BinaryInfo,
    Dependency,
    PackagePlan,
    Plan,
    Progress,
    Recipe,
    WheelInfo,
)
from splitter.plan.conclude import check_reviewed, conclude, excluded_files, join_all
from splitter.plan.declared import HEADER_SUFFIXES, api_symbols, identifiers, undeclared
from splitter.plan.exclusive import check_verdicts_against_depends, judge_exclusive
from splitter.plan.facts import conda_requirements, decide_platform
from splitter.plan.layout import INCLUDE, LIB, check_together, regenerated
from splitter.plan.licences import UNKNOWN, held_components, licence_texts
from splitter.plan.selector import Selector
from splitter.plan.thirdparty import Matcher, StringMatcher, found_in, missing, path_hits

VERSION_FILE = "executorch/version.py"
# PEP 440 characters only: the value lands in CMake comments and package metadata verbatim.
VERSION_ASSIGNMENT = re.compile(rb"__version__\s*=\s*['\"]([A-Za-z0-9.+!_-]+)['\"]")


def make_plan(
    wheel_path: Path,
    recipe: Recipe,
    progress: Progress | None = None,
    known: Known | None = None,
    review: bool = False,
) -> Plan:
    """Read and verify the wheel, analyse its binaries and decide the split; writes nothing
    but the licence scan's cache. `known`: the members the release's earlier plans verified
    (see read_wheel). `review`: files whose licence is not settled are marked in the plan's
    licences (for the review worksheet) rather than refused."""
    binaries: list[BinaryInfo] = []
    build_version: list[str] = []
    matcher = Matcher(recipe.third_party)
    marker = StringMatcher(recipe.third_party)
    counts: dict[str, dict[tuple[str, str], int]] = {}
    marks: dict[str, dict[str, list[tuple[str, int]]]] = {}  # binary -> component strings
    api: dict[str, tuple[str, ...]] = {}  # C++ library -> its exports in ExecuTorch's namespace
    named: set[bytes] = set()  # the identifiers of every shipped header
    seen = 0

    def wants(path: str, head: bytes) -> bool:
        return is_binary(head) or path == VERSION_FILE or _is_header(path)

    def visit(path: str, data: bytes | None) -> None:
        nonlocal seen
        seen += 1
        if progress is not None and seen % 256 == 0:
            progress("verify", seen, 0)
        if data is None:
            return
        if is_binary(data):
            info, names = analyse_with_exports(path, data)
            binaries.append(info)
            hits = matcher.count(names)
            if hits:
                counts[path] = hits
            found = marker.hits(data, code_spans(path, data))
            if found:
                marks[path] = found
            if path.startswith(LIB):
                api[path] = api_symbols(names)
        elif _is_header(path):
            named.update(identifiers(data))
        elif path == VERSION_FILE:
            match = VERSION_ASSIGNMENT.search(data)
            if match:
                build_version.append(match.group(1).decode("ascii"))

    wheel = read_wheel(wheel_path, visit, wants, known)
    check_supported(wheel, recipe)
    platform = decide_platform(wheel)
    conda_requires = conda_requirements(wheel, recipe, platform)
    loadable = [b.path for b in binaries]
    # what no output ships as it is needs no scan: binaries (their evidence is their symbols
    # and strings) and the files each output writes anew (splitter.plan.layout.regenerated)
    unscanned = [
        *loadable,
        *(e.path for e in wheel.entries if regenerated(e.path, wheel.dist_info)),
    ]
    evidence = gather(wheel, unscanned, recipe.scan_file, progress)
    excluded = excluded_files(wheel, recipe.exclusions, loadable, evidence)
    owners = assign_owners(wheel, recipe, frozenset(e.path for e in excluded))
    check_together(wheel, recipe, owners)
    check_components(wheel, recipe)
    by_path = {b.path: b for b in binaries}
    provider = providers(binaries)
    closure = needed_closure(binaries, provider)
    depends, externals, system = resolve_needed(binaries, provider, owners, recipe, wheel)
    verdicts = judge_exclusive(binaries, by_path, closure, owners, recipe, wheel.platform_tag)
    check_verdicts_against_depends(verdicts, depends)

    shipped = {e.path.removeprefix(LIB) for e in wheel.entries if e.path.startswith(LIB)}
    component_libraries = tuple(
        (c.name, library)
        for c in recipe.components
        for library in c.libraries
        if library in shipped
    )
    sizes = {e.path: e.size for e in wheel.entries}
    paths = path_hits(recipe.third_party, (e.path for e in wheel.entries))
    third_party = found_in(matcher, counts, paths, owners, marks)
    licences = conclude(
        wheel, owners, recipe.third_party, recipe.conclusions, third_party, loadable, evidence
    )
    if not review:
        check_reviewed(wheel, licences)
    linkable = undeclared(api, named)
    packages = []
    for spec in recipe.packages:
        files = tuple(sorted(p for p, (pkg, _) in owners.items() if pkg == spec.name))
        lib_names = {p.removeprefix(LIB) for p in files if p.startswith(LIB)}
        components = held_components(recipe.third_party, third_party, spec.name)
        license = join_all(
            dict.fromkeys(
                [
                    wheel.license or UNKNOWN,
                    *(f.concluded for f in licences if f.package == spec.name),
                ]
            )
        )
        packages.append(
            PackagePlan(
                name=spec.name,
                version=wheel.version,
                summary=spec.summary,
                python=spec.python,
                files=files,
                bytes=sum(sizes[p] for p in files),
                depends=tuple(sorted(depends[spec.name].values(), key=lambda d: d.name)),
                externals=tuple(sorted(externals[spec.name].values(), key=lambda d: d.name)),
                system_sonames=tuple(sorted(system[spec.name])),
                cmake_components=tuple(
                    sorted(c for c, library in component_libraries if library in lib_names)
                ),
                sonames=tuple(
                    sorted(
                        b.provides for b in binaries if owners[b.path][0] == spec.name and b.soname
                    )
                ),
                conda_requires=conda_requires if spec.python else (),
                license=license,
                third_party=components,
                undeclared=tuple((p, n) for p, n in linkable if owners[p][0] == spec.name),
            )
        )
    plan = Plan(
        wheel=wheel,
        recipe=recipe,
        packages=tuple(packages),
        owners=MappingProxyType(owners),
        binaries=tuple(sorted(binaries, key=lambda b: b.path)),
        exclusive=verdicts,
        build_version=build_version[0] if build_version else wheel.version,
        platform=platform,
        component_libraries=component_libraries,
        third_party=third_party,
        third_party_missing=missing(recipe.third_party, third_party),
        licences=licences,
        excluded=excluded,
    )
    for package in plan.packages:
        licence_texts(plan, package.name)  # every licence has its text, or LicenceError
    return plan


def _is_header(path: str) -> bool:
    return path.startswith(INCLUDE) and path.endswith(HEADER_SUFFIXES)


def check_supported(wheel: WheelInfo, recipe: Recipe) -> None:
    """Refuse wheels of another project or of a version the recipe does not cover."""
    if wheel.name != recipe.project:
        raise UnsupportedWheel(
            f"wheel is not {recipe.project} (it is {wheel.name} {wheel.version}; recipe "
            f"{recipe.path.name} splits {recipe.project} {recipe.supported}): {wheel.path}"
        )
    if Version(wheel.version) not in SpecifierSet(recipe.supported):
        has_lib = any(e.path.startswith(LIB) for e in wheel.entries)
        why = (
            ""
            if has_lib
            else (
                "; it ships no C++ runtime under executorch/lib/ (the runtime is linked into the "
                "Python extension), so there is nothing to split"
            )
        )
        raise UnsupportedWheel(
            f"{recipe.project} {wheel.version} is not supported (this recipe splits "
            f"{recipe.supported}{why}): {wheel.path}; "
            f"use {recipe.project}=={recipe.default_version}, or a recipe written for "
            f"{wheel.version} with --recipe"
        )


def assign_owners(
    wheel: WheelInfo, recipe: Recipe, excluded: frozenset[str] = frozenset()
) -> dict[str, tuple[str, int]]:
    """Map every wheel path but the `excluded` ones to (package, rule index); all problems
    are raised at once. A rule that claims only excluded files still counts as used."""
    rules = tuple(rule for rule in recipe.rules if rule.applies(wheel.platform_tag))
    selector = Selector(rules)
    owners: dict[str, tuple[str, int]] = {}
    by_rule: dict[int, tuple[str, int]] = {}
    unowned: list[str] = []
    doubly: list[str] = []
    used: set[int] = set()
    for entry in wheel.entries:
        claims = selector.claims(entry.path)
        used.update(rule.index for rule in claims)
        if entry.path in excluded:
            continue
        packages = {rule.package for rule in claims}
        if not claims:
            unowned.append(entry.path)
        elif len(packages) > 1:
            names = ", ".join(f"rules[{r.index}] -> {r.package} (line {r.line})" for r in claims)
            doubly.append(f"{entry.path}: {names}")
        else:
            # one (package, rule) tuple per rule, shared by every file it claims
            owners[entry.path] = by_rule.setdefault(
                claims[0].index, (claims[0].package, claims[0].index)
            )
    if unowned or doubly:
        raise OwnershipError(unowned, doubly)
    for rule in rules:
        if rule.index not in used:
            raise RecipeError(
                f"rule matches no file of {wheel.filename} (rules[{rule.index}], glob "
                f"{list(rule.globs)}): {recipe.path}:{rule.line}\n"
                "fix the glob or remove the rule"
            )
    return owners


def check_components(wheel: WheelInfo, recipe: Recipe) -> None:
    """A component the recipe says this platform ships must have its library in the wheel."""
    names = {e.path.removeprefix(LIB) for e in wheel.entries if e.path.startswith(LIB)}
    for component in recipe.components:
        required = any(fnmatch.fnmatchcase(wheel.platform_tag, p) for p in component.platforms)
        if required and not names.intersection(component.libraries):
            raise RecipeError(
                f"component {component.name} needs {' or '.join(component.libraries)}, which "
                f"{wheel.filename} does not ship under executorch/lib/ "
                f"(components.{component.name}): {recipe.path}:{component.line}\n"
                "correct the library name or narrow its platforms"
            )


def providers(binaries: list[BinaryInfo]) -> dict[str, list[BinaryInfo]]:
    """Which shipped files answer each NEEDED name (their SONAME, else their file name)."""
    out: dict[str, list[BinaryInfo]] = defaultdict(list)
    for binary in binaries:
        out[binary.provides].append(binary)
    return out


def needed_closure(
    binaries: list[BinaryInfo], provider: dict[str, list[BinaryInfo]]
) -> dict[str, frozenset[str]]:
    """For each ELF, every shipped file its NEEDED entries load, transitively."""
    result: dict[str, frozenset[str]] = {}
    for binary in binaries:
        seen: set[str] = set()
        stack = [binary]
        while stack:
            for name in stack.pop().needed:
                for target in provider.get(name, ()):
                    if target.path not in seen:
                        seen.add(target.path)
                        stack.append(target)
        result[binary.path] = frozenset(seen - {binary.path})
    return result


def resolve_needed(
    binaries: list[BinaryInfo],
    provider: dict[str, list[BinaryInfo]],
    owners: dict[str, tuple[str, int]],
    recipe: Recipe,
    wheel: WheelInfo,
) -> tuple[dict[str, dict[str, Dependency]], dict[str, dict[str, Dependency]], dict[str, set[str]]]:
    """Turn every NEEDED into a sibling, external or system dependency; fail on the rest."""
    external_of = {s: ext for ext in recipe.externals for s in ext.sonames}
    evidence: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    ext_evidence: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    system: dict[str, set[str]] = defaultdict(set)
    unresolved: list[str] = []
    for binary in sorted(binaries, key=lambda b: b.path):
        package = owners[binary.path][0]
        for name in binary.needed:
            targets = provider.get(name)
            if targets:
                if len(targets) > 1:
                    paths = ", ".join(t.path for t in targets)
                    raise BinaryError(
                        f"NEEDED {name} of {binary.path} is ambiguous (shipped twice: {paths}): "
                        f"{wheel.filename}"
                    )
                other = owners[targets[0].path][0]
                if other != package:
                    evidence[package][other].append(f"{binary.path} NEEDS {name}")
            elif name in external_of:
                ext_evidence[package][external_of[name].name].append(f"{binary.path} NEEDS {name}")
            elif recipe.is_system(name):
                system[package].add(name)
            else:
                unresolved.append(f"{binary.path} NEEDS {name}")
    if unresolved:
        lines = "\n".join(f"  {u}" for u in unresolved)
        raise BinaryError(
            f"NEEDED entries resolve to no shipped file, external or system library "
            f"({len(unresolved)}): {wheel.filename}\n{lines}\n"
            f"map them under [externals] or [system] in {recipe.path}"
        )
    depends = {
        spec.name: {
            other: Dependency(
                name=other,
                version=wheel.version,
                conda=f"{other} =={wheel.version}",
                pip=f"{other}=={wheel.version}",
                evidence=tuple(ev),
            )
            for other, ev in evidence[spec.name].items()
        }
        for spec in recipe.packages
    }
    by_name = {e.name: e for e in recipe.externals}
    externals = {
        spec.name: {
            name: Dependency(
                name=name,
                version=None,
                conda=by_name[name].conda,
                pip=by_name[name].pip,
                evidence=tuple(ev),
            )
            for name, ev in ext_evidence[spec.name].items()
        }
        for spec in recipe.packages
    }
    return depends, externals, system
