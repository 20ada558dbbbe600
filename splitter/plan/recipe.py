"""Load a recipe TOML (the standard library's tomllib) into typed, validated records; errors name
the key and line."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from splitter.errors import RecipeError
from splitter.model import (
    Component,
    Distro,
    ExclusivePair,
    External,
    HeaderNotAlone,
    PackageSpec,
    Recipe,
    Rule,
    Together,
)
from splitter.plan.recipetext import Source, check_keys, not_toml
from splitter.plan.recipetext import required as _get
from splitter.plan.recipetext import strings as _strings
from splitter.plan.recipetext import typed as _typed
from splitter.plan.recipethird import (
    read_conclusions,
    read_exclusions,
    read_third_party,
    scan_file,
    standard_texts,
)

DEFAULT_RECIPE = "executorch.toml"
SCHEMAS = (1,)  # the `[recipe] schema` versions this loader reads
# A package name conda and pip both accept as written (lowercase: conda's names are).
PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
# A CMake component name that is also a valid part of a variable and target name.
COMPONENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def default_recipe_path() -> Path:
    """The recipe shipped with splitter (the repo's `recipes/executorch.toml`)."""
    return Path(str(resources.files("splitter.recipes").joinpath(DEFAULT_RECIPE)))


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
        # tomllib, not a style-preserving parser: the recipe is only read, and every build
        # and plan reads it (tomlkit took 18 ms of the shipped recipe's 20, docs/performance.md)
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise not_toml(path, text, exc) from exc
    source = Source(path, text)
    _check_schema(source, document)
    check_keys(source, document)
    return _build(source, document)


def _check_schema(source: Source, doc: dict[str, Any]) -> None:
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


def _string_map(source: Source, value: Any, where: str) -> dict[str, str]:
    """A free-form table whose values must be strings (a name or a match spec each)."""
    table = _typed(source, value, dict, where)
    for key, item in table.items():
        _typed(source, item, str, f"{where}.{key}")
    return dict(table)


def _build(source: Source, doc: dict[str, Any]) -> Recipe:
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
        if not PACKAGE_NAME.fullmatch(name):
            raise source.error(
                where,
                f"not a package name: '{name}'",
                "use lowercase letters, digits and '-', '_' or '.' (conda's and pip's names), "
                "starting with a letter or digit",
            )
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
                platforms=_strings(source, table.get("platforms", []), f"{where}.platforms"),
            )
        )

    components = []
    for name, table in _get(source, doc, "components", dict, "").items():
        where = f"components.{name}"
        _typed(source, table, dict, where)
        if not COMPONENT_NAME.fullmatch(name):
            raise source.error(
                where,
                f"not a CMake component name: '{name}'",
                "use letters, digits and '_', starting with a letter: it names the CMake "
                "component (find_package(executorch COMPONENTS ...)) and its variables",
            )
        components.append(
            Component(
                name=name,
                libraries=_strings(
                    source, _get(source, table, "library", object, where), f"{where}.library"
                ),
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
                deb=_typed(source, table.get("deb", ""), str, f"{where}.deb"),
                rpm=_typed(source, table.get("rpm", ""), str, f"{where}.rpm"),
            )
        )

    system = _typed(source, doc.get("system", {}), dict, "system")
    system_sonames = _strings(source, system.get("sonames", []), "system.sonames")
    conda_system = _string_map(source, system.get("conda", {}), "system.conda")
    conda_names = _string_map(
        source, _typed(source, doc.get("conda", {}), dict, "conda").get("names", {}), "conda.names"
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
                platforms=_strings(source, table.get("platforms", []), f"{where}.platforms"),
            )
        )

    return Recipe(
        together=_together(source, doc),
        headers_not_alone=_headers_not_alone(source, doc),
        third_party=read_third_party(source, doc),
        conclusions=read_conclusions(source, doc),
        exclusions=read_exclusions(source, doc),
        scan_file=scan_file(source.path),
        standard_texts=standard_texts(source.path),
        path=source.path,
        project=project,
        default_version=default_version,
        supported=supported,
        packages=tuple(packages),
        rules=tuple(rules),
        components=tuple(components),
        externals=tuple(externals),
        system_sonames=system_sonames,
        conda_system=tuple(sorted(conda_system.items())),
        conda_names=tuple(sorted(conda_names.items())),
        exclusive=tuple(exclusive),
        deb=_distro(source, doc, "deb", "revision", names),
        rpm=_distro(source, doc, "rpm", "release", names),
        system_paths=_strings(source, system.get("paths", []), "system.paths"),
    )


