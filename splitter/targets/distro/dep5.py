"""Debian's machine-readable copyright (DEP-5) of a binary package or of the source package,
from every shipped file's concluded licence (splitter.plan.conclude): `Files: *` is the
project's licence; the files concluded otherwise are grouped by that licence, each group with
the copyright statements the scanner found in its files; each licence short name has its text
(splitter.plan.licences.licence_texts) in its own License paragraph. The source package's
copyright also lists the files no package ships (Files-Excluded) with the recipe's reasons.

The same text for every architecture (a Multi-Arch: same package's copyright must be): the
files of every architecture's wheel are united, and the multiarch directory is written as a
wildcard."""

from __future__ import annotations

import fnmatch
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence

from splitter.licensing import FileLicence
from splitter.model import Plan
from splitter.plan.layout import deb_layout, install_path
from splitter.plan.licences import UNKNOWN, LicenceText, licence_texts
from splitter.plan.recipethird import terms
from splitter.platforms import by_wheel_tag
from splitter.targets.distro.common import DEVELOPMENT, LIBRARY, covering_paths, development_dirs
from splitter.targets.stage import standard_dirs

DEP5 = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
# Licences Debian ships in /usr/share/common-licenses: a copyright refers to them (policy
# 12.5; lintian's copyright-file-contains-full-apache-2-license) instead of repeating them.
COMMON_LICENSES = frozenset({"Apache-2.0", "MPL-1.1", "MPL-2.0", "CC0-1.0"})
COPYRIGHT = re.compile(r"^\W*copyright\s*(\(c\)|©|\d{4})", re.IGNORECASE)

# Whose text a licence is: ("project", "") the wheel's own licence, ("component", name) a
# [[third_party]] component's copy, ("spdx", id) the SPDX licence list's text.
Source = tuple[str, str]
PROJECT: Source = ("project", "")
# A file's licence in DEP-5's shape: AND of operands, each an OR of alternatives, each an AND
# of licences (DEP-5's "and" binds tighter than "or"; a comma closes an "or").
Alternative = tuple[Source, ...]
Operand = tuple[Alternative, ...]
Licence = tuple[Operand, ...]


def copyright_file(plans: Sequence[Plan], package: str | None, origin: str, role: str = "") -> str:
    """The DEP-5 copyright of split `package` (None: every package, as the source package's
    debian/copyright says), from the plan of each architecture; `role` DEVELOPMENT or LIBRARY
    keeps the files of that part of the split package (common.distro_packages' cut)."""
    first = plans[0]
    names = [p.name for p in first.packages if package is None or p.name == package]
    texts = _texts(plans, names)
    licences: dict[str, Licence] = {}  # installed path (multiarch as *) -> its licence
    found: dict[str, set[str]] = {}  # installed path -> copyright statements the scanner found
    whys: dict[str, set[tuple[str, str]]] = {}  # installed path -> why not the project's
    fixed: set[str] = {"usr"}  # directories no Files pattern may stand for
    for plan in plans:
        platform = by_wheel_tag(plan.wheel.platform_tag)
        triplet = platform.triplet if platform is not None else ""
        layout = deb_layout(plan.wheel, triplet)
        fixed |= {_multiarch(f"usr/{d}", triplet) for d in standard_dirs(layout)}
        development = development_dirs(layout)
        concluded = {f.path: f for f in plan.licences}
        # files a component's paths claim that are not binaries: its code alone
        own = {f.path for f in plan.third_party if f.paths} - {b.path for b in plan.binaries}
        for name in names:
            for path in plan.package(name).files:
                dest = install_path(path, layout, plan.wheel.dist_info)
                if dest is None or _cut(role, dest.startswith(development)):
                    continue
                where = _multiarch(f"usr/{dest}", triplet)
                licence = concluded.get(path)
                mine = _licence_of(plan, licence, path, own, texts)
                licences[where] = _merge(licences.get(where, ()), mine)
                whys.setdefault(where, set()).update(_why(plan, licence, path, own))
                statements = found.setdefault(where, set())
                if licence is not None:
                    statements.update(" ".join(c.split()) for c in licence.copyrights)
    rank = _rank(first)
    used = sorted({s for each in licences.values() for s in _sources(each)} | {PROJECT}, key=rank)
    short = _short_names(first, used)
    groups: dict[str, list[str]] = {"*": []}  # License -> its paths; "*": the project's alone
    for path, each in licences.items():
        text = "*" if _sources(each) == {PROJECT} else _render(each, short, rank)
        groups.setdefault(text, []).append(path)
    star = groups["*"]
    project_holders = _holders(texts.get(PROJECT), f"the {first.recipe.project} authors")
    if package is None:  # the source package's files are the wheels: Files: * names all
        star_licence = " and ".join(short[s] for s in used)
        star_holders = _statements(found, licences) or project_holders
    else:
        star_licence = short[PROJECT]
        star_holders = _statements(found, star) or project_holders
    paragraphs = [
        _header(plans, origin, package is None),
        _files("*", star_holders, star_licence),
    ]
    patterns = _patterns(groups, fixed) if package is not None else {}
    stanzas = sorted((sorted(paths), text) for text, paths in groups.items() if text != "*")
    for paths, text in stanzas if package is not None else ():
        held = sorted({s for p in paths for s in _sources(licences[p])}, key=rank)
        holders = _statements(found, paths) or _fallback(held, texts, project_holders)
        stanza = _files(" ".join(patterns[text]), holders, text)
        reasons = {w for p in paths for w in whys[p]}
        if reasons:
            stanza += "\n" + _field("Comment", _comment(reasons, rank))
        paragraphs.append(stanza)
    paragraphs += [_licence(short[s], s, texts, first) for s in used]
    return "\n\n".join(paragraphs) + "\n"


