"""What the deb and rpm tests check of the licences the packages declare, computed here from
the plan's concluded licence of each file (splitter.plan.conclude) and what the built packages
list, never from the renderers' own code: the union an RPM's License must be, a DEP-5
copyright read as Debian's tools read it, and which stanza governs an installed file."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from splitter.model import Plan
from splitter.plan.layout import Layout, install_path
from splitter.plan.recipethird import terms


def wheel_paths(plan: Plan, layout: Layout) -> dict[str, str]:
    """Each installed absolute path of the plan's wheel files -> its wheel path."""
    root = "/" + layout.prefix.strip("/")
    return {
        f"{root}/{dest}": path
        for path in plan.owners
        if (dest := install_path(path, layout, plan.wheel.dist_info)) is not None
    }


def concluded_terms(plan: Plan, paths: Iterable[str]) -> set[str]:
    """Every licence (`X WITH Y` as one) the project's and the files' conclusions name."""
    concluded = {f.path: f.concluded for f in plan.licences}
    found = set(terms(plan.wheel.license))
    for path in paths:
        found |= set(terms(concluded[path]))
    return found


def paragraphs(text: str) -> list[dict[str, str]]:
    """A deb822 file's paragraphs: field -> value (continuation lines joined by newlines,
    their leading space kept off)."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields: dict[str, str] = {}
        name = ""
        for line in block.splitlines():
            if line.startswith((" ", "\t")):
                fields[name] += "\n" + line[1:]
            else:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
        out.append(fields)
    return out


def dep5_match(pattern: str, path: str) -> bool:
    """DEP-5's Files wildcard: `*` any characters, `/` included; `?` one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, path) is not None


def governing(stanzas: list[dict[str, str]], path: str) -> dict[str, str]:
    """The Files stanza whose License applies to `path` (relative, usr/...): the last that
    matches it (DEP-5: later paragraphs override earlier ones)."""
    matching = [s for s in stanzas if any(dep5_match(p, path) for p in s["Files"].split())]
    assert matching, path
    return matching[-1]


def short_names(plan: Plan) -> dict[str, str]:
    """Each DEP-5 short name a copyright may use -> the SPDX licence it stands for: an
    identifier, or one suffixed with the component whose text it is (or -SPDX)."""
    names = {plan.wheel.license: plan.wheel.license}
    for component in plan.recipe.third_party:
        base = component.license.replace(" WITH ", "-with-")
        names[base] = component.license
        names[f"{base}-{component.name}"] = component.license
    return names


def dep5_terms(field: str, names: dict[str, str]) -> set[str]:
    """The SPDX licences a DEP-5 License field's first line names."""
    first = field.split("\n", 1)[0]
    found = set()
    for word in re.split(r"\s*,?\s+(?:and|or)\s+|\s*,\s*", first):
        word = word.strip()
        if not word:
            continue
        spdx = names.get(word, word.removesuffix("-SPDX").replace("-with-", " WITH "))
        found.add(spdx)
    return found


def excluded_globs_cover(plan: Plan, globs: list[str]) -> tuple[list[str], list[str]]:
    """(excluded files no glob matches, shipped files a glob matches): both empty when the
    globs are exactly the excluded files (fnmatch, `*` crossing `/`, as DEP-5's)."""
    missed = [
        e.path for e in plan.excluded if not any(fnmatch.fnmatchcase(e.path, g) for g in globs)
    ]
    caught = [p for p in plan.owners if any(fnmatch.fnmatchcase(p, g) for g in globs)]
    return missed, caught
