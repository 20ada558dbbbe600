"""Every shipped file's concluded licence, with its evidence, and the hard rule: a licence the
scanner finds in a file that nothing reviewed covers stops the plan.

A file's licence is concluded, in this order, by
1. the recipe's [[license_conclusion]] whose paths match it (a reviewer's decision, with a
   reason: a notice that mentions another licence, a file copied from elsewhere);
2. the [[third_party]] components found in it: a file claimed by a component's `paths` (a
   vendored tree, a copied header) is that component's code alone; a binary is the project's
   code with every component linked into it (symbols, strings or paths);
3. else the project's own licence (the wheel's License-Expression).
The scanner's findings for the file (splitter.input.scan) must then be covered: every licence
they name is one of the concluded expression's."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping

from splitter.errors import LicenceError
from splitter.licensing import Conclusion, Evidence, ExcludedFile, Exclusion, FileLicence
from splitter.model import ComponentFound, ThirdParty, WheelInfo
from splitter.plan.layout import regenerated
from splitter.plan.licences import UNKNOWN
from splitter.plan.recipethird import satisfied, terms


def excluded_files(
    wheel: WheelInfo,
    exclusions: tuple[Exclusion, ...],
    binaries: Iterable[str],
    evidence: Mapping[str, Evidence],
) -> tuple[ExcludedFile, ...]:
    """The wheel's files the recipe's [[exclude]] drops, each with its reason (the first
    exclusion that matches). A binary is never dropped: another file may load it."""
    if not exclusions:
        return ()
    first = first_match([e.paths for e in exclusions])
    loadable = set(binaries)
    found, refused = [], []
    for entry in wheel.entries:
        index = first(entry.path)
        if index is None:
            continue
        rule = exclusions[index]
        if entry.path in loadable:
            refused.append(f"  {entry.path} (exclude at line {rule.line})")
            continue
        detected = evidence[entry.sha256].licenses if entry.sha256 in evidence else ()
        found.append(ExcludedFile(path=entry.path, reason=rule.reason, detected=detected))
    if refused:
        raise LicenceError(
            "the recipe excludes binaries (a library or plugin another file may load is "
            f"shipped, never dropped): {wheel.path}\n" + "\n".join(refused) + "\n"
            "narrow the [[exclude]] paths to the scripts, tests and data no package needs"
        )
    return tuple(found)


def conclude(
    wheel: WheelInfo,
    owners: Mapping[str, tuple[str, int]],
    components: tuple[ThirdParty, ...],
    conclusions: tuple[Conclusion, ...],
    found: Iterable[ComponentFound],
    binaries: Iterable[str],
    evidence: Mapping[str, Evidence],
) -> tuple[FileLicence, ...]:
    """Each shipped file's licence with its basis and evidence, sorted by path; every file
    whose findings the conclusion does not cover is named in one LicenceError."""
    project = wheel.license or UNKNOWN
    licence_of = {c.name: c.license for c in components}
    order = {c.name: index for index, c in enumerate(components)}
    linked: dict[str, list[str]] = {}
    vendored: dict[str, str] = {}  # a file -> the component whose path claims it
    for each in found:
        if each.paths:
            vendored[each.path] = each.component
        if each.patterns or each.strings:
            linked.setdefault(each.path, []).append(each.component)
    first = first_match([c.paths for c in conclusions])
    loadable = set(binaries)
    sha = {e.path: e.sha256 for e in wheel.entries}
    covers: dict[tuple[str, str], bool] = {}  # (finding, conclusion) -> satisfied
    concluded = []
    for path in sorted(owners):
        index = first(path)
        rule = None if index is None else (index, conclusions[index])
        claimed = [vendored[path]] if path in vendored else []
        names = sorted({*claimed, *linked.get(path, ())}, key=order.__getitem__)
        if regenerated(path, wheel.dist_info):
            expression, basis = project, "regenerated"  # no output ships it as it is
        elif rule is not None:
            expression, basis = rule[1].license, f"conclusion:{rule[0]}"
        elif names and (path in loadable or path not in vendored):
            expression = join_all([project, *(licence_of[n] for n in names)])
            basis = ",".join(f"component:{n}" for n in names)
        elif names:
            expression = join_all([licence_of[n] for n in names])
            basis = ",".join(f"component:{n}" for n in names)
        else:
            expression, basis = project, "project"
        scanned = evidence.get(sha[path])
        detected = scanned.licenses if scanned is not None else ()
        copyrights = scanned.copyrights if scanned is not None else ()
        for finding in detected:
            if (finding, expression) not in covers:
                covers[finding, expression] = satisfied(finding, _allowed(expression))
        concluded.append(
            FileLicence(
                path=path,
                package=owners[path][0],
                concluded=expression,
                detected=detected,
                copyrights=copyrights,
                basis=basis,
                # a reviewer's conclusion settles the file whatever the scanner read in it
                covered=rule is not None or all(covers[d, expression] for d in detected),
            )
        )
    return tuple(concluded)


def _allowed(expression: str) -> set[str]:
    """The licences code concluded under `expression` may be taken under: each of its
    licences, and a licence with an exception also as the licence alone (an exception only
    grants more: a scanner that names Apache-2.0 where the notice adds LLVM's)."""
    return {part for t in terms(expression) for part in (t, t.split(" WITH ")[0])}


def check_reviewed(wheel: WheelInfo, licences: Iterable[FileLicence]) -> None:
    """The hard rule: every shipped file's findings are covered by its concluded licence;
    every file that is not is named in one LicenceError, with the two fixes."""
    files = [f for f in licences if not f.covered]
    if not files:
        return
    lines = [
        f"{len(files)} shipped files carry a licence no reviewed entry of the recipe covers "
        f"(the scanner's finding is not in the file's concluded licence): {wheel.path}"
    ]
    for each in files[:40]:
        lines.append(
            f"  {each.path} ({each.package}): detected {' ; '.join(each.detected)}; "
            f"concluded {each.concluded} from {each.basis}"
        )
    if len(files) > 40:
        lines.append(f"  ... and {len(files) - 40} more (`splitter licences worksheet` lists all)")
    lines.append(
        "conclude each in the recipe ([[license_conclusion]] with paths, license and reason, or "
        "a [[third_party]] component whose paths claim it), or drop it from every package "
        "([[exclude]] with paths and reason); `splitter licences worksheet --draft` writes "
        "draft entries"
    )
    raise LicenceError("\n".join(lines))


def join_all(expressions: Iterable[str]) -> str:
    """One SPDX expression for code under all of `expressions`: their AND operands, each
    once, the first expression's first, then sorted; an OR operand in parentheses."""
    operands: list[str] = []
    for expression in expressions:
        for operand in _and_operands(expression):
            if operand not in operands:
                operands.append(operand)
    if not operands:
        return UNKNOWN
    head, rest = operands[0], sorted(operands[1:])
    ordered = [head, *rest]
    if len(ordered) == 1:
        return _bare(ordered[0])
    return " AND ".join(f"({o})" if " OR " in _bare(o) else _bare(o) for o in ordered)


def _bare(operand: str) -> str:
    """An operand without the parentheses that only wrap it whole."""
    while operand.startswith("(") and operand.endswith(")") and _balanced(operand[1:-1]):
        operand = operand[1:-1].strip()
    return operand


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _and_operands(expression: str) -> list[str]:
    """The top-level AND operands of an SPDX expression."""
    parts, depth = [], 0
    words = re.split(r"(\(|\)|\s+)", expression)
    text = ""
    for word in words:
        if word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        if word == "AND" and depth == 0:
            parts.append(text.strip())
            text = ""
            continue
        text += word
    parts.append(text.strip())
    return [_bare(p) for p in parts if p]


def first_match(rules: list[tuple[str, ...]]) -> Callable[[str], int | None]:
    """A test of a wheel path against each rule's globs (fnmatch: `*` crosses `/`) in turn:
    the index of the first rule one of whose globs matches it, or None. A glob without a
    wildcard is the path itself, looked up; the few real globs are compiled into one
    expression, one named group per rule, which tries the rules in order."""
    literal: dict[str, int] = {}
    groups = []
    for index, globs in enumerate(rules):
        wild = [g for g in globs if any(c in g for c in "*?[")]
        for glob in globs:
            if glob not in wild:
                literal.setdefault(glob, index)
        if wild:
            body = "|".join(fnmatch.translate(g) for g in wild)
            groups.append(f"(?P<r{index}>{body})")
    pattern = re.compile("|".join(groups)).match if groups else None

    def first(path: str) -> int | None:
        found = literal.get(path)
        matched = pattern(path) if pattern is not None else None
        if matched is None:
            return found
        index = min(
            int(k[1:]) for k, v in matched.groupdict().items() if k[0] == "r" and v is not None
        )
        return index if found is None else min(found, index)

    return first