def _cut(role: str, development: bool) -> bool:
    """Whether a file is left out of the `role` part of its split package."""
    return (role == DEVELOPMENT and not development) or (role == LIBRARY and development)


def _multiarch(path: str, triplet: str) -> str:
    """An installed path the same in every architecture: the multiarch directory as `*`."""
    if not triplet:
        return path
    return f"/{path}/".replace(f"/{triplet}/", "/*/")[1:-1]


def _texts(plans: Sequence[Plan], names: Iterable[str]) -> dict[Source, LicenceText]:
    """The licence text of each source the split packages `names` ship texts for: the
    wheel's first licence file, each component's licence (its NOTICE follows it and is not
    one), each SPDX licence list text (by identifier; an exception apart)."""
    found: dict[Source, LicenceText] = {}
    for plan in plans:
        members = set(plan.wheel.license_files)
        for name in names:
            for text in licence_texts(plan, name):
                if text.component:
                    source: Source = ("component", text.component)
                elif text.origin in members:
                    source = PROJECT
                else:
                    source = ("spdx", text.name.removesuffix(".txt"))
                found.setdefault(source, text)
    return found


def _licence_of(
    plan: Plan,
    licence: FileLicence | None,
    path: str,
    own: set[str],
    texts: dict[Source, LicenceText],
) -> Licence:
    """A file's concluded licence in DEP-5's shape, each licence named by whose text it is."""
    if licence is None or licence.basis == "project":
        return (((PROJECT,),),)
    if licence.basis.startswith("component:"):
        held = [b.removeprefix("component:") for b in licence.basis.split(",")]
        operands: list[Operand] = [((("component", c),),) for c in held]
        if path not in own:  # their code linked into the project's (conclude's rule)
            operands.insert(0, ((PROJECT,),))
        return tuple(operands)
    return tuple(
        tuple(tuple(_source_of(plan, t, texts) for t in alternative) for alternative in operand)
        for operand in _shape(licence.concluded)
    )


def _source_of(plan: Plan, term: str, texts: dict[Source, LicenceText]) -> Source:
    """Whose text stands for a licence of a reviewer's conclusion: the project's, the SPDX
    licence list's where the package ships it, else a component's under that licence."""
    if term in terms(plan.wheel.license or UNKNOWN):
        return PROJECT
    if all(("spdx", part) in texts for part in term.split(" WITH ")):
        return ("spdx", term)
    for component in plan.recipe.third_party:
        if component.license == term and ("component", component.name) in texts:
            return ("component", component.name)
    return ("spdx", term)


def _shape(expression: str) -> list[list[list[str]]]:
    """An SPDX expression as AND of ORs of ANDs of licences (`X WITH Y` as one); deeper
    nesting is flattened to all of its licences, which only ever names more."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expression)
    return [
        [_licences(alternative) for alternative in _split(operand, "OR")]
        for operand in _split(tokens, "AND")
    ]


def _split(tokens: list[str], word: str) -> list[list[str]]:
    """The operands of `word` (AND, OR) at the top level, each without wrapping parentheses."""
    parts: list[list[str]] = [[]]
    depth = 0
    for token in _unwrap(tokens):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if token == word and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return [_unwrap(p) for p in parts if p]


def _licences(tokens: list[str]) -> list[str]:
    """The licences an alternative joins: each `X` or `X WITH Y`; a nested expression, all
    of its licences."""
    found: list[str] = []
    for operand in _split(tokens, "AND"):
        single = len(operand) == 1 or (len(operand) == 3 and operand[1] == "WITH")
        found += [" ".join(operand)] if single else terms(" ".join(operand))
    return found


def _unwrap(tokens: list[str]) -> list[str]:
    while len(tokens) > 1 and tokens[0] == "(" and tokens[-1] == ")" and _balanced(tokens[1:-1]):
        tokens = tokens[1:-1]
    return tokens


def _balanced(tokens: list[str]) -> bool:
    depth = 0
    for token in tokens:
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth < 0:
            return False
    return depth == 0


def _merge(one: Licence, other: Licence) -> Licence:
    """A path's licence in two architectures: every operand of both (each applies)."""
    return tuple(dict.fromkeys(one + other))


