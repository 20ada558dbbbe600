"""The SBOM rows of `splitter verify`: every package's SBOMs the installed output holds
(splitter.targets.generated.sbom, .spdx) are a CycloneDX 1.6 document about its package and an
SPDX 2.3 one beside it, with the NTIA minimum elements' author and timestamp, and every file
either lists is installed with the digests they state (SHA-256, SHA-1), the same in both.

An SBOM lists paths relative to where its package installs (the prefix, or site-packages for
a wheel), which its own place gives: share/doc/<name>/<sbom> under the prefix,
<dist-info>/sboms/<sbom> in site-packages. A file an installer rewrites on purpose (conda
writes the prefix into files that hold its placeholder) is counted and named, not failed, when
its installed bytes hold that prefix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from splitter.verify.install import Installed
from splitter.verify.rows import Check, Row, Status

EXPECTED_SBOM = "valid CycloneDX 1.6 and SPDX 2.3 beside it, every file installed as listed"
# each format's names for the digests both list
CDX_ALGS = {"SHA-256": "sha256", "SHA-1": "sha1"}
SPDX_ALGS = {"SHA256": "sha256", "SHA1": "sha1"}


def sbom_checks(full: Installed) -> list[Check]:
    """One row per package: its CycloneDX SBOM installed under `full.root` (sorted by path)
    and the SPDX SBOM beside it."""
    found = sorted(full.root.rglob("sbom*.cdx.json"))
    return [_check(full, path) for path in found]


def _check(full: Installed, path: Path) -> Check:
    subject = path.relative_to(full.root).as_posix()
    base = path.parents[2] if path.parent.name == "sboms" else path.parents[3]
    problems: list[str] = []
    listed: dict[str, dict[str, str]] = {}  # path -> {algorithm: hex digest}, both documents
    cdx = _document(path, problems)
    if cdx is not None:
        problems += _cyclonedx_problems(cdx)
        components = cdx.get("components")
        for component in components if isinstance(components, list) else []:
            if isinstance(component, dict) and component.get("type") == "file":
                if component.get("scope") == "excluded":
                    continue  # a wheel file no package ships
                hashes = {
                    CDX_ALGS.get(h.get("alg"), ""): h.get("content")
                    for h in component.get("hashes", [])
                }
                listed.setdefault(str(component.get("name", "")), {}).update(hashes)
    # the SPDX SBOM beside it, named alike (splitter.targets.generated.sbom.spdx_path; verify
    # reads what a build wrote and imports no target)
    spdx_file = path.with_name(path.name.removesuffix(".cdx.json") + ".spdx.json")
    spdx = _document(spdx_file, problems)
    if spdx is not None:
        problems += _spdx_problems(spdx)
        files = spdx.get("files")
        for entry in files if isinstance(files, list) else []:
            name = str(entry.get("fileName", "")).removeprefix("./")
            hashes = {
                SPDX_ALGS.get(c.get("algorithm"), ""): c.get("checksumValue")
                for c in entry.get("checksums", [])
            }
            known = listed.setdefault(name, {})
            if any(known.get(alg, digest) != digest for alg, digest in hashes.items()):
                problems.append(f"{name}: the SPDX and CycloneDX digests differ")
            known.update(hashes)
    listed.pop("", None)
    rewritten: list[str] = []
    prefix = str(full.home).encode()
    for name, hashes in sorted(listed.items()):
        installed = base / name
        if not installed.is_file():
            problems.append(f"{name}: listed, not installed")
            continue
        data = installed.read_bytes()
        actual = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "sha1": hashlib.sha1(data).hexdigest(),
        }
        # sha256 first: the digest every SBOM of splitter's has given since the first
        wrong = sorted(
            (alg for alg, digest in hashes.items() if actual.get(alg) != digest), reverse=True
        )
        if wrong or not hashes:
            if full.kind == "conda" and prefix in data:
                rewritten.append(name)
            else:
                problems.append(f"{name}: {(wrong or ['digest'])[0]} differs from the SBOMs'")
    return _row(subject, problems, rewritten, len(listed))


def _document(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """The JSON object at `path`, or None with the problem said."""
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: not JSON: {exc}")
        return None
    if not isinstance(document, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return document


def _cyclonedx_problems(document: dict[str, Any]) -> list[str]:
    problems = []
    if document.get("bomFormat") != "CycloneDX" or document.get("specVersion") != "1.6":
        problems.append("not CycloneDX 1.6 (bomFormat, specVersion)")
    if not str(document.get("serialNumber", "")).startswith("urn:uuid:"):
        problems.append("no urn:uuid serialNumber")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or "purl" not in metadata.get("component", {}):
        problems.append("no metadata.component with a purl")
    elif not metadata.get("timestamp") or not metadata.get("authors"):
        problems.append("no metadata timestamp or authors (NTIA minimum elements)")
    return problems


def _spdx_problems(document: dict[str, Any]) -> list[str]:
    problems = []
    if document.get("spdxVersion") != "SPDX-2.3" or document.get("SPDXID") != "SPDXRef-DOCUMENT":
        problems.append("not SPDX 2.3 (spdxVersion, SPDXID)")
    if not document.get("documentNamespace"):
        problems.append("SPDX: no documentNamespace")
    info = document.get("creationInfo")
    if not isinstance(info, dict) or not info.get("created") or not info.get("creators"):
        problems.append("SPDX: no creationInfo created and creators (NTIA minimum elements)")
    return problems


def _row(subject: str, problems: list[str], rewritten: list[str], files: int) -> Check:
    detail = f"{files} files"
    if rewritten:
        detail += f"; {len(rewritten)} rewritten by conda with the prefix: {', '.join(rewritten)}"
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        detail = f"{shown} ({detail})"
    return Check(
        check=Row.SBOM,
        subject=subject,
        expected=EXPECTED_SBOM,
        outcome="failed" if problems else "as expected",
        status=Status.FAIL if problems else Status.PASS,
        detail=detail,
    )
