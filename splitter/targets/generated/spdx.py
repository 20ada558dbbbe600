"""The SPDX 2.3 JSON SBOM each package carries beside its CycloneDX one, rendered from the same
`Bom` (splitter.targets.generated.sbom): the package as the document's primary package
(DESCRIBES), which CONTAINS its files and the third-party components found in them and
DEPENDS_ON its sibling packages, so every package of the document is reachable from it (NTIA
checkers ignore "floating" ones). Files carry SHA-1 (SPDX 2.3 requires it) and SHA-256, the
concluded licence, the licences detected in them and their copyright statements.

The document is a function of its `Bom`: sorted keys, and a namespace derived from the
document's own content."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import quote

from splitter import __version__
from splitter.model import Plan, ThirdParty
from splitter.targets.generated.sbom import (
    TOOL,
    Bom,
    Json,
    content_uuid,
    detected_expression,
    dump,
    file_licences,
    held,
    iso_time,
    packager,
    slug,
)

SPDX_VERSION = "SPDX-2.3"
NOASSERTION = "NOASSERTION"
NONE = "NONE"
DOCUMENT = "SPDXRef-DOCUMENT"
PRIMARY = "SPDXRef-Package"
# where SPDX's own examples put document namespaces; the last part makes each one unique
NAMESPACE_BASE = "https://spdx.org/spdxdocs"
_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.\-]+")
# The placeholder the namespace replaces once the rest is dumped: a JSON key and empty value
# cannot occur inside a string of the dump, where quotes are escaped.
_UNSET = '"documentNamespace":""'


def render_spdx(bom: Bom) -> bytes:
    """The SPDX 2.3 JSON SBOM of `bom.subject`."""
    plan, subject = bom.plan, bom.subject
    spec = plan.package(subject.package)
    supplier, address = packager(plan)
    maker = actor("Organization", supplier, address)
    licences = file_licences(plan)
    components = held(bom)

    files: list[Json] = []
    relationships: list[Json] = [
        {"spdxElementId": DOCUMENT, "relationshipType": "DESCRIBES", "relatedSpdxElement": PRIMARY}
    ]
    for file in bom.files:
        licence = licences.get(file.source)
        detected = detected_expression(licence.detected) if licence is not None else ""
        copyrights = "\n".join(licence.copyrights) if licence is not None else ""
        files.append(
            {
                "SPDXID": file_id(file.path),
                "fileName": f"./{file.path}",
                "checksums": [
                    {"algorithm": "SHA1", "checksumValue": file.sha1},
                    {"algorithm": "SHA256", "checksumValue": file.sha256},
                ],
                "licenseConcluded": licence.concluded if licence is not None else NOASSERTION,
                "licenseInfoInFiles": [detected or NOASSERTION],
                # a scanned text file without a statement has none; a binary's or a generated
                # file's were not looked for
                "copyrightText": copyrights or (NONE if detected else NOASSERTION),
            }
        )
        relationships.append(_relation(PRIMARY, "CONTAINS", file_id(file.path)))

    packages: list[Json] = [
        {
            "SPDXID": PRIMARY,
            "name": subject.name,
            "versionInfo": subject.version,
            "supplier": maker,
            "downloadLocation": NOASSERTION,
            "filesAnalyzed": True,
            "packageVerificationCode": {
                "packageVerificationCodeValue": verification_code(f.sha1 for f in bom.files)
            },
            "licenseConcluded": spec.license or NOASSERTION,
            "licenseDeclared": spec.license or NOASSERTION,
            "copyrightText": NOASSERTION,
            "externalRefs": [_purl_ref(subject.purl)],
            "primaryPackagePurpose": "LIBRARY",
            "sourceInfo": (
                f"split by {TOOL} {__version__} from {plan.wheel.filename} "
                f"(sha256 {plan.wheel.sha256})"
            ),
        }
    ]
    for third, where in components:
        packages.append(_component(third))
        relationships.append(
            _relation(
                PRIMARY,
                "CONTAINS",
                component_id(third.name),
                "; ".join(f"{path}: {context}" for path, context in where),
            )
        )
    for sibling in bom.siblings:
        declared = plan.package(sibling.package).license or NOASSERTION
        packages.append(
            {
                "SPDXID": f"SPDXRef-Sibling-{slug(sibling.name)}",
                "name": sibling.name,
                "versionInfo": sibling.version,
                "supplier": maker,
                "downloadLocation": NOASSERTION,
                "filesAnalyzed": False,
                "licenseConcluded": declared,
                "licenseDeclared": declared,
                "copyrightText": NOASSERTION,
                "externalRefs": [_purl_ref(sibling.purl)],
            }
        )
        relationships.append(
            _relation(PRIMARY, "DEPENDS_ON", f"SPDXRef-Sibling-{slug(sibling.name)}")
        )

    document: Json = {
        "spdxVersion": SPDX_VERSION,
        "dataLicense": "CC0-1.0",
        "SPDXID": DOCUMENT,
        "name": f"{subject.name}-{subject.version}",
        "documentNamespace": "",
        "creationInfo": {
            "created": iso_time(bom.created),
            "creators": [f"Tool: {TOOL}-{__version__}", maker],
        },
        "packages": packages,
        "files": files,
        "relationships": relationships,
    }
    extracted = extracted_licences(plan, [*packages, *files])
    if extracted:
        document["hasExtractedLicensingInfos"] = extracted
    return _with_namespace(dump(document), subject.name, subject.version)


def _with_namespace(text: str, name: str, version: str) -> bytes:
    """The dumped document with its namespace: the package, its version and the name-based
    UUID of the document without it (the same document gets the same namespace)."""
    assert text.count(_UNSET) == 1
    namespace = f"{NAMESPACE_BASE}/{slug(name)}-{quote(version, safe='')}-{content_uuid(text)}"
    return text.replace(_UNSET, f'"documentNamespace":"{namespace}"').encode()


def actor(kind: str, name: str, address: str = "") -> str:
    """An SPDX actor ("Organization: name (address)"). A name holding parentheses gets an
    empty address, as SPDX readers take the last parenthesised part for the address."""
    if address or "(" in name:
        return f"{kind}: {name} ({address})"
    return f"{kind}: {name}"


def file_id(path: str) -> str:
    """A file's SPDX id: from its path's digest (paths hold characters ids cannot)."""
    return f"SPDXRef-File-{hashlib.sha256(path.encode()).hexdigest()[:20]}"


def component_id(name: str) -> str:
    """A third-party component's SPDX id."""
    return f"SPDXRef-Component-{slug(name)}"


