"""Load a recipe TOML (tomlkit) into typed, validated records; errors name the key and line."""

from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path
from typing import Any

import tomlkit
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from tomlkit.exceptions import ParseError, TOMLKitError

from splitter.errors import RecipeError
from splitter.model import Component, ExclusivePair, External, PackageSpec, Recipe, Rule

DEFAULT_RECIPE = "executorch.toml"
SCHEMAS = (1,)  # the `[recipe] schema` versions this loader reads
_HEADER = re.compile(r"^\[\[?[^\[\]]+\]\]?\s*(#.*)?$")


def default_recipe_path() -> Path:
    """The recipe shipped with splitter (the repo's `recipes/executorch.toml`)."""
    return Path(str(resources.files("splitter.recipes").joinpath(DEFAULT_RECIPE)))


class _Source:
    """The recipe text, to turn a key path into a line number for messages."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

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
        seen = -1
        for number, text in enumerate(self.lines):
            if text.split("#", 1)[0].strip() == header:
                seen += 1
                if seen == nth:
                    return number
        return None

    def error(self, key_path: str, problem: str, fix: str = "") -> RecipeError:
        """A RecipeError naming the file, line and key."""
        message = f"{problem} (recipe key {key_path}): {self.path}:{self.line(key_path)}"
        return RecipeError(f"{message}\n{fix}" if fix else message)


def load_recipe(path: Path | None = None) -> Recipe:
    """Read and validate the recipe at `path` (default: the shipped one); no schema reads as 1."""
    path = path or default_recipe_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"cannot read recipe ({exc.strerror or exc}): {path}") from exc
    except UnicodeDecodeError as exc:
        raise RecipeError(f"recipe is not UTF-8 ({exc.reason}): {path}") from exc
    try:
        document = tomlkit.parse(text).unwrap()
    except TOMLKitError as exc:
        raise _not_toml(path, text, exc) from exc
    source = _Source(path, text)
    _check_schema(source, document)
    _check_keys(source, document)
    return _build(source, document)


def _check_schema(source: _Source, doc: dict[str, Any]) -> None:
    """Refuse a `[recipe] schema` this loader does not read; a missing one reads as 1.

    Recipes written before the key existed are schema 1. This runs before the key check: a newer
    recipe's new keys would otherwise be reported as typos rather than as a newer schema."""
    head = doc.get("recipe")
    if not isinstance(head, dict) or "schema" not in head:
        return
    schema = _typed(source, head["schema"], int, "recipe.schema")
    if schema not in SCHEMAS:
        raise source.error(
            "recipe.schema",
            f"recipe schema {schema} is not one this splitter reads",
            f"this splitter reads recipe schema {', '.join(map(str, SCHEMAS))}; "
            "upgrade splitter or rewrite the recipe for that schema",
        )


# The keys each table of a recipe may hold, by shape: "table" is one table, "each" a table of
# named tables, "array" an array of tables. system.conda and conda.names are free-form maps.
_KEYS: dict[str, tuple[str, frozenset[str]]] = {
    "recipe": ("table", frozenset({"project", "schema", "default_version", "supported_versions"})),
    "packages": ("each", frozenset({"summary", "python"})),
    "rules": ("array", frozenset({"glob", "exclude", "package", "reason"})),
    "components": ("each", frozenset({"library", "platforms"})),
    "externals": ("each", frozenset({"sonames", "site_dirs", "conda", "pip"})),
    "system": ("table", frozenset({"sonames", "conda"})),
    "conda": ("table", frozenset({"names"})),
    "process_exclusive": ("array", frozenset({"first", "second", "reason"})),
}


def _check_keys(source: _Source, doc: dict[str, Any]) -> None:
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
_LOCATION = re.compile(r" at line \d+ col \d+$")


def _not_toml(path: Path, text: str, exc: TOMLKitError) -> RecipeError:
    """One RecipeError for text tomlkit refuses, however tomlkit reports it.

    A key assigned twice in one table is reported differently by tomlkit releases (0.15.2 raises
    KeyAlreadyPresent with no line, 0.15.3 a ParseError whose line is past the key), so it is
    found by a scan of its own: the message names the key, its table and the line of the second
    assignment whichever release is installed."""
    repeated = _repeated_key(text.splitlines())
    if repeated is not None:
        key, table, line = repeated
        return RecipeError(
            f'recipe is not valid TOML (key "{key}" is set twice in {table}): {path}:{line}\n'
            "Keep one of the two assignments."
        )
    where = f":{exc.line}" if isinstance(exc, ParseError) else ""
    return RecipeError(f"recipe is not valid TOML ({_LOCATION.sub('', str(exc))}): {path}{where}")


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


