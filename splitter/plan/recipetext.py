"""The recipe as text, before its values are typed: TOML syntax errors reported with their line
whichever Python's tomllib reports them, every key checked against the tables the recipe may
hold, and key paths turned into line numbers for messages."""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from splitter.errors import RecipeError

_HEADER = re.compile(r"^\[\[?[^\[\]]+\]\]?\s*(#.*)?$")


class Source:
    """The recipe text, to turn a key path into a line number for messages."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        # each table header (comment stripped) -> its 0-based lines, in order: every rule,
        # component and third-party entry records its line, so a load looks up dozens
        self._headers: dict[str, list[int]] = {}
        for number, line in enumerate(self.lines):
            stripped = line.split("#", 1)[0].strip()
            if stripped.startswith("["):
                self._headers.setdefault(stripped, []).append(number)

    def line(self, key_path: str) -> int:
        """Best line for `key_path` such as `rules[2].package` or `components.runtime`."""
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", key_path)
        header, rest = None, parts
        if len(parts) > 1 and parts[1].startswith("["):
            header, rest = self._header(f"[[{parts[0]}]]", int(parts[1][1:-1])), parts[2:]
        else:
            for cut in range(len(parts), 0, -1):
                header = self._header(f"[{'.'.join(parts[:cut])}]", 0)
                if header is not None:
                    rest = parts[cut:]
                    break
        begin = 0 if header is None else header + 1
        if rest:
            # Stop at the next header: a key missing here must not match a later table's.
            leaf = re.compile(rf'^"?{re.escape(rest[0])}"?\s*=')
            for number in range(begin, len(self.lines)):
                stripped = self.lines[number].strip()
                if _HEADER.match(stripped):
                    break
                if leaf.match(stripped):
                    return number + 1
        return max(begin, 1)

    def _header(self, header: str, nth: int) -> int | None:
        """0-based line of the `nth` occurrence of the table header `header`."""
        found = self._headers.get(header, [])
        return found[nth] if nth < len(found) else None

    def error(self, key_path: str, problem: str, fix: str = "") -> RecipeError:
        """A RecipeError naming the file, line and key."""
        message = f"{problem} (recipe key {key_path}): {self.path}:{self.line(key_path)}"
        return RecipeError(f"{message}\n{fix}" if fix else message)


def required(source: Source, table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """`table[key]`, which must be there and be a `kind`; `where` is the table's key path."""
    if key not in table:
        raise source.error(f"{where}.{key}".lstrip("."), f"missing required key '{key}'")
    return typed(source, table[key], kind, f"{where}.{key}".lstrip("."))


