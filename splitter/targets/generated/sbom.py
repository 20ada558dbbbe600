"""The software bill of materials each package carries, CycloneDX 1.6 JSON (this module) and
SPDX 2.3 JSON (splitter.targets.generated.spdx), both rendered from one `Bom`: the package as
one output format names it, the wheel it was split from, the third-party code found in its
files with the evidence, every file with its hashes and concluded licence, the wheel's files
the recipe excludes, and the sibling packages it depends on.

The NTIA minimum elements: each component's supplier, name, version and identifiers (purl,
CPE), the dependency edges from the package, the SBOM's authors (splitter and the packager)
and a timestamp. The documents are functions of their inputs alone: the timestamp is
SOURCE_DATE_EPOCH's, else the wheel's, and the serial number is derived from the content, so
a rebuild of the same split writes the same bytes."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import quote

from splitter import __version__
from splitter.errors import UsageError
from splitter.licensing import ExcludedFile, FileLicence
from splitter.model import ComponentFound, Plan, ThirdParty

SBOM_NAME = "sbom.cdx.json"
SPEC_VERSION = "1.6"
TOOL = "splitter"
# SPDX's operators: a licence string holding one is an expression, not a single identifier
OPERATORS = frozenset({"AND", "OR", "WITH"})

Json = dict[str, object]


@dataclass(frozen=True, slots=True, kw_only=True)
class SbomFile:
    """One file of a package as the SBOMs list it."""

    path: str  # the file's path as the package holds it (prefix-relative, or the wheel path)
    sha256: str  # hex digest of its bytes in the package
    sha1: str  # the same bytes' SHA-1 (SPDX 2.3 requires it of every file)
    source: str = ""  # the wheel member it comes from ("" when generated)


@dataclass(frozen=True, slots=True, kw_only=True)
class SbomPackage:
    """A split package as one output format names, versions and identifies it."""

    package: str  # the plan's name for it
    name: str
    version: str
    purl: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Bom:
    """Everything both SBOMs of one package are rendered from."""

    plan: Plan
    subject: SbomPackage
    files: tuple[SbomFile, ...]  # sorted by path
    siblings: tuple[SbomPackage, ...]  # the split packages it depends on, sorted by purl
    created: int  # seconds since the epoch (sbom_epoch)


def make_bom(
    plan: Plan,
    subject: SbomPackage,
    files: Sequence[SbomFile],
    siblings: Sequence[SbomPackage],
) -> Bom:
    """The inputs of `subject`'s SBOMs, sorted, with the build's time (sbom_epoch)."""
    return Bom(
        plan=plan,
        subject=subject,
        files=tuple(sorted(files, key=lambda f: f.path)),
        siblings=tuple(sorted(siblings, key=lambda s: s.purl)),
        created=sbom_epoch(plan),
    )


def spdx_path(cdx: str) -> str:
    """Where a package's SPDX SBOM goes: beside its CycloneDX one (`cdx`), named alike."""
    return cdx.removesuffix(".cdx.json") + ".spdx.json"


def with_file(bom: Bom, path: str, data: bytes) -> Bom:
    """`bom` listing one more generated file, `data` at `path`: the SPDX SBOM, rendered first,
    which the CycloneDX one, written last, lists with every other file of the package."""
    added = SbomFile(
        path=path, sha256=hashlib.sha256(data).hexdigest(), sha1=hashlib.sha1(data).hexdigest()
    )
    return replace(bom, files=tuple(sorted((*bom.files, added), key=lambda f: f.path)))


def sbom_epoch(plan: Plan) -> int:
    """The SBOMs' creation time: SOURCE_DATE_EPOCH when the builder sets it (the reproducible
    builds convention), else the wheel's newest file time."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return plan.wheel.timestamp
    if not value.isdigit():
        raise UsageError(
            f"SOURCE_DATE_EPOCH is not a count of seconds (reproducible-builds.org): {value!r}\n"
            "set it to an integer such as the last commit's time, or unset it"
        )
    return int(value)


def iso_time(epoch: int) -> str:
    """ISO 8601 UTC to the second, as both SBOM formats write times."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def packager(plan: Plan) -> tuple[str, str]:
    """Who makes the split packages, (name, address): the recipe's Debian or RPM maintainer,
    else the recipe's project as packaged with splitter. The split packages' supplier and an
    author of their SBOMs."""
    for distro in (plan.recipe.deb, plan.recipe.rpm):
        if distro is not None and distro.maintainer:
            name, _, rest = distro.maintainer.partition("<")
            return name.strip(), rest.rstrip(">").strip()
    return f"{plan.recipe.project} packagers (splitter)", ""


