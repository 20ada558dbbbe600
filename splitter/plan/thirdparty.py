"""Which third-party components each file carries, from a binary's exported symbols or the
file's path and the recipe's patterns, compiled once per plan: at most one match per symbol."""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable, Mapping

from splitter.binaries.stamps import Spans
from splitter.model import ComponentFound, ThirdParty


class Matcher:
    """The recipe's symbol patterns, compiled once; a symbol counts for the first pattern, in
    recipe order, that matches it.

    Patterns are bucketed by their first literal characters (every pattern starts with a
    literal prefix, as the recipe checks), so a symbol is tried only against the patterns that
    can match it: one dictionary look-up for most symbols, one short expression for the rest,
    rather than one expression of every pattern for every symbol."""

    def __init__(self, components: tuple[ThirdParty, ...]) -> None:
        self.keys = [(c.name, p) for c in components for p in c.symbols]
        self.order = {key: index for index, key in enumerate(self.keys)}
        literal = [len(re.split(r"[*?]", pattern, maxsplit=1)[0]) for _, pattern in self.keys]
        self.width = max(1, min(literal, default=1))
        grouped: dict[str, list[str]] = {}
        for index, (_, pattern) in enumerate(self.keys):
            grouped.setdefault(pattern[: self.width], []).append(
                f"(?P<p{index}>{_expression(pattern)})"
            )
        self.buckets = {
            key: re.compile("|".join(group), re.DOTALL).match for key, group in grouped.items()
        }

    def count(self, names: Iterable[str]) -> dict[tuple[str, str], int]:
        """(component, pattern) -> how many of `names` it matched; only those that did."""
        buckets, width = self.buckets, self.width
        hits: Counter[str] = Counter()
        if not buckets:
            return {}
        for name in names:
            match = buckets.get(name[:width])
            if match is not None:
                found = match(name)
                if found is not None:
                    hits[found.lastgroup or ""] += 1
        return {self.keys[int(group[1:])]: count for group, count in hits.items()}


def _expression(pattern: str) -> str:
    """The glob `pattern` as an expression for re.match (anchored at the start): `*` any run
    of characters, `?` one; a trailing `*` needs no scan to the end of the name."""
    body = "".join(
        ".*" if part == "*" else "." if part == "?" else re.escape(part)
        for part in re.split(r"([*?])", pattern)
        if part
    )
    return body[:-2] if body.endswith(".*") else rf"{body}\Z"


def path_hits(
    components: tuple[ThirdParty, ...], paths: Iterable[str]
) -> dict[str, dict[str, list[str]]]:
    """Wheel path -> its component -> the recipe's path patterns (fnmatch, case-sensitive:
    `*` crosses `/`) that match it; one expression for all patterns, tried once per path."""
    keys = [(c.name, p) for c in components for p in c.paths]
    if not keys:
        return {}
    any_match = re.compile("|".join(fnmatch.translate(p) for _, p in keys)).match
    hits: dict[str, dict[str, list[str]]] = {}
    for path in paths:
        if any_match(path) is None:
            continue
        claims: dict[str, list[str]] = {}
        for name, pattern in keys:
            if fnmatch.fnmatchcase(path, pattern):
                claims.setdefault(name, []).append(pattern)
        # a tree vendored inside another's (tokenizers' third-party/json) is the inner
        # component's alone: the claim of the longest pattern wins
        inner = max(claims, key=lambda name: max(len(p) for p in claims[name]))
        hits[path] = {inner: claims[inner]}
    return hits


class StringMatcher:
    """The recipe's `strings`, encoded once, each with its component."""

    def __init__(self, components: tuple[ThirdParty, ...]) -> None:
        self.marks = [(c.name, m, m.encode()) for c in components for m in c.strings]

    def hits(self, data: bytes, code: Spans = ()) -> dict[str, list[tuple[str, int]]]:
        """Component -> (literal string, occurrences) of its strings in a binary's bytes
        (code compiled in with hidden visibility leaves its build paths and typeinfo names),
        the machine code (`code`: sorted spans) passed over: strings are data, and code is
        most of a library's bytes."""
        ranges, start = [], 0
        for offset, length in code:
            if offset > start:
                ranges.append((start, offset))
            start = max(start, offset + length)
        ranges.append((start, len(data)))
        hits: dict[str, list[tuple[str, int]]] = {}
        for component, mark, needle in self.marks:
            count = sum(data.count(needle, begin, end) for begin, end in ranges)
            if count:
                hits.setdefault(component, []).append((mark, count))
        return hits


def found_in(
    matcher: Matcher,
    counts: Mapping[str, dict[tuple[str, str], int]],
    paths: Mapping[str, dict[str, list[str]]],
    owners: Mapping[str, tuple[str, int]],
    marks: Mapping[str, dict[str, list[tuple[str, int]]]] = {},
) -> tuple[ComponentFound, ...]:
    """One record per (shipped file, component) with its evidence, from each binary's
    symbol-pattern and string counts and each path's path patterns."""
    found = []
    for path in sorted((set(counts) | set(paths) | set(marks)) & set(owners)):
        by_component: dict[str, list[tuple[str, str]]] = {}
        for key in sorted(counts.get(path, {}), key=matcher.order.__getitem__):
            by_component.setdefault(key[0], []).append(key)
        by_path = paths.get(path, {})
        by_string = marks.get(path, {})
        for component in sorted(set(by_component) | set(by_path) | set(by_string)):
            found.append(
                ComponentFound(
                    component=component,
                    path=path,
                    package=owners[path][0],
                    patterns=tuple(
                        (p, counts[path][(c, p)]) for c, p in by_component.get(component, [])
                    ),
                    paths=tuple(by_path.get(component, [])),
                    strings=tuple(by_string.get(component, [])),
                )
            )
    return tuple(found)


def missing(
    components: tuple[ThirdParty, ...], found: tuple[ComponentFound, ...]
) -> tuple[str, ...]:
    """The declared components found in no file, in recipe order."""
    seen = {f.component for f in found}
    return tuple(c.name for c in components if c.name not in seen)