def verification_code(sha1s: Iterable[str]) -> str:
    """SPDX 2.3's package verification code: the SHA-1 of the files' SHA-1s, sorted and
    concatenated (the SBOMs themselves are not files of the document)."""
    return hashlib.sha1("".join(sorted(sha1s)).encode()).hexdigest()


def _component(third: ThirdParty) -> Json:
    refs = [_purl_ref(third.purl)] if third.purl else []
    if third.cpe:
        refs.append(
            {
                "referenceCategory": "SECURITY",
                "referenceType": "cpe23Type",
                "referenceLocator": third.cpe,
            }
        )
    return {
        "SPDXID": component_id(third.name),
        "name": third.name,
        **({"versionInfo": third.version} if third.version else {}),
        "supplier": actor("Organization", third.supplier) if third.supplier else NOASSERTION,
        "downloadLocation": third.url or NOASSERTION,
        **({"homepage": third.url} if third.url else {}),
        "filesAnalyzed": False,
        "licenseConcluded": third.license,
        "licenseDeclared": third.license,
        "copyrightText": NOASSERTION,
        **({"externalRefs": refs} if refs else {}),
        "primaryPackagePurpose": "LIBRARY",
    }


def _purl_ref(purl: str) -> Json:
    return {
        "referenceCategory": "PACKAGE-MANAGER",
        "referenceType": "purl",
        "referenceLocator": purl,
    }


def _relation(source: str, kind: str, target: str, comment: str = "") -> Json:
    return {
        "spdxElementId": source,
        "relationshipType": kind,
        "relatedSpdxElement": target,
        **({"comment": comment} if comment else {}),
    }


def extracted_licences(plan: Plan, elements: Iterable[Json]) -> list[Json]:
    """hasExtractedLicensingInfos: every LicenseRef the elements' licence fields name, with
    its text: a component's licence text when the recipe gives it that licence, the wheel's
    licence files for the project's own, else where the scanner's licence database has it."""
    used: set[str] = set()
    for element in elements:
        for key in ("licenseConcluded", "licenseDeclared"):
            used.update(_LICENSE_REF.findall(str(element.get(key, ""))))
        for value in element.get("licenseInfoInFiles", []) or []:  # type: ignore[attr-defined]
            used.update(_LICENSE_REF.findall(str(value)))
    return [{"licenseId": ref, "extractedText": _licence_text(plan, ref)} for ref in sorted(used)]


def _licence_text(plan: Plan, ref: str) -> str:
    for third in plan.recipe.third_party:
        if ref in _LICENSE_REF.findall(third.license) and third.license_text:
            return third.license_text.decode("utf-8", "replace")
    if ref in _LICENSE_REF.findall(plan.wheel.license) and plan.wheel.license_texts:
        return "\n".join(text.decode("utf-8", "replace") for text in plan.wheel.license_texts)
    if ref.startswith("LicenseRef-scancode-"):
        key = ref.removeprefix("LicenseRef-scancode-")
        return (
            f"The licence ScanCode's licence database calls {key}: "
            f"https://scancode-licensedb.aboutcode.org/{key}.html"
        )
    return f"The licence {ref}, which no text in the recipe or the wheel states."
