"""The SBOM rows of `splitter verify`: every SBOM the installed output holds
(splitter.targets.generated.sbom) is a CycloneDX 1.6 document about its package, and every
file it lists is installed with the sha256 it states.

An SBOM lists paths relative to where its package installs (the prefix, or site-packages for
a wheel), which its own place gives: share/doc/<name>/<sbom> under the prefix,
<dist-info>/sboms/<sbom> in site-packages. A file an installer rewrites on purpose (conda
writes the prefix into files that hold its placeholder) is counted and named, not failed, when
its installed bytes hold that prefix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from splitter.verify.install import Installed
from splitter.verify.rows import Check, Row, Status

EXPECTED_SBOM = "valid CycloneDX 1.6, every file installed as listed"


def sbom_checks(full: Installed) -> list[Check]:
    """One row per SBOM installed under `full.root` (sorted by path)."""
    found = sorted(full.root.rglob("sbom*.cdx.json"))
    return [_check(full, path) for path in found]


def _check(full: Installed, path: Path) -> Check:
    subject = path.relative_to(full.root).as_posix()
    base = path.parents[2] if path.parent.name == "sboms" else path.parents[3]
    problems: list[str] = []
    rewritten: list[str] = []
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return _row(subject, [f"not JSON: {exc}"], [], 0)
    if not isinstance(document, dict):
        return _row(subject, ["not a CycloneDX document"], [], 0)
    if document.get("bomFormat") != "CycloneDX" or document.get("specVersion") != "1.6":
        problems.append("not CycloneDX 1.6 (bomFormat, specVersion)")
    if not str(document.get("serialNumber", "")).startswith("urn:uuid:"):
        problems.append("no urn:uuid serialNumber")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or "purl" not in metadata.get("component", {}):
        problems.append("no metadata.component with a purl")
    components = document.get("components")
    files = (
        [c for c in components if isinstance(c, dict) and c.get("type") == "file"]
        if isinstance(components, list)
        else []
    )
    prefix = str(full.home).encode()
    for component in files:
        name = str(component.get("name", ""))
        hashes = {h.get("alg"): h.get("content") for h in component.get("hashes", [])}
        installed = base / name
        if not installed.is_file():
            problems.append(f"{name}: listed, not installed")
            continue
        data = installed.read_bytes()
        if hashlib.sha256(data).hexdigest() != hashes.get("SHA-256"):
            if full.kind == "conda" and prefix in data:
                rewritten.append(name)
            else:
                problems.append(f"{name}: sha256 differs from the SBOM's")
    return _row(subject, problems, rewritten, len(files))


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