def _sources(licence: Licence) -> set[Source]:
    return {s for operand in licence for alternative in operand for s in alternative}


def _why(plan: Plan, licence: FileLicence | None, path: str, own: set[str]) -> set[tuple[str, str]]:
    """Why a file's licence is not the project's alone: (how, component) for each component
    found in it, or (the reviewer's reason, "")."""
    if licence is None or licence.basis == "project":
        return set()
    if licence.basis.startswith("component:"):
        how = "the files are its own" if path in own else "its code is in these binaries"
        return {(how, b.removeprefix("component:")) for b in licence.basis.split(",")}
    index = int(licence.basis.removeprefix("conclusion:"))
    reason = " ".join(plan.recipe.conclusions[index].reason.split())
    return {(f"concluded by the recipe's review: {reason}", "")}


def _comment(whys: set[tuple[str, str]], rank: Callable[[Source], tuple[int, int, str]]) -> str:
    """A group's reasons in words: the components each way, in recipe order, then the
    reviewer's reasons."""
    by_how: dict[str, list[str]] = {}
    for how, component in sorted(whys, key=lambda w: (w[0], rank(("component", w[1])))):
        by_how.setdefault(how, [])
        if component:
            by_how[how].append(component)
    return "; ".join(
        f"{', '.join(names)} ({how})" if names else how for how, names in by_how.items()
    )


def _rank(plan: Plan) -> Callable[[Source], tuple[int, int, str]]:
    """The order licences are named in: the project's, the components' in recipe order,
    then the SPDX licence list's by identifier."""
    order = {c.name: index for index, c in enumerate(plan.recipe.third_party)}
    kinds = {"project": 0, "component": 1, "spdx": 2}
    return lambda source: (kinds[source[0]], order.get(source[1], 0), source[1])


def _short_names(plan: Plan, used: list[Source]) -> dict[Source, str]:
    """Each licence's DEP-5 short name: its SPDX identifier where no other licence text of
    this copyright has it, else the identifier suffixed with the component (each short name
    has one text, and two projects' BSD texts name different holders)."""
    project = plan.wheel.license or UNKNOWN
    components = {c.name: c for c in plan.recipe.third_party}
    taken: set[str] = set()
    names = {}
    for source in used:
        kind, key = source
        if kind == "project":
            base = project
        else:
            licence = components[key].license if kind == "component" else key
            base = licence.replace(" WITH ", "-with-")
        suffix = key if kind == "component" else "SPDX"
        name = base if base not in taken else f"{base}-{suffix}"
        taken.add(name)
        names[source] = name
    return names


def _render(
    licence: Licence, short: dict[Source, str], rank: Callable[[Source], tuple[int, int, str]]
) -> str:
    """A License field's first line: ANDs as `and`, ORs as `or`, and an OR among ANDs closed
    by a comma (`A or B, and C`: DEP-5's `and` binds tighter than `or`)."""

    def key(operand: Operand) -> list[list[tuple[int, int, str]]]:
        return [[rank(s) for s in alternative] for alternative in operand]

    def words(alternative: Alternative) -> str:
        return " and ".join(short[s] for s in sorted(set(alternative), key=rank))

    operands = sorted(set(licence), key=key)
    plain = [words(o[0]) for o in operands if len(o) == 1]
    choices = [" or ".join(words(a) for a in o) for o in operands if len(o) > 1]
    return ", and ".join([*choices, *([" and ".join(plain)] if plain else [])])


def _patterns(groups: dict[str, list[str]], fixed: set[str]) -> dict[str, list[str]]:
    """Each group's Files patterns: the fewest that match exactly its paths among the
    package's, a directory (as `dir/*`) standing for its files where every one of them is
    in the group and it is none of the system's directories (generated files live there)."""
    lines = covering_paths({"": groups}, lambda directory, _: directory not in fixed)
    out = {}
    for name, entries in lines.items():
        paths = set(groups[name])
        out[name] = [p if p in paths else f"{p}/*" for p, _ in entries]
    return out


def _statements(found: dict[str, set[str]], paths: Iterable[str]) -> list[str]:
    """The copyright statements the scanner found in the files, each once, sorted."""
    return sorted({s for p in paths for s in found[p] if s})


