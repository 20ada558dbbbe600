"""Process exclusivity, decided from the binaries: a declared pair of files is in effect when
both register the same ExecuTorch operators and neither loads the other (a process holding
both aborts with 'Re-registering'), and not in effect when one links the other; an undeclared
colliding pair is an error. Part of make_plan."""

from __future__ import annotations

from dataclasses import replace

from splitter.errors import ExclusivityError, RecipeError
from splitter.model import BinaryInfo, Dependency, Recipe, Verdict, matches_platform


def judge_exclusive(
    binaries: list[BinaryInfo],
    by_path: dict[str, BinaryInfo],
    closure: dict[str, frozenset[str]],
    owners: dict[str, tuple[str, int]],
    recipe: Recipe,
    platform_tag: str,
) -> tuple[Verdict, ...]:
    """Decide every declared pair of this platform from the binaries, and refuse undeclared
    collisions; each verdict also names the files whose operators could not be seen."""
    pairs = [p for p in recipe.exclusive if matches_platform(p.platforms, platform_tag)]
    declared = {frozenset((p.first, p.second)): p for p in pairs}
    unseen = tuple(b.path for b in binaries if not b.operators_known)
    verdicts: list[Verdict] = []
    for pair in pairs:
        for path in (pair.first, pair.second):
            if path not in by_path:
                raise RecipeError(
                    f"process_exclusive names a file that is not a shipped ELF ({path}): "
                    f"{recipe.path}:{pair.line}\ncorrect the path"
                )
        verdict = _verdict(by_path[pair.first], by_path[pair.second], closure, owners, True)
        verdicts.append(_with_unseen(verdict, unseen))
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


def _with_unseen(verdict: Verdict, unseen: tuple[str, ...]) -> Verdict:
    """The verdict with what it could not see: files that register kernels from initializer
    code, whose operators no static reading can compare (unknown, not zero)."""
    if not unseen:
        return verdict
    evidence = [unseen_text(path) for path in unseen]
    return replace(verdict, evidence=(*verdict.evidence, *evidence))


def _verdict(
    first: BinaryInfo,
    second: BinaryInfo,
    closure: dict[str, frozenset[str]],
    owners: dict[str, tuple[str, int]],
    declared: bool,
) -> Verdict:
    common = tuple(sorted(set(first.et_operators) & set(second.et_operators)))
    evidence = [registers_text(first), registers_text(second)]
    first_loads = second.path in closure[first.path]
    second_loads = first.path in closure[second.path]
    if first_loads:
        evidence.append(needs_text(first, second))
    if second_loads:
        evidence.append(needs_text(second, first))
    if common and (first_loads or second_loads):
        raise ExclusivityError(
            f"{first.path} and {second.path} both register {common[0]} and one loads the other, "
            "so loading either aborts the process; the wheel itself is broken"
        )
    if common:
        evidence.append(collision_text(common))
    elif not (first_loads or second_loads):
        evidence.append(no_common_text())
    return Verdict(
        first=first.path,
        first_package=owners[first.path][0],
        second=second.path,
        second_package=owners[second.path][0],
        declared=declared,
        in_effect=bool(common),
        operators=common,
        first_operators=operator_count(first),
        second_operators=operator_count(second),
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


def operator_count(binary: BinaryInfo) -> int | None:
    """How many operators a file registers in static tables; None when it also registers
    from initializer code (unknown, not zero)."""
    return len(binary.et_operators) if binary.operators_known else None


# The evidence, for people: every decision reads the verdict's fields, never these sentences.


def registers_text(binary: BinaryInfo) -> str:
    """What a file of a pair registers, and into which registry."""
    count = operator_count(binary)
    number = (
        f"an unknown number of (at least {len(binary.et_operators)})" if count is None else count
    )
    registry = f"{binary.registry} registry" if binary.registry else "no registry use"
    return f"{binary.path} registers {number} ExecuTorch kernels ({registry})"


def needs_text(binary: BinaryInfo, needed: BinaryInfo) -> str:
    """That one file of a pair loads the other."""
    return f"{binary.path} NEEDS {needed.provides}: both share one copy"


def collision_text(common: tuple[str, ...]) -> str:
    """That the pair registers the same operators and neither loads the other."""
    return (
        f"both register {len(common)} operators into an ExecuTorch registry and neither "
        f"loads the other: one process holding both aborts with 'Re-registering {common[0]}'"
    )


def no_common_text() -> str:
    """That the pair registers no operator in common."""
    return "they register no operator in common"


def unseen_text(path: str) -> str:
    """That a file's operators cannot be counted statically."""
    return (
        f"{path} registers ExecuTorch kernels from initializer code: its operators cannot be "
        "counted statically, so a collision with it is neither shown nor ruled out"
    )
