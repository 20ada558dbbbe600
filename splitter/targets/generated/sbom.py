"""The software bill of materials each package carries (CycloneDX 1.6 JSON): the package and
the wheel it was split from, the third-party code found in its files with the evidence, every
file with its hash, and the sibling packages it depends on.

One renderer for every output format: a format passes its own name and purl for the package and
its siblings and the paths and hashes of the files as it holds them. The document is a function
of its inputs alone (no timestamp, a serial number derived from its content), so a rebuild of
the same split writes the same bytes."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from splitter import __version__
from splitter.model import ComponentFound, Plan, ThirdParty

SBOM_NAME = "sbom.cdx.json"
SPEC_VERSION = "1.6"
# SPDX's operators: a licence string holding one is an expression, not a single identifier
OPERATORS = frozenset({"AND", "OR", "WITH"})

Json = dict[str, object]


@dataclass(frozen=True, slots=True, kw_only=True)
class SbomFile:
    """One file of a package as the SBOM lists it."""

    path: str  # the file's path as the package holds it (prefix-relative, or the wheel path)
    sha256: str  # hex digest of its bytes in the package
    source: str = ""  # the wheel member it comes from ("" when generated)


def render_sbom(
    plan: Plan,
    package: str,
    name: str,
    purl: str,
    files: Sequence[SbomFile],
    siblings: Mapping[str, str],
) -> bytes:
    """The CycloneDX 1.6 JSON SBOM of `package` as one output format names it (`name`, `purl`)
    holding `files`, with `siblings` (name -> purl) the sibling packages it depends on."""
    spec = plan.package(package)
    recipe = {third.name: third for third in plan.recipe.third_party}
    found = [f for f in plan.third_party if f.package == package]
    installed = _installed_paths(files, {f.path for f in found})
    document: Json = {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "tools": {
                "components": [
                    {
                        "type": "application",
                        "name": "splitter",
                        "version": __version__,
                    }
                ]
            },
            "component": {
                "type": "library",
                "bom-ref": purl,
                "name": name,
                "version": plan.wheel.version,
                "purl": purl,
                **({"licenses": [{"expression": spec.license}]} if spec.license else {}),
                "pedigree": {"ancestors": [_wheel_component(plan)]},
            },
        },
        "components": [
            *(
                _third_party_component(
                    recipe[component], [f for f in found if f.component == component], installed
                )
                for component in spec.third_party
            ),
            *(_file_component(file) for file in sorted(files, key=lambda f: f.path)),
            *(
                {"type": "library", "bom-ref": ref, "name": sibling, "purl": ref}
                for sibling, ref in sorted(siblings.items(), key=lambda item: item[1])
            ),
        ],
        # The siblings get no entries of their own: CycloneDX 1.6 reads an entry without
        # dependsOn as "depends on nothing", false of a sibling that needs another (the export
        # package's quantized kernels need the runtime); absent, their dependencies are unknown.
        "dependencies": [{"ref": purl, "dependsOn": sorted(siblings.values())}],
    }
    return _with_serial(_dump(document))


# The end of every document _dump writes: its last two top-level keys, which sort after
# "serialNumber" (render_sbom's top level holds no other key from "s" on).
_TAIL = f',"specVersion":"{SPEC_VERSION}","version":1}}\n'


def _with_serial(text: str) -> bytes:
    """The dumped document with its serial number: RFC 4122 name-based, from the sha256 of the
    document without it, so the same document always gets the same serial and another one
    another. The serial goes where sorted keys put it, before the tail: the bytes a second
    dump with the serial would give, without dumping the export's thousands of file entries
    twice (14 ms of the single wheel's build, docs/performance.md)."""
    assert text.endswith(_TAIL), text[-80:]
    digest = hashlib.sha256(text.encode()).hexdigest()
    serial = f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'sha256:{digest}')}"
    return (
        f"{text[: -len(_TAIL)]},{json.dumps('serialNumber')}:{json.dumps(serial)}{_TAIL}"
    ).encode()


def licenses(expression: str) -> list[Json]:
    """CycloneDX's licence choice for an SPDX string: an identifier for a single SPDX licence,
    an expression for a compound one (AND, OR, WITH) or a LicenseRef (not in the schema's list
    of identifiers)."""
    single = not OPERATORS & set(expression.replace("(", " ").replace(")", " ").split())
    if single and not expression.startswith(("LicenseRef-", "DocumentRef-")):
        return [{"license": {"id": expression}}]
    return [{"expression": expression}]


def _installed_paths(files: Sequence[SbomFile], members: set[str]) -> dict[str, list[str]]:
    """Each of the wheel `members` the package holds -> the paths it holds it at, sorted
    (the members third-party code was found in: a handful of the package's thousands)."""
    out: dict[str, list[str]] = {}
    for file in files:
        if file.source in members:
            out.setdefault(file.source, []).append(file.path)
    return {source: sorted(paths) for source, paths in out.items()}


def _wheel_component(plan: Plan) -> Json:
    """The input wheel, the package's one ancestor, with its purl and digest."""
    wheel = plan.wheel
    # purl's pypi type: the name lowercased with '-' for '_'; version and qualifier values
    # percent-encoded (a local version's '+')
    purl = (
        f"pkg:pypi/{wheel.name.lower().replace('_', '-')}@{quote(wheel.version, safe='')}"
        f"?file_name={quote(wheel.filename, safe='')}"
    )
    return {
        "type": "library",
        "bom-ref": purl,
        "name": wheel.name,
        "version": wheel.version,
        "purl": purl,
        "hashes": [{"alg": "SHA-256", "content": wheel.sha256}],
    }


def _third_party_component(
    third: ThirdParty, found: Sequence[ComponentFound], installed: Mapping[str, list[str]]
) -> Json:
    """A third-party component with its licence, upstream and where it was found."""
    occurrences: list[Json] = []
    for each in sorted(found, key=lambda f: f.path):
        if each.path not in installed:
            raise ValueError(
                f"third-party component found in a file the SBOM does not list "
                f"({third.name}): {each.path}"
            )
        context = "; ".join(
            [f"{count} exported symbols matching {glob}" for glob, count in each.patterns]
            + [f"path matching {glob}" for glob in each.paths]
        )
        occurrences += [
            {"location": path, **({"additionalContext": context} if context else {})}
            for path in installed[each.path]
        ]
    return {
        "type": "library",
        "bom-ref": f"component:{third.name}",
        "name": third.name,
        "licenses": licenses(third.license),
        "externalReferences": [{"type": "vcs", "url": third.url}],
        **({"evidence": {"occurrences": occurrences}} if occurrences else {}),
    }


def _file_component(file: SbomFile) -> Json:
    """A file of the package with its SHA-256."""
    return {
        "type": "file",
        "bom-ref": f"file:{file.path}",
        "name": file.path,
        "hashes": [{"alg": "SHA-256", "content": file.sha256}],
    }


def _dump(document: Json) -> str:
    """The document as the SBOM file holds it: sorted keys, compact, one line (UTF-8 once
    encoded): without an indent json.dumps runs its C encoder, which the export package's
    thousands of file entries need."""
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text + "\n"