def _get(source: _Source, table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        raise source.error(f"{where}.{key}".lstrip("."), f"missing required key '{key}'")
    return _typed(source, table[key], kind, f"{where}.{key}".lstrip("."))


def _typed(source: _Source, value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise source.error(where, f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(source: _Source, value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    items = _typed(source, value, list, where)
    for index, item in enumerate(items):
        _typed(source, item, str, f"{where}[{index}]")
    return tuple(items)


def _build(source: _Source, doc: dict[str, Any]) -> Recipe:
    head = _get(source, doc, "recipe", dict, "")
    project = _get(source, head, "project", str, "recipe")
    default_version = _get(source, head, "default_version", str, "recipe")
    supported = _get(source, head, "supported_versions", str, "recipe")
    try:
        specifier = SpecifierSet(supported)
    except InvalidSpecifier as exc:
        raise source.error("recipe.supported_versions", f"not a version specifier ({exc})") from exc
    try:
        if Version(default_version) not in specifier:
            raise source.error(
                "recipe.default_version",
                f"{default_version} is outside supported_versions {supported}",
            )
    except InvalidVersion as exc:
        raise source.error("recipe.default_version", f"not a version ({exc})") from exc

    packages = []
    for name, table in _get(source, doc, "packages", dict, "").items():
        where = f"packages.{name}"
        _typed(source, table, dict, where)
        packages.append(
            PackageSpec(
                name=name,
                summary=_get(source, table, "summary", str, where),
                python=bool(_typed(source, table.get("python", False), bool, f"{where}.python")),
            )
        )
    names = {p.name for p in packages}

    rules = []
    for index, table in enumerate(_get(source, doc, "rules", list, "")):
        where = f"rules[{index}]"
        _typed(source, table, dict, where)
        package = _get(source, table, "package", str, where)
        if package not in names:
            raise source.error(
                f"{where}.package",
                f"unknown package '{package}'",
                f"declare it under [packages.{package}] or use one of {sorted(names)}",
            )
        rules.append(
            Rule(
                index=index,
                globs=_strings(source, _get(source, table, "glob", object, where), f"{where}.glob"),
                exclude=_strings(source, table.get("exclude", []), f"{where}.exclude"),
                package=package,
                reason=_get(source, table, "reason", str, where),
                line=source.line(where),
            )
        )

    components = []
    for name, table in _get(source, doc, "components", dict, "").items():
        where = f"components.{name}"
        _typed(source, table, dict, where)
        components.append(
            Component(
                name=name,
                library=_get(source, table, "library", str, where),
                platforms=_strings(source, table.get("platforms", []), f"{where}.platforms"),
                line=source.line(where),
            )
        )

    externals = []
    for name, table in _typed(source, doc.get("externals", {}), dict, "externals").items():
        where = f"externals.{name}"
        _typed(source, table, dict, where)
        externals.append(
            External(
                name=name,
                sonames=_strings(
                    source, _get(source, table, "sonames", list, where), f"{where}.sonames"
                ),
                site_dirs=_strings(source, table.get("site_dirs", []), f"{where}.site_dirs"),
                conda=_get(source, table, "conda", str, where),
                pip=_get(source, table, "pip", str, where),
            )
        )

    system = _typed(source, doc.get("system", {}), dict, "system")
    system_sonames = _strings(source, system.get("sonames", []), "system.sonames")
    conda_system = _typed(source, system.get("conda", {}), dict, "system.conda")
    conda_names = _typed(
        source,
        _typed(source, doc.get("conda", {}), dict, "conda").get("names", {}),
        dict,
        "conda.names",
    )

    exclusive = []
    pairs = _typed(source, doc.get("process_exclusive", []), list, "process_exclusive")
    for index, table in enumerate(pairs):
        where = f"process_exclusive[{index}]"
        _typed(source, table, dict, where)
        exclusive.append(
            ExclusivePair(
                first=_get(source, table, "first", str, where),
                second=_get(source, table, "second", str, where),
                reason=_get(source, table, "reason", str, where),
                line=source.line(where),
            )
        )

    return Recipe(
        path=source.path,
        project=project,
        default_version=default_version,
        supported=supported,
        packages=tuple(packages),
        rules=tuple(rules),
        components=tuple(components),
        externals=tuple(externals),
        system_sonames=system_sonames,
        conda_system=tuple(sorted((k, str(v)) for k, v in conda_system.items())),
        conda_names=tuple(sorted((k, str(v)) for k, v in conda_names.items())),
        exclusive=tuple(exclusive),
    )
