"""Ownership rules as a pure selector: which rules claim a wheel path."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from splitter.model import Rule


@cache
def compile_glob(glob: str) -> re.Pattern[str]:
    """Translate a path glob: `**` crosses `/`, `*` and `?` stay inside one segment."""
    out, index = [], 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif glob.startswith("**", index):
            out.append(".*")
            index += 2
        elif glob[index] == "*":
            out.append("[^/]*")
            index += 1
        elif glob[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(glob[index]))
            index += 1
    return re.compile("".join(out))


Match = Callable[[str], object]  # a compiled pattern's fullmatch


@dataclass(frozen=True, slots=True)
class Selector:
    """Matches paths against every rule; rules never shadow each other."""

    rules: tuple[Rule, ...]
    # Each rule with its globs' and excludes' matchers, looked up once: claims runs for every
    # path of a wheel against every rule, and a cached look-up hashes the whole rule.
    _matching: tuple[tuple[Rule, Match, Match], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        matching = tuple(
            (rule, globs.fullmatch, excludes.fullmatch)
            for rule in self.rules
            for globs, excludes in [_matchers(rule)]
        )
        object.__setattr__(self, "_matching", matching)

    def claims(self, path: str) -> tuple[Rule, ...]:
        """Every rule whose globs match `path` and whose excludes do not."""
        return tuple(
            rule
            for rule, globs, excludes in self._matching
            if globs(path) is not None and excludes(path) is None
        )


@cache
def _matchers(rule: Rule) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A rule's globs, and its excludes, as one pattern each: one regex match per path and
    rule instead of one per glob, with the same claims as matching the globs one by one."""

    def union(globs: tuple[str, ...]) -> re.Pattern[str]:
        if not globs:
            return re.compile(r"(?!)")  # matches nothing
        return re.compile("|".join(f"(?:{compile_glob(g).pattern})" for g in globs))

    return union(rule.globs), union(rule.exclude)
