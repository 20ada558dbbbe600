"""The recipe's [[third_party]] tables: other projects' code the binaries may carry, each with
its licence, the upstream file its licence text was copied from (kept verbatim beside the
recipe, licenses/<name>-<file>), and the exported-symbol and path patterns that recognise it,
checked as they are read."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

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
PATH_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./*?-]*")
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
        if not SPDX_ID.fullmatch(licence):
            raise source.error(
                f"{where}.license",
                f"not an SPDX licence identifier: {licence!r}",
                'write the one identifier from https://spdx.org/licenses/, e.g. "Apache-2.0"',
            )
        url = required(source, table, "url", str, where)
        if not url.startswith("https://"):
            raise source.error(
                f"{where}.url", f"not an https URL: {url!r}", "give the project's upstream"
            )
        text = required(source, table, "license_text", dict, where)
        repo = required(source, text, "repo", str, f"{where}.license_text")
        path = required(source, text, "path", str, f"{where}.license_text")
        revision = required(source, text, "revision", str, f"{where}.license_text")
        if not REPOSITORY.fullmatch(repo) or not path or path.startswith("/"):
            raise source.error(
                f"{where}.license_text",
                f"not a repository and a path in it: {repo!r}, {path!r}",
                'write license_text = { repo = "owner/name", path = "LICENSE", revision = ... }',
            )
        if not REVISION.fullmatch(revision):
            raise source.error(
                f"{where}.license_text.revision",
                f"not a commit: {revision!r}",
                "give the 40-hex commit the licence text was copied from",
            )
        extra = sorted(set(text) - {"repo", "path", "revision"})
        if extra:
            raise source.error(
                f"{where}.license_text",
                f"unknown key '{extra[0]}' in license_text",
                "license_text holds repo, path and revision",
            )
        local = f"{LICENSES}/{name}-{path.rsplit('/', 1)[-1]}"
        # beside the recipe; a recipe kept elsewhere without its own copy uses the shipped one
        places = [source.path.parent / local, SHIPPED / local]
        found_at = next((p for p in places if p.is_file()), places[0])
        try:
            data = found_at.read_bytes()
        except OSError as exc:
            raise source.error(
                f"{where}.license_text",
                f"cannot read {name}'s licence text {places[0]} ({exc.strerror or exc})",
                f"copy {path} of https://github.com/{repo} at {revision} there, byte for byte",
            ) from exc
        if not data.strip():
            raise source.error(
                f"{where}.license_text",
                f"{name}'s licence text {found_at} is empty",
                f"copy {path} of https://github.com/{repo} at {revision} there, byte for byte",
            )
        symbols = strings(source, table.get("symbols", []), f"{where}.symbols")
        paths = strings(source, table.get("paths", []), f"{where}.paths")
        if not symbols and not paths:
            raise source.error(
                f"{where}.symbols",
                "no symbol or path patterns",
                'list the globs that recognise its exported symbols, e.g. ["xnn_*"], '
                "or the wheel paths that are its files",
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
                line=source.line(where),
            )
        )
    return tuple(found)