def slug(text: str) -> str:
    """`text` as a purl namespace or SPDX id part: lower-case letters, digits and '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def wheel_purl(plan: Plan) -> str:
    """The input wheel's purl: pypi's name normalised (lower case, '-' for '_'), version and
    qualifier values percent-encoded (a local version's '+')."""
    wheel = plan.wheel
    return (
        f"pkg:pypi/{wheel.name.lower().replace('_', '-')}@{quote(wheel.version, safe='')}"
        f"?file_name={quote(wheel.filename, safe='')}"
    )


def held(bom: Bom) -> list[tuple[ThirdParty, list[tuple[str, str]]]]:
    """Each third-party component found in the package's files, in recipe order, with where:
    (installed path, the evidence in words), sorted by path. A component found in a file the
    SBOM does not list is a bug of the caller (ValueError)."""
    plan, package = bom.plan, bom.subject.package
    recipe = {third.name: third for third in plan.recipe.third_party}
    found = [f for f in plan.third_party if f.package == package]
    installed: dict[str, list[str]] = {}
    members = {f.path for f in found}
    for file in bom.files:
        if file.source in members:
            installed.setdefault(file.source, []).append(file.path)
    out = []
    for name in plan.package(package).third_party:
        where: list[tuple[str, str]] = []
        for each in sorted((f for f in found if f.component == name), key=lambda f: f.path):
            if each.path not in installed:
                raise ValueError(
                    f"third-party component found in a file the SBOM does not list "
                    f"({name}): {each.path}"
                )
            where += [(path, evidence(each)) for path in sorted(installed[each.path])]
        out.append((recipe[name], where))
    return out


def evidence(found: ComponentFound) -> str:
    """How a component was recognised in one file, in words (for people)."""
    return "; ".join(
        [f"{count} exported symbols matching {glob}" for glob, count in found.patterns]
        + [f"{count} occurrences of the string {text!r}" for text, count in found.strings]
        + [f"path matching {glob}" for glob in found.paths]
    )


def file_licences(plan: Plan) -> dict[str, FileLicence]:
    """Each shipped wheel file's concluded licence, by wheel path."""
    return {licence.path: licence for licence in plan.licences}


def detected_expression(detected: Sequence[str]) -> str:
    """The licences a scanner detected in one file as one SPDX expression ("" for none): each
    detection applies to the file, so they are joined by AND."""
    found = sorted({d for d in detected if d})
    if not found:
        return ""
    if len(found) == 1:
        return found[0]
    return " AND ".join(f"({d})" if OPERATORS & set(_words(d)) else d for d in found)


def render_sbom(bom: Bom) -> bytes:
    """The CycloneDX 1.6 JSON SBOM of `bom.subject`."""
    plan, subject = bom.plan, bom.subject
    spec = plan.package(subject.package)
    supplier, address = packager(plan)
    components = held(bom)
    licences = file_licences(plan)
    digests = {e.path: e.sha256 for e in plan.wheel.entries} if plan.excluded else {}
    document: Json = {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "timestamp": iso_time(bom.created),
            "authors": [
                {"name": f"{TOOL} {__version__}"},
                {"name": supplier, **({"email": address} if address else {})},
            ],
            "tools": {
                "components": [{"type": "application", "name": TOOL, "version": __version__}]
            },
            "component": {
                "type": "library",
                "bom-ref": subject.purl,
                "name": subject.name,
                "version": subject.version,
                "purl": subject.purl,
                "supplier": {"name": supplier},
                **({"licenses": [{"expression": spec.license}]} if spec.license else {}),
                "pedigree": {"ancestors": [_wheel_component(plan)]},
            },
        },
        "components": [
            *(_third_party_component(third, where) for third, where in components),
            *(_file_component(file, licences.get(file.source)) for file in bom.files),
            *(
                _excluded_component(e, digests[e.path])
                for e in sorted(plan.excluded, key=lambda e: e.path)
            ),
            *(
                {
                    "type": "library",
                    "bom-ref": sibling.purl,
                    "name": sibling.name,
                    "version": sibling.version,
                    "purl": sibling.purl,
                    "supplier": {"name": supplier},
                }
                for sibling in bom.siblings
            ),
        ],
        # The siblings and components get no entries of their own: CycloneDX 1.6 reads an
        # entry without dependsOn as "depends on nothing", false of a sibling that needs
        # another (the export package's quantized kernels need the runtime); absent, their
        # dependencies are unknown.
        "dependencies": [
            {
                "ref": subject.purl,
                "dependsOn": sorted(
                    [f"component:{third.name}" for third, _ in components]
                    + [sibling.purl for sibling in bom.siblings]
                ),
            }
        ],
    }
    return _with_serial(dump(document))


# The end of every document dump writes for render_sbom: its last two top-level keys, which
# sort after "serialNumber" (render_sbom's top level holds no other key from "s" on).
_TAIL = f',"specVersion":"{SPEC_VERSION}","version":1}}\n'