def typed(source: Source, value: Any, kind: type, where: str) -> Any:
    """`value`, which must be a `kind` (a bool is not an int); `where` names it."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise source.error(where, f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def strings(source: Source, value: Any, where: str) -> tuple[str, ...]:
    """A string or a list of strings, as a tuple."""
    if isinstance(value, str):
        return (value,)
    items = typed(source, value, list, where)
    for index, item in enumerate(items):
        typed(source, item, str, f"{where}[{index}]")
    return tuple(items)


# The keys each table of a recipe may hold, by shape: "table" is one table, "each" a table of
# named tables, "array" an array of tables. system.conda, conda.names and
# the names and system maps of deb and rpm are free-form maps.
_KEYS: dict[str, tuple[str, frozenset[str]]] = {
    "recipe": ("table", frozenset({"project", "schema", "default_version", "supported_versions"})),
    "packages": ("each", frozenset({"summary", "python"})),
    "rules": ("array", frozenset({"glob", "exclude", "package", "reason", "platforms"})),
    "components": ("each", frozenset({"library", "platforms"})),
    "externals": ("each", frozenset({"sonames", "site_dirs", "conda", "pip", "deb", "rpm"})),
    "system": ("table", frozenset({"sonames", "paths", "conda"})),
    "conda": ("table", frozenset({"names"})),
    "deb": ("table", frozenset({"revision", "maintainer", "names", "dev_names", "system"})),
    "rpm": ("table", frozenset({"release", "maintainer", "names", "dev_names", "system"})),
    "process_exclusive": ("array", frozenset({"first", "second", "reason", "platforms"})),
    "together": ("array", frozenset({"files", "reason", "platforms"})),
    "headers_not_alone": ("array", frozenset({"header", "reason"})),
    "third_party": (
        "array",
        frozenset(
            {
                "name",
                "license",
                "url",
                "license_text",
                "notice_text",
                "symbols",
                "paths",
                "strings",
                "supplier",
                "version",
                "purl",
                "cpe",
            }
        ),
    ),
    "license_conclusion": ("array", frozenset({"paths", "license", "reason"})),
    "exclude": ("array", frozenset({"paths", "reason"})),
}


def check_keys(source: Source, doc: dict[str, Any]) -> None:
    """Refuse keys no table of the recipe knows (a typo would silently drop a rule's intent).

    Every unknown key of the file is named, in file order, in one RecipeError."""
    unknown = [
        (key, key, value, frozenset(_KEYS)) for key, value in doc.items() if key not in _KEYS
    ]
    for name, (shape, known) in _KEYS.items():
        value = doc.get(name)
        if shape == "each" and isinstance(value, dict):
            tables = [(f"{name}.{k}", v) for k, v in value.items()]
        elif shape == "array" and isinstance(value, list):
            tables = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        else:
            tables = [(name, value)] if shape == "table" else []
        for where, table in tables:
            if isinstance(table, dict):
                unknown += [
                    (f"{where}.{k}", k, v, known) for k, v in table.items() if k not in known
                ]
    problems = []
    for key_path, key, value, known in sorted(unknown, key=lambda item: source.line(item[0])):
        is_table = isinstance(value, dict) or (
            isinstance(value, list) and value != [] and isinstance(value[0], dict)
        )
        close = difflib.get_close_matches(key, known, n=1)
        fix = f"did you mean `{close[0]}`?" if close else f"remove it or use one of {sorted(known)}"
        what = f"unknown {'table' if is_table else 'key'} '{key}'"
        problems.append(str(source.error(key_path, what, fix)))
    if problems:
        raise RecipeError("\n".join(problems))


_ASSIGNMENT = re.compile(r"""^(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_.-]+))\s*=""")
# tomllib's messages end with where it stopped: "(at line 3, column 7)" or "(at end of document)"
_LOCATION = re.compile(r" \(at (?:line (\d+), column \d+|end of document)\)$")


def not_toml(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> RecipeError:
    """One RecipeError for text tomllib refuses, naming the line.

    A key assigned twice in one table is found by a scan of its own: tomllib reports it where
    it stopped reading ("Cannot overwrite a value"), without the key, so the message names
    the key, its table and the line of the second assignment instead."""
    repeated = _repeated_key(text.splitlines())
    if repeated is not None:
        key, table, line = repeated
        return RecipeError(
            f'recipe is not valid TOML (key "{key}" is set twice in {table}): {path}:{line}\n'
            "Keep one of the two assignments."
        )
    message = str(exc)
    found = _LOCATION.search(message)
    last = max(len(text.splitlines()), 1)  # "end of document"
    where = "" if found is None else f":{found.group(1) or last}"
    return RecipeError(f"recipe is not valid TOML ({_LOCATION.sub('', message)}): {path}{where}")


def _repeated_key(lines: list[str]) -> tuple[str, str, int] | None:
    """The first key assigned twice under one table header: (key, table, 1-based line)."""
    seen: set[tuple[int, str]] = set()
    table, table_line = "the top level", 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if _HEADER.match(stripped):
            # Each [[array]] header opens a new table, so tables are told apart by their line.
            table, table_line = stripped.split("#", 1)[0].strip(), number
            continue
        match = _ASSIGNMENT.match(stripped)
        if match is None:
            continue
        key = next(group for group in match.groups() if group is not None)
        if (table_line, key) in seen:
            return key, table, number
        seen.add((table_line, key))
    return None
