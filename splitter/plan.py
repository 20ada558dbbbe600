"""make_plan: the one computation from wheel and recipe to the split; all cross-checks live here."""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from splitter.binaries.elf import analyse_elf, is_elf
from splitter.errors import (
    BinaryError,
    ExclusivityError,
    OwnershipError,
    RecipeError,
    UnsupportedWheel,
)
from splitter.model import (
    BinaryInfo,
    Dependency,
    PackagePlan,
    Plan,
    Recipe,
    Verdict,
    WheelInfo,
)
from splitter.selector import Selector
from splitter.wheel import Unpack, read_wheel

Progress = Callable[[str, int, int], None]
VERSION_FILE = "executorch/version.py"
# PEP 440 characters only: the value lands in CMake comments and package metadata verbatim.
VERSION_ASSIGNMENT = re.compile(rb"__version__\s*=\s*['\"]([A-Za-z0-9.+!_-]+)['\"]")


def make_plan(
    wheel_path: Path, recipe: Recipe, progress: Progress | None = None, unpack: Unpack | None = None
) -> Plan:
    """Read and verify the wheel, analyse its binaries and decide the split; with `unpack`,
    the verified files are also written there (see read_wheel)."""
    binaries: list[BinaryInfo] = []
    build_version: list[str] = []
    seen = 0

    def wants(path: str, head: bytes) -> bool:
        return is_elf(head) or path == VERSION_FILE

    def visit(path: str, data: bytes | None) -> None:
        nonlocal seen
        seen += 1
        if progress is not None and seen % 256 == 0:
            progress("verify", seen, 0)
        if data is None:
            return
        if is_elf(data):
            binaries.append(analyse_elf(path, data))
        elif path == VERSION_FILE:
            match = VERSION_ASSIGNMENT.search(data)
            if match:
                build_version.append(match.group(1).decode("ascii"))

    wheel = read_wheel(wheel_path, visit, wants, unpack)
    check_supported(wheel, recipe)
    owners = assign_owners(wheel, recipe)
    check_components(wheel, recipe)
    by_path = {b.path: b for b in binaries}
    provider = providers(binaries)
    closure = needed_closure(binaries, provider)
    depends, externals, system = resolve_needed(binaries, provider, owners, recipe, wheel)
    verdicts = judge_exclusive(binaries, by_path, closure, owners, recipe)
    check_verdicts_against_depends(verdicts, depends)

    sizes = {e.path: e.size for e in wheel.entries}
    packages = []
    for spec in recipe.packages:
        files = tuple(sorted(p for p, (pkg, _) in owners.items() if pkg == spec.name))
        lib_names = {p.rsplit("/", 1)[-1] for p in files}
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
                    sorted(
                        c.name
                        for c in recipe.components
                        if c.library in lib_names
                        and any(
                            p.endswith("/" + c.library) and p.startswith("executorch/lib/")
                            for p in files
                        )
                    )
                ),
                sonames=tuple(
                    sorted(
                        b.provides for b in binaries if owners[b.path][0] == spec.name and b.soname
                    )
                ),
            )
        )
    return Plan(
        wheel=wheel,
        recipe=recipe,
        packages=tuple(packages),
        owners=owners,
        binaries=tuple(sorted(binaries, key=lambda b: b.path)),
        exclusive=verdicts,
        build_version=build_version[0] if build_version else wheel.version,
    )


def check_supported(wheel: WheelInfo, recipe: Recipe) -> None:
    """Refuse wheels of another project or of a version the recipe does not cover."""
    if wheel.name != recipe.project:
        raise UnsupportedWheel(
            f"wheel is not {recipe.project} (it is {wheel.name} {wheel.version}; recipe "
            f"{recipe.path.name} splits {recipe.project} {recipe.supported}): {wheel.path}"
        )
    if Version(wheel.version) not in SpecifierSet(recipe.supported):
        has_lib = any(e.path.startswith("executorch/lib/") for e in wheel.entries)
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


def assign_owners(wheel: WheelInfo, recipe: Recipe) -> dict[str, tuple[str, int]]:
    """Map every wheel path to (package, rule index); all problems are raised at once."""
    selector = Selector(recipe.rules)
    owners: dict[str, tuple[str, int]] = {}
    unowned: list[str] = []
    doubly: list[str] = []
    used: set[int] = set()
    for entry in wheel.entries:
        claims = selector.claims(entry.path)
        used.update(rule.index for rule in claims)
        packages = {rule.package for rule in claims}
        if not claims:
            unowned.append(entry.path)
        elif len(packages) > 1:
            names = ", ".join(f"rules[{r.index}] -> {r.package} (line {r.line})" for r in claims)
            doubly.append(f"{entry.path}: {names}")
        else:
            owners[entry.path] = (claims[0].package, claims[0].index)
    if unowned or doubly:
        raise OwnershipError(unowned, doubly)
    for rule in recipe.rules:
        if rule.index not in used:
            raise RecipeError(
                f"rule matches no file of {wheel.filename} (rules[{rule.index}], glob "
                f"{list(rule.globs)}): {recipe.path}:{rule.line}\n"
                "fix the glob or remove the rule"
            )
    return owners