def _together(source: Source, doc: dict[str, Any]) -> tuple[Together, ...]:
    """[[together]]: groups of at least two distinct wheel paths (no globs), with a reason."""
    groups = []
    for index, table in enumerate(_typed(source, doc.get("together", []), list, "together")):
        where = f"together[{index}]"
        _typed(source, table, dict, where)
        files = _strings(source, _get(source, table, "files", list, where), f"{where}.files")
        if len(set(files)) < 2 or len(set(files)) != len(files):
            raise source.error(
                f"{where}.files",
                f"files that travel together are at least two distinct paths: {list(files)}",
                "list each file once, and at least two",
            )
        for item in files:
            if any(c in item for c in "*?[") or item.startswith("/") or item.endswith("/"):
                raise source.error(
                    f"{where}.files",
                    f"not a file's path in the wheel (no globs, no directories): {item!r}",
                    "name each file as the wheel holds it, e.g. executorch/lib/mlx.metallib",
                )
        groups.append(
            Together(
                files=files,
                reason=_get(source, table, "reason", str, where),
                line=source.line(where),
                platforms=_strings(source, table.get("platforms", []), f"{where}.platforms"),
            )
        )
    return tuple(groups)


def _headers_not_alone(source: Source, doc: dict[str, Any]) -> tuple[HeaderNotAlone, ...]:
    """[[headers_not_alone]]: headers (relative to the include directory, no globs) that do not
    compile on their own by upstream's design, each once and with a reason."""
    entries: list[HeaderNotAlone] = []
    tables = _typed(source, doc.get("headers_not_alone", []), list, "headers_not_alone")
    for index, table in enumerate(tables):
        where = f"headers_not_alone[{index}]"
        _typed(source, table, dict, where)
        header = _get(source, table, "header", str, where)
        if (
            any(c in header for c in "*?[\\")
            or header.startswith(("/", "executorch/include/"))
            or not header.endswith((".h", ".hpp"))
        ):
            raise source.error(
                f"{where}.header",
                f"not a header's path under the include directory: {header!r}",
                "name it as `#include <...>` does, e.g. executorch/runtime/core/error.h",
            )
        if any(e.header == header for e in entries):
            raise source.error(f"{where}.header", f"listed twice: {header!r}", "list it once")
        entries.append(
            HeaderNotAlone(
                header=header,
                reason=_get(source, table, "reason", str, where),
                line=source.line(where),
            )
        )
    return tuple(entries)


def _package_names(
    source: Source, table: dict[str, Any], key: str, field: str, packages: set[str]
) -> dict[str, str]:
    """[<key>.<field>]: split package -> distro package name, each checked."""
    names = _typed(source, table.get(field, {}), dict, f"{key}.{field}")
    for name, value in names.items():
        _typed(source, value, str, f"{key}.{field}.{name}")
        if name not in packages:
            raise source.error(
                f"{key}.{field}.{name}",
                f"unknown package '{name}'",
                f"map one of {sorted(packages)}",
            )
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", value):
            raise source.error(
                f"{key}.{field}.{name}",
                f"not a package name (lower-case letters, digits, + - . only): {value!r}",
            )
    return dict(names)


def _distro(
    source: Source, doc: dict[str, Any], key: str, revision_key: str, packages: set[str]
) -> Distro | None:
    """[deb] or [rpm]: the revision, a distro name for every package, system soname map."""
    if key not in doc:
        return None
    table = _typed(source, doc[key], dict, key)
    revision = _get(source, table, revision_key, str, key)
    if not re.fullmatch(r"[A-Za-z0-9.+~]+", revision):
        raise source.error(
            f"{key}.{revision_key}",
            f"not a {key} {revision_key} (letters, digits and . + ~ only): {revision!r}",
        )
    maintainer = _get(source, table, "maintainer", str, key)
    if not re.fullmatch(r"[^<>\n]+ <[^<>@\s]+@[^<>@\s]+>", maintainer):
        raise source.error(
            f"{key}.maintainer",
            f"not a 'Name <address>' maintainer: {maintainer!r}",
            'write it as "Your Name <you@example.org>"',
        )
    names = _package_names(source, table, key, "names", packages)
    missing = sorted(packages - set(names))
    if missing:
        raise source.error(
            f"{key}.names",
            f"no {key} name for {', '.join(missing)}",
            f"add each under [{key}.names]",
        )
    system = _typed(source, table.get("system", {}), dict, f"{key}.system")
    for soname, value in system.items():
        _typed(source, value, str, f"{key}.system.{soname}")
    suffix = "-dev" if key == "deb" else "-devel"
    dev_names = {name: f"{value}{suffix}" for name, value in names.items()}
    dev_names |= _package_names(source, table, key, "dev_names", packages)
    taken = [n for n in dev_names.values() if n in names.values()]
    if taken:
        raise source.error(
            f"{key}.dev_names",
            f"{taken[0]!r} names both a package and a development package",
            f"give the development package another name under [{key}.dev_names]",
        )
    return Distro(
        revision=revision,
        maintainer=maintainer,
        names=tuple(sorted(names.items())),
        dev_names=tuple(sorted(dev_names.items())),
        system=tuple(sorted(system.items())),
    )
