"""The recipe's [[third_party]] tables: other projects' code the binaries may carry, each with
its licence, the upstream file its licence text was copied from (kept verbatim beside the
recipe, licenses/<name>-<file>), and the exported-symbol and path patterns that recognise it,
checked as they are read."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from splitter.licensing import Conclusion, Exclusion
from splitter.model import ThirdParty
from splitter.plan.recipetext import Source, required, strings, typed

# One SPDX licence (an identifier or a LicenseRef-, with an exception if any): a package's
# expression is computed from its components, never declared.
SPDX_ID = re.compile(
    r"(?:LicenseRef-)?[A-Za-z0-9][A-Za-z0-9.+-]*(?: WITH [A-Za-z0-9][A-Za-z0-9.+-]*)?"
)
REVISION = re.compile(r"[0-9a-f]{40}")
REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# A symbol pattern starts with a literal prefix (no wildcard first: it would claim other
# projects' symbols) and holds no white space and no character class, which fnmatch would
# read differently from nm's users.
PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*[*?]?[A-Za-z0-9_$.*?]*")
# A path pattern: a glob over wheel paths (fnmatch: * crosses /), from a literal directory.
# a package URL; without @version where the version is not known (`version` says NOASSERTION)
PURL = re.compile(r"pkg:[a-z][a-z0-9.+-]*/[^@\s]+(?:@[^\s]+)?")
PATH_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./*?-]*")
DRAFT = "DRAFT:"  # how `splitter licences draft` starts a reason, for a reviewer to replace
SCAN_NAME = "executorch.scan.json"  # the shipped recipe's licence scan, beside it
LICENSES = "licenses"  # the directory beside the recipe holding the verbatim licence texts
SHIPPED = Path(str(resources.files("splitter.recipes")))  # the shipped recipe's directory


def read_third_party(source: Source, doc: dict[str, Any]) -> tuple[ThirdParty, ...]:
    """Every [[third_party]] table, typed and checked; a problem names its line."""
    found: list[ThirdParty] = []
    claimed: dict[str, str] = {}
    for index, table in enumerate(typed(source, doc.get("third_party", []), list, "third_party")):
        where = f"third_party[{index}]"
        typed(source, table, dict, where)
        name = required(source, table, "name", str, where)
        if not name.strip() or any(t.name == name for t in found):
            raise source.error(
                f"{where}.name",
                f"a third-party component needs a name of its own: {name!r}",
                "name each component once, as its project calls itself",
            )
        licence = required(source, table, "license", str, where)
        if not valid_expression(licence):
            raise source.error(
                f"{where}.license",
                f"not an SPDX licence expression: {licence!r}",
                'write identifiers from https://spdx.org/licenses/, e.g. "Apache-2.0" or '
                '"Apache-2.0 AND MIT"',
            )
        url = required(source, table, "url", str, where)
        if not url.startswith("https://"):
            raise source.error(
                f"{where}.url", f"not an https URL: {url!r}", "give the project's upstream"
            )
        text = required(source, table, "license_text", dict, where)
        repo, path, revision = _upstream_file(source, f"{where}.license_text", text)
        local, data = _copied_text(source, f"{where}.license_text", name, text)
        notice_file, notice = "", b""
        if "notice_text" in table:
            notice_table = required(source, table, "notice_text", dict, where)
            notice_file, notice = _copied_text(source, f"{where}.notice_text", name, notice_table)
        facts = {
            key: typed(source, table.get(key, ""), str, f"{where}.{key}")
            for key in ("supplier", "version", "purl", "cpe")
        }
        if facts["purl"] and not PURL.fullmatch(facts["purl"]):
            raise source.error(
                f"{where}.purl",
                f"not a package URL: {facts['purl']!r}",
                "write pkg:<type>/<namespace>/<name>@<version>, "
                'e.g. "pkg:github/google/re2@<commit>"',
            )
        if facts["cpe"] and not facts["cpe"].startswith("cpe:2.3:"):
            raise source.error(
                f"{where}.cpe",
                f"not a CPE 2.3 name: {facts['cpe']!r}",
                "write cpe:2.3:a:<vendor>:<product>:<version>:..., or leave it out",
            )
        symbols = strings(source, table.get("symbols", []), f"{where}.symbols")
        paths = strings(source, table.get("paths", []), f"{where}.paths")
        marks = strings(source, table.get("strings", []), f"{where}.strings")
        if not symbols and not paths and not marks:
            raise source.error(
                f"{where}.symbols",
                "no symbol, string or path patterns",
                'list the globs that recognise its exported symbols, e.g. ["xnn_*"], '
                "the literal strings its code leaves in a binary, or the wheel paths that are "
                "its files",
            )
        for mark in marks:
            if len(mark) < 5 or not mark.isprintable() or not mark.isascii():
                raise source.error(
                    f"{where}.strings",
                    f"not a literal string of five or more printable ASCII characters: {mark!r}",
                    'give a build path or a typeinfo name, e.g. "third_party/darts_clone/"',
                )
        for pattern in paths:
            if not PATH_PATTERN.fullmatch(pattern):
                raise source.error(
                    f"{where}.paths",
                    f"not a path pattern (a literal directory, then globs): {pattern!r}",
                    'start with the wheel directory, e.g. "executorch/data/bin/flatc"',
                )
        for pattern in symbols:
            if not PATTERN.fullmatch(pattern):
                raise source.error(
                    f"{where}.symbols",
                    f"not a symbol pattern (a literal prefix, then * or ? globs): {pattern!r}",
                    "start with the symbol's literal prefix, e.g. _ZN5Eigen* or xnn_*",
                )
            if pattern in claimed:
                raise source.error(
                    f"{where}.symbols",
                    f"pattern {pattern!r} is already {claimed[pattern]}'s",
                    "give each pattern to one component",
                )
            claimed[pattern] = name
        found.append(
            ThirdParty(
                name=name,
                license=licence,
                url=url,
                license_repo=repo,
                license_path=path,
                license_revision=revision,
                license_file=local,
                license_text=data,
                symbols=symbols,
                paths=paths,
                strings=marks,
                notice_file=notice_file,
                notice_text=notice,
                line=source.line(where),
                **facts,
            )
        )
    return tuple(found)


def _upstream_file(source: Source, where: str, text: dict[str, Any]) -> tuple[str, str, str]:
    """A `{ repo, path, revision }` table naming a file upstream, checked."""
    repo = required(source, text, "repo", str, where)
    path = required(source, text, "path", str, where)
    revision = required(source, text, "revision", str, where)
    if not REPOSITORY.fullmatch(repo) or not path or path.startswith("/"):
        raise source.error(
            where,
            f"not a repository and a path in it: {repo!r}, {path!r}",
            'write { repo = "owner/name", path = "LICENSE", revision = ... }',
        )
    if not REVISION.fullmatch(revision):
        raise source.error(
            f"{where}.revision",
            f"not a commit: {revision!r}",
            "give the 40-hex commit the text was copied from",
        )
    extra = sorted(set(text) - {"repo", "path", "revision"})
    if extra:
        raise source.error(
            where, f"unknown key '{extra[0]}'", "the table holds repo, path and revision"
        )
    return repo, path, revision


def _copied_text(source: Source, where: str, name: str, text: dict[str, Any]) -> tuple[str, bytes]:
    """The recipe-relative name and the bytes of the verbatim copy of the upstream file the
    table `where` names: licenses/<component>-<file name>, beside the recipe (a recipe kept
    elsewhere without its own copy uses the shipped one)."""
    repo, path, revision = _upstream_file(source, where, text)
    local = f"{LICENSES}/{name}-{path.rsplit('/', 1)[-1]}"
    places = [source.path.parent / local, SHIPPED / local]
    found_at = next((p for p in places if p.is_file()), places[0])
    fix = f"copy {path} of https://github.com/{repo} at {revision} there, byte for byte"
    try:
        data = found_at.read_bytes()
    except OSError as exc:
        raise source.error(
            where, f"cannot read {name}'s copy {places[0]} ({exc.strerror or exc})", fix
        ) from exc
    if not data.strip():
        raise source.error(where, f"{name}'s copy {found_at} is empty", fix)
    return local, data


def read_conclusions(source: Source, doc: dict[str, Any]) -> tuple[Conclusion, ...]:
    """Every [[license_conclusion]]: wheel path globs, the SPDX expression a reviewer
    concluded for them and why."""
    found = []
    for index, table in enumerate(
        typed(source, doc.get("license_conclusion", []), list, "license_conclusion")
    ):
        where = f"license_conclusion[{index}]"
        typed(source, table, dict, where)
        licence = required(source, table, "license", str, where)
        if not valid_expression(licence):
            raise source.error(
                f"{where}.license",
                f"not an SPDX licence expression: {licence!r}",
                "join identifiers from https://spdx.org/licenses/ with AND, OR or WITH, e.g. "
                '"BSD-3-Clause AND Apache-2.0 WITH LLVM-exception"',
            )
        found.append(
            Conclusion(
                paths=_path_globs(source, table, where),
                license=licence,
                reason=_reason(source, table, where),
                line=source.line(where),
            )
        )
    return tuple(found)


def read_exclusions(source: Source, doc: dict[str, Any]) -> tuple[Exclusion, ...]:
    """Every [[exclude]]: wheel path globs no package ships, and why."""
    found = []
    for index, table in enumerate(typed(source, doc.get("exclude", []), list, "exclude")):
        where = f"exclude[{index}]"
        typed(source, table, dict, where)
        found.append(
            Exclusion(
                paths=_path_globs(source, table, where),
                reason=_reason(source, table, where),
                line=source.line(where),
            )
        )
    return tuple(found)


def terms(expression: str) -> list[str]:
    """The licences an SPDX expression joins (`X WITH Y` as one), in order, once each."""
    words = expression.replace("(", " ").replace(")", " ").split()
    found: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("AND", "OR"):
            index += 1
            continue
        if index + 2 < len(words) and words[index + 1] == "WITH":
            word = f"{word} WITH {words[index + 2]}"
            index += 2
        if word not in found:
            found.append(word)
        index += 1
    return found


def _path_globs(source: Source, table: dict[str, Any], where: str) -> tuple[str, ...]:
    paths = strings(source, required(source, table, "paths", object, where), f"{where}.paths")
    if not paths:
        raise source.error(f"{where}.paths", "no path patterns", "list the wheel paths it covers")
    for pattern in paths:
        if not PATH_PATTERN.fullmatch(pattern):
            raise source.error(
                f"{where}.paths",
                f"not a path pattern (a literal directory, then globs): {pattern!r}",
                'start with the wheel directory, e.g. "executorch/examples/models/llama/*"',
            )
    return paths


def _reason(source: Source, table: dict[str, Any], where: str) -> str:
    reason = required(source, table, "reason", str, where)
    if reason.startswith(DRAFT):
        raise source.error(
            f"{where}.reason",
            "a draft entry nobody has reviewed",
            "read the files it names, then replace the DRAFT reason with yours (or remove it)",
        )
    if not reason.strip():
        raise source.error(
            f"{where}.reason", "an empty reason", "say why, as a reviewer would read it"
        )
    return str(reason)


def scan_file(recipe: Path) -> Path | None:
    """The licence scan the recipe was reviewed with (splitter.input.scan): `<stem>.scan.json`
    beside it, else the shipped recipe's (its findings are keyed by content, so they hold for
    any recipe); None when neither exists."""
    places = [recipe.with_suffix(".scan.json"), SHIPPED / SCAN_NAME]
    return next((p for p in places if p.is_file()), None)


def standard_texts(recipe: Path) -> tuple[tuple[str, bytes], ...]:
    """The SPDX licence-list texts kept beside the recipe (licenses/spdx/<id>.txt; a recipe
    kept elsewhere without its own uses the shipped ones), by id."""
    for folder in (recipe.parent / LICENSES / "spdx", SHIPPED / LICENSES / "spdx"):
        if folder.is_dir():
            return tuple(
                (p.name.removesuffix(".txt"), p.read_bytes()) for p in sorted(folder.glob("*.txt"))
            )
    return ()


def valid_expression(expression: str) -> bool:
    """Whether `expression` is an SPDX licence expression: identifiers (a LicenseRef- too)
    joined by AND or OR, each with at most one WITH exception, in balanced parentheses."""
    words = expression.replace("(", " ( ").replace(")", " ) ").split()
    depth, expect_term, index = 0, True, 0
    while index < len(words):
        word = words[index]
        if word == "(" and expect_term:
            depth += 1
        elif word == ")" and not expect_term and depth > 0:
            depth -= 1
        elif word in ("AND", "OR") and not expect_term:
            expect_term = True
        elif expect_term and SPDX_ID.fullmatch(word) and word.lower() not in _OPERATORS:
            expect_term = False
            if index + 2 < len(words) and words[index + 1] == "WITH":
                if not SPDX_ID.fullmatch(words[index + 2]):
                    return False
                index += 2
        else:
            return False
        index += 1
    return bool(words) and depth == 0 and not expect_term


_OPERATORS = frozenset({"and", "or", "with"})


def satisfied(expression: str, allowed: set[str]) -> bool:
    """Whether code under the SPDX `expression` may be taken under licences of `allowed`:
    every operand of an AND, one of an OR (AND binds tighter), `X WITH Y` as one licence or
    as X. An expression that does not parse is not satisfied."""
    words = expression.replace("(", " ( ").replace(")", " ) ").split()
    at = 0

    def disjunction() -> bool:
        nonlocal at
        found = conjunction()
        while at < len(words) and words[at] == "OR":
            at += 1
            found = conjunction() or found
        return found

    def conjunction() -> bool:
        nonlocal at
        found = operand()
        while at < len(words) and words[at] == "AND":
            at += 1
            found = operand() and found
        return found

    def operand() -> bool:
        nonlocal at
        if at >= len(words):
            raise ValueError(expression)
        if words[at] == "(":
            at += 1
            found = disjunction()
            if at >= len(words) or words[at] != ")":
                raise ValueError(expression)
            at += 1
            return found
        word = words[at]
        at += 1
        if at + 1 < len(words) and words[at] == "WITH":
            word, at = f"{word} WITH {words[at + 1]}", at + 2
        return word in allowed

    try:
        found = disjunction()
    except ValueError:
        return False
    return found and at == len(words)