def check_components(wheel: WheelInfo, recipe: Recipe) -> None:
    """A component the recipe says this platform ships must have its library in the wheel."""
    names = {
        e.path.rsplit("/", 1)[-1] for e in wheel.entries if e.path.startswith("executorch/lib/")
    }
    for component in recipe.components:
        required = any(fnmatch.fnmatchcase(wheel.platform_tag, p) for p in component.platforms)
        if required and component.library not in names:
            raise RecipeError(
                f"component {component.name} needs {component.library}, which "
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
            elif name in recipe.system_sonames:
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
                version="",
                conda=by_name[name].conda,
                pip=by_name[name].pip,
                evidence=tuple(ev),
            )
            for name, ev in ext_evidence[spec.name].items()
        }
        for spec in recipe.packages
    }
    return depends, externals, system


def judge_exclusive(
    binaries: list[BinaryInfo],
    by_path: dict[str, BinaryInfo],
    closure: dict[str, frozenset[str]],
    owners: dict[str, tuple[str, int]],
    recipe: Recipe,
) -> tuple[Verdict, ...]:
    """Decide every declared pair from the binaries, and refuse undeclared collisions."""
    declared = {frozenset((p.first, p.second)): p for p in recipe.exclusive}
    verdicts: list[Verdict] = []
    for pair in recipe.exclusive:
        for path in (pair.first, pair.second):
            if path not in by_path:
                raise RecipeError(
                    f"process_exclusive names a file that is not a shipped ELF ({path}): "
                    f"{recipe.path}:{pair.line}\ncorrect the path"
                )
        verdicts.append(_verdict(by_path[pair.first], by_path[pair.second], closure, owners, True))
    registering = [b for b in binaries if b.et_operators]
    undeclared = []
    for i, first in enumerate(registering):
        for second in registering[i + 1 :]:
            common = set(first.et_operators) & set(second.et_operators)
            if not common or frozenset((first.path, second.path)) in declared:
                continue
            verdict = _verdict(first, second, closure, owners, False)
            if verdict.in_effect:
                undeclared.append(verdict)
    if undeclared:
        lines = "\n".join(
            f"  {v.first} and {v.second}: both register {len(v.operators)} operators, "
            f"e.g. {v.operators[0]}"
            for v in undeclared
        )
        raise ExclusivityError(
            f"files register the same ExecuTorch operators without one loading the other, "
            f"so a process holding both aborts ('Re-registering'):\n{lines}\n"
            f"declare each pair under [[process_exclusive]] in {recipe.path}"
        )
    return tuple(verdicts)


def _verdict(
    first: BinaryInfo,
    second: BinaryInfo,
    closure: dict[str, frozenset[str]],
    owners: dict[str, tuple[str, int]],
    declared: bool,
) -> Verdict:
    common = tuple(sorted(set(first.et_operators) & set(second.et_operators)))
    evidence = [
        f"{first.path} registers {len(first.et_operators)} ExecuTorch kernels"
        + (f" ({first.registry} registry)" if first.registry else " (no registry use)"),
        f"{second.path} registers {len(second.et_operators)} ExecuTorch kernels"
        + (f" ({second.registry} registry)" if second.registry else " (no registry use)"),
    ]
    first_loads = second.path in closure[first.path]
    second_loads = first.path in closure[second.path]
    if first_loads:
        evidence.append(f"{first.path} NEEDS {second.provides}: both share one copy")
    if second_loads:
        evidence.append(f"{second.path} NEEDS {first.provides}: both share one copy")
    if common and (first_loads or second_loads):
        raise ExclusivityError(
            f"{first.path} and {second.path} both register {common[0]} and one loads the other, "
            "so loading either aborts the process; the wheel itself is broken"
        )
    if common:
        evidence.append(
            f"both register {len(common)} operators into an ExecuTorch registry and neither "
            f"loads the other: one process holding both aborts with 'Re-registering {common[0]}'"
        )
    elif not (first_loads or second_loads):
        evidence.append("they register no operator in common")
    return Verdict(
        first=first.path,
        first_package=owners[first.path][0],
        second=second.path,
        second_package=owners[second.path][0],
        declared=declared,
        in_effect=bool(common),
        operators=common,
        evidence=tuple(evidence),
    )


def check_verdicts_against_depends(
    verdicts: tuple[Verdict, ...], depends: dict[str, dict[str, Dependency]]
) -> None:
    """Process-exclusive files must not sit in packages where one depends on the other."""
    for verdict in verdicts:
        a, b = verdict.first_package, verdict.second_package
        if verdict.in_effect and a != b and (b in depends[a] or a in depends[b]):
            raise ExclusivityError(
                f"{verdict.first} ({a}) and {verdict.second} ({b}) must not share a process, "
                f"but one package depends on the other, so installing it brings both"
            )
