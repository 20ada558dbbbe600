"""Debian's machine-readable copyright (DEP-5) of a split package: the project's licence for
every file, a Files stanza per group of files that carry the same third-party components
(found in the binaries or by path: splitter.plan.thirdparty) naming every licence that
applies, and each licence's text verbatim in its own License paragraph.

The same text for every architecture (a Multi-Arch: same package's copyright must be): the
components of every architecture's wheel are united, and the multiarch directory is written
as a wildcard."""

from __future__ import annotations

import re
from collections.abc import Sequence

from splitter.model import Plan, ThirdParty
from splitter.plan.layout import deb_layout, install_path
from splitter.plan.licences import UNKNOWN, LicenceText, licence_texts
from splitter.platforms import by_wheel_tag

DEP5 = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
# Licences Debian ships in /usr/share/common-licenses: a copyright refers to them (policy
# 12.5; lintian's copyright-file-contains-full-apache-2-license) instead of repeating them.
COMMON_LICENSES = frozenset({"Apache-2.0", "MPL-1.1", "MPL-2.0", "CC0-1.0"})
COPYRIGHT = re.compile(r"^\W*copyright\s*(\(c\)|©|\d{4})", re.IGNORECASE)


def copyright_file(plans: Sequence[Plan], package: str | None, origin: str) -> str:
    """The DEP-5 copyright of split `package` (None: every package, as the source package's
    debian/copyright says), from the plan of each architecture."""
    first = plans[0]
    names = [p.name for p in first.packages if package is None or p.name == package]
    components = {c.name: c for c in first.recipe.third_party}
    found: dict[str, set[str]] = {}  # installed path (multiarch as *) -> components
    by_path: dict[str, bool] = {}  # installed path -> recognised by its path (wholly theirs)
    texts: dict[str, LicenceText] = {}
    for plan in plans:
        platform = by_wheel_tag(plan.wheel.platform_tag)
        triplet = platform.triplet if platform is not None else ""
        layout = deb_layout(plan.wheel, triplet)
        for name in names:
            for text in licence_texts(plan, name):
                texts.setdefault(text.component, text)
        for f in plan.third_party:
            if f.package not in names:
                continue
            dest = install_path(f.path, layout, plan.wheel.dist_info)
            if dest is None:
                continue
            path = f"usr/{dest}".replace(f"/{triplet}/", "/*/")
            found.setdefault(path, set()).add(f.component)
            by_path[path] = by_path.get(path, True) and bool(f.paths) and not f.patterns
    project = first.wheel.license or UNKNOWN
    short = _short_names(project, [components[c] for c in components if c in texts])
    order = list(components)
    # the source package's files are the wheels and the lists: Files: * names every licence
    star = [project] if package is not None else [project, *(short[c] for c in order if c in texts)]
    holders = _holders(texts.get(""), f"the {first.recipe.project} authors")
    paragraphs = [
        "\n".join(
            [
                f"Format: {DEP5}",
                f"Upstream-Name: {first.recipe.project}",
                *([f"Source: {first.wheel.home}"] if first.wheel.home else []),
                f"Comment: {origin}",
            ]
        ),
        _files("*", holders, star),
    ]
    groups: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    for path, carried in sorted(found.items() if package is not None else ()):
        key = (tuple(sorted(carried, key=order.index)), by_path[path])
        groups.setdefault(key, []).append(path)
    for (held, wholly), paths in sorted(groups.items()):
        holders = [h for c in held for h in _holders(texts.get(c), f"the {c} authors")]
        licences = [short[c] for c in held]
        if not wholly:
            licences.insert(0, project)
        stanza = _files(" ".join(paths), holders, licences)
        paragraphs.append(stanza + f"\nComment: {', '.join(held)} ({_evidence(wholly)})")
    paragraphs.append(_licence(project, texts.get("")))
    for c in order:
        if c in texts:
            paragraphs.append(_licence(short[c], texts[c], components[c]))
    return "\n\n".join(paragraphs) + "\n"


def _short_names(project: str, components: list[ThirdParty]) -> dict[str, str]:
    """Each component's DEP-5 short name: its SPDX identifier where no other licence text of
    this copyright has it, else the identifier suffixed with the component (each short name
    has one text, and two projects' BSD texts name different holders)."""
    taken = {project}
    names = {}
    for component in components:
        base = component.license.replace(" WITH ", "-with-")
        name = base if base not in taken else f"{base}-{component.name}"
        taken.add(name)
        names[component.name] = name
    return names


def _holders(text: LicenceText | None, fallback: str) -> list[str]:
    """The copyright lines of a licence text (its own words, `//` comment marks aside), or
    `fallback` where it names none (Apache-2.0's text names no holder)."""
    if text is None:
        return [fallback]
    lines = text.data.decode("utf-8", "replace").splitlines()
    found = [
        re.sub(r"^\W*", "", line).strip()
        for line in lines
        if COPYRIGHT.match(line) and "[" not in line and "{" not in line and "holder" not in line
    ]
    return list(dict.fromkeys(found)) or [fallback]


def _files(pattern: str, holders: list[str], licences: list[str]) -> str:
    copyright_field = "\n ".join(holders)
    return f"Files: {pattern}\nCopyright: {copyright_field}\nLicense: {' and '.join(licences)}"


def _evidence(wholly: bool) -> str:
    return "the files are its own" if wholly else "its exported symbols are in these binaries"


def _licence(name: str, text: LicenceText | None, component: ThirdParty | None = None) -> str:
    """A standalone License paragraph: the short name and the text verbatim (blank lines as
    ` .`), with where it was copied from."""
    if text is None:
        return f"License: {name}\n Not stated by the wheel."
    source = f"{component.name}: {text.origin}" if component is not None else text.origin
    if component is not None and component.license in COMMON_LICENSES:
        where = f"/usr/share/common-licenses/{component.license}"
        return (
            f"License: {name}\n On Debian systems, the complete text of the {component.license}"
            f" licence is in\n {where}.\nComment: {component.name}'s text is that licence, "
            f"{source}"
        )
    body = "\n".join(
        f" {line}" if line.strip() else " ." for line in text.data.decode().splitlines()
    )
    return f"License: {name}\n{body.rstrip()}\nComment: copied from {source}"