def _fallback(
    held: list[Source], texts: dict[Source, LicenceText], project: list[str]
) -> list[str]:
    """Where the scanner found no statement in a group's files (binaries): the holders the
    licence texts of its code name, the project's from the wheel's licence file."""
    holders: list[str] = []
    for source in held:
        if source == PROJECT:
            holders += project
        elif source[0] == "component":
            holders += _holders(texts.get(source), f"the {source[1]} authors")
    return list(dict.fromkeys(holders)) or project


def _holders(text: LicenceText | None, fallback: str) -> list[str]:
    """The copyright lines of a licence text (its own words, `//` comment marks aside), or
    `fallback` where it names none (Apache-2.0's text names no holder)."""
    if text is None:
        return [fallback]
    lines = text.data.decode("utf-8", "replace").splitlines()
    found = [
        " ".join(re.sub(r"^\W*", "", line).split())
        for line in lines
        if COPYRIGHT.match(line) and "[" not in line and "{" not in line and "holder" not in line
    ]
    return list(dict.fromkeys(found)) or [fallback]


def _header(plans: Sequence[Plan], origin: str, source: bool) -> str:
    """The header paragraph; the source package's names the wheel files no package ships
    (Files-Excluded, by the recipe's [[exclude]] globs that match them) and why."""
    first = plans[0]
    lines = [f"Format: {DEP5}", f"Upstream-Name: {first.recipe.project}"]
    if first.wheel.home:
        lines.append(f"Source: {first.wheel.home}")
    comment = [origin]
    excluded = sorted({e.path for plan in plans for e in plan.excluded}) if source else []
    if excluded:
        globs: list[str] = []
        for exclusion in first.recipe.exclusions:
            matched = [
                g for g in exclusion.paths if any(fnmatch.fnmatchcase(p, g) for p in excluded)
            ]
            if matched:
                globs += [g for g in matched if g not in globs]
                comment.append(f"Excluded ({' '.join(matched)}): {exclusion.reason}")
        lines.append("Files-Excluded:\n" + "\n".join(f" {g}" for g in globs))
        comment.append(
            f"The {len(excluded)} excluded wheel files are installed by no binary package; "
            "the orig tarball keeps upstream's wheels unchanged (their sha256 is checked), "
            "so they are still in it."
        )
    lines.append(_field("Comment", *comment))
    return "\n".join(lines)


def _field(name: str, *paragraphs: str) -> str:
    """A free-text field, each paragraph wrapped, paragraphs apart by a ` .` line."""
    lines: list[str] = []
    for paragraph in paragraphs:
        if lines:
            lines.append(".")
        lines += textwrap.wrap(
            " ".join(paragraph.split()), width=78, break_long_words=False, break_on_hyphens=False
        )
    return f"{name}: {lines[0]}" + "".join(f"\n {line}" for line in lines[1:])


def _files(pattern: str, holders: list[str], licence: str) -> str:
    copyright_field = "\n ".join(holders)
    return f"Files: {pattern}\nCopyright: {copyright_field}\nLicense: {licence}"


def _licence(name: str, source: Source, texts: dict[Source, LicenceText], plan: Plan) -> str:
    """A standalone License paragraph: the short name and the text verbatim (blank lines as
    ` .`), or Debian's common-licenses file that holds it, with where it was copied from."""
    if source[0] == "spdx":
        parts = source[1].split(" WITH ")
        body, origins = [], []
        for part in parts:
            text = texts.get(("spdx", part))
            if part in COMMON_LICENSES:
                body.append(_common(part))
            elif text is not None:
                body.append(_verbatim(text.data))
                origins.append(text.origin)
            else:
                body.append(" Not stated.")
        comment = f"\nComment: copied from {', '.join(origins)}" if origins else ""
        return f"License: {name}\n" + "\n .\n".join(body) + comment
    text = texts.get(source)
    if text is None:
        return f"License: {name}\n Not stated by the wheel."
    if source == PROJECT:
        return f"License: {name}\n{_verbatim(text.data)}\nComment: copied from {text.origin}"
    component = next(c for c in plan.recipe.third_party if c.name == source[1])
    origin = f"{component.name}: {text.origin}"
    if component.license in COMMON_LICENSES:
        return (
            f"License: {name}\n{_common(component.license)}\n"
            f"Comment: {component.name}'s text is that licence, {origin}"
        )
    return f"License: {name}\n{_verbatim(text.data)}\nComment: copied from {origin}"


def _common(licence: str) -> str:
    return (
        f" On Debian systems, the complete text of the {licence} licence is in\n"
        f" /usr/share/common-licenses/{licence}."
    )


def _verbatim(data: bytes) -> str:
    body = "\n".join(f" {line}" if line.strip() else " ." for line in data.decode().splitlines())
    return body.rstrip()