def _with_serial(text: str) -> bytes:
    """The dumped document with its serial number: RFC 4122 name-based, from the sha256 of the
    document without it, so the same document always gets the same serial and another one
    another. The serial goes where sorted keys put it, before the tail: the bytes a second
    dump with the serial would give, without dumping the export's thousands of file entries
    twice (14 ms of the single wheel's build, docs/performance.md)."""
    assert text.endswith(_TAIL), text[-80:]
    serial = f"urn:uuid:{content_uuid(text)}"
    return (
        f"{text[: -len(_TAIL)]},{json.dumps('serialNumber')}:{json.dumps(serial)}{_TAIL}"
    ).encode()


def content_uuid(text: str) -> uuid.UUID:
    """RFC 4122's name-based UUID of the sha256 of `text`."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    return uuid.uuid5(uuid.NAMESPACE_URL, f"sha256:{digest}")


def licenses(expression: str, acknowledgement: str = "") -> list[Json]:
    """CycloneDX's licence choice for an SPDX string: an identifier for a single SPDX licence,
    an expression for a compound one (AND, OR, WITH) or a LicenseRef (not in the schema's list
    of identifiers); with `acknowledgement` ("concluded", "declared") when given."""
    said = {"acknowledgement": acknowledgement} if acknowledgement else {}
    if _single(expression):
        return [{"license": {"id": expression, **said}}]
    return [{"expression": expression, **said}]


@functools.cache
def _single(expression: str) -> bool:
    """Whether `expression` is one licence of SPDX's list (no operator, no LicenseRef); asked
    once per distinct expression, as the export package's thousands of files share a few."""
    compound = OPERATORS & set(_words(expression))
    return not compound and not expression.startswith(("LicenseRef-", "DocumentRef-"))


def _words(expression: str) -> list[str]:
    return expression.replace("(", " ").replace(")", " ").split()


def _wheel_component(plan: Plan) -> Json:
    """The input wheel, the package's one ancestor, with its purl and digest."""
    wheel = plan.wheel
    purl = wheel_purl(plan)
    return {
        "type": "library",
        "bom-ref": purl,
        "name": wheel.name,
        "version": wheel.version,
        "purl": purl,
        "hashes": [{"alg": "SHA-256", "content": wheel.sha256}],
    }


def _third_party_component(third: ThirdParty, where: Sequence[tuple[str, str]]) -> Json:
    """A third-party component with its identity, licence, upstream and where it was found."""
    occurrences = [
        {"location": path, **({"additionalContext": context} if context else {})}
        for path, context in where
    ]
    return {
        "type": "library",
        "bom-ref": f"component:{third.name}",
        "name": third.name,
        **({"version": third.version} if third.version else {}),
        **({"supplier": {"name": third.supplier}} if third.supplier else {}),
        **({"purl": third.purl} if third.purl else {}),
        **({"cpe": third.cpe} if third.cpe else {}),
        "licenses": licenses(third.license),
        "externalReferences": [{"type": "vcs", "url": third.url}],
        **({"evidence": {"occurrences": occurrences}} if occurrences else {}),
    }


def _file_component(file: SbomFile, licence: FileLicence | None) -> Json:
    """A file of the package with its hashes and, for a wheel file, its concluded licence,
    the licences detected in it (evidence) and its copyright statements."""
    out: Json = {
        "type": "file",
        "bom-ref": f"file:{file.path}",
        "name": file.path,
        "hashes": [
            {"alg": "SHA-256", "content": file.sha256},
            {"alg": "SHA-1", "content": file.sha1},
        ],
    }
    if licence is not None:
        out["licenses"] = licenses(licence.concluded, "concluded")
        if licence.copyrights:
            out["copyright"] = "\n".join(licence.copyrights)
        detected = detected_expression(licence.detected)
        if detected:
            out["evidence"] = {"licenses": licenses(detected)}
    return out


def _excluded_component(excluded: ExcludedFile, sha256: str) -> Json:
    """A wheel file the recipe excludes from every package, with its digest in the wheel
    (RECORD's) and the reason."""
    path = excluded.path
    detected = detected_expression(excluded.detected)
    return {
        "type": "file",
        "bom-ref": f"excluded:{path}",
        "name": path,
        "scope": "excluded",
        "hashes": [{"alg": "SHA-256", "content": sha256}],
        "properties": [{"name": "splitter:excluded-reason", "value": excluded.reason}],
        **({"evidence": {"licenses": licenses(detected)}} if detected else {}),
    }


def dump(document: Mapping[str, object]) -> str:
    """The document as an SBOM file holds it: sorted keys, compact, one line (UTF-8 once
    encoded): without an indent json.dumps runs its C encoder, which the export package's
    thousands of file entries need."""
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text + "\n"
