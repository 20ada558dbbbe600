"""What licence scanners find in each file's bytes, kept by content digest.

Two maintained scanners, for two jobs (splitter never judges licence text with expressions of
its own):

- ScanCode toolkit (`scancode --license --copyright`) reads a file the way a licence review
  does: every licence notice and SPDX identifier in it, however terse ("GPLv3"), with
  exceptions ("WITH LLVM-exception"). It takes about half a second of CPU per file, so it runs
  when a recipe is reviewed: `splitter licences scan --write` records its findings for every
  file of the wheels in the recipe's scan (`<recipe>.scan.json` beside it).
- Debian's licensecheck reads a file's notices in milliseconds. A plan takes the recipe's scan
  for every file it holds, and scans only the files it does not hold (a new wheel, a changed
  file) with licensecheck, so a plan never waits minutes and never goes without evidence.

Findings are kept by the sha256 the wheel's RECORD gives each file, each with the scanner that
made it; what a scanner found is cached per scanner in `$SPLITTER_CACHE/scan/<scanner>/`, one
small file per digest, so nothing is scanned twice on a machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath

from splitter.errors import ExternalToolError, MissingToolError, RecipeError
from splitter.input.fetch import cache_root
from splitter.input.payload import Payload
from splitter.licensing import Evidence
from splitter.model import WheelInfo
from splitter.tools import need_tool

SCHEMA = "splitter.licence-scan/1"
SCANCODE = "scancode"  # ScanCode toolkit's executable (PyPI: scancode-toolkit-mini)
SCANCODE_INSTALL = (
    "pip install -r ci/locks/scancode.lock (--require-hashes, into a venv of its own: its "
    "plugins need pluggy<1.6) and put that venv's bin on PATH"
)
LICENSECHECK = "licensecheck"
CACHE = "scan"  # $SPLITTER_CACHE/scan/<scanner>/<first two hex digits>/<sha256>.json
BATCH = 2000  # files per scanner run: ScanCode's start-up (its licence index) is paid once
# licensecheck's SPDX short names are SPDX identifiers; the few it has no SPDX name for
# (e.g. "public-domain") become LicenseRef-licensecheck-<name>
_SPDX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]*")

Progress = Callable[[int, int], None]


def read_scan(path: Path) -> dict[str, Evidence]:
    """A recipe's scan: sha256 -> Evidence; a file that is not one names itself."""
    fix = "write it again with `splitter licences scan WHEEL... --write`"
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise RecipeError(
            f"cannot read the recipe's licence scan ({exc.strerror or exc}): {path}\n{fix}"
        ) from exc
    except ValueError as exc:
        raise RecipeError(f"the recipe's licence scan is not JSON ({exc}): {path}\n{fix}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RecipeError(f"the recipe's licence scan is not a {SCHEMA} document: {path}\n{fix}")
    scanner = str(doc.get("scanner", ""))
    return {d: _evidence(entry, scanner) for d, entry in doc["files"].items()}


def render_scan(found: Mapping[str, Evidence]) -> bytes:
    """A recipe's scan document: one line per file, sorted by digest, so a review reads its
    diff; the scanner is named once when one made every finding, else per entry."""
    scanners = {e.scanner for e in found.values()}
    shared = scanners.pop() if len(scanners) == 1 else ""
    head = json.dumps({"schema": SCHEMA, "scanner": shared}, sort_keys=True)[:-1]
    lines = [
        f"{json.dumps(digest)}:{json.dumps(_entry(found[digest], shared), sort_keys=True)}"
        for digest in sorted(found)
    ]
    return (f'{head}, "files": {{\n' + ",\n".join(lines) + "\n}}\n").encode()


def _entry(evidence: Evidence, shared: str = "") -> dict[str, object]:
    entry: dict[str, object] = {
        "copyrights": list(evidence.copyrights),
        "licenses": list(evidence.licenses),
    }
    if evidence.scanner != shared:
        entry["scanner"] = evidence.scanner
    return entry


def _evidence(entry: Mapping[str, object], scanner: str = "") -> Evidence:
    return Evidence(
        licenses=tuple(str(x) for x in entry.get("licenses", ()) or ()),  # type: ignore[attr-defined]
        copyrights=tuple(str(x) for x in entry.get("copyrights", ()) or ()),  # type: ignore[attr-defined]
        scanner=str(entry.get("scanner") or scanner),
    )


def cached(tool: str, digests: Iterable[str], root: Path | None = None) -> dict[str, Evidence]:
    """The findings of scanner `tool` the user's cache holds for `digests`."""
    base = (root or cache_root()) / CACHE / tool
    found = {}
    for digest in digests:
        try:
            entry = json.loads((base / digest[:2] / f"{digest}.json").read_bytes())
        except (OSError, ValueError):
            continue
        found[digest] = _evidence(entry)
    return found


def remember(tool: str, found: Mapping[str, Evidence], root: Path | None = None) -> None:
    """Keep `found` in the user's cache, each file written whole (a temporary file renamed)."""
    base = (root or cache_root()) / CACHE / tool
    for digest, evidence in found.items():
        folder = base / digest[:2]
        folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps({**_entry(evidence), "scanner": evidence.scanner}, sort_keys=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{digest}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data.encode())
        os.replace(temporary, folder / f"{digest}.json")


def _version(exe: str, name: str) -> str:
    """`name` and the version `exe --version` prints first."""
    result = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, check=False, env=_env()
    )
    words = [w.lstrip("v") for w in result.stdout.split() if w.lstrip("v")[:1].isdigit()]
    if result.returncode != 0 or not words:
        raise ExternalToolError(
            f"{exe} --version", [exe, "--version"], result.returncode, result.stderr
        )
    return f"{name} {words[0]}"


def _written(
    files: Mapping[str, tuple[str, bytes]], batch: list[str], folder: Path
) -> dict[str, str]:
    """Write each file of `batch` under its digest with its own suffix (the scanners tell
    file types by name as well as by content); file name -> digest."""
    folder.mkdir()
    names = {}
    for digest in batch:
        suffix = PurePosixPath(files[digest][0]).suffix
        name = f"{digest}{suffix if suffix.isascii() and 1 < len(suffix) < 12 else ''}"
        (folder / name).write_bytes(files[digest][1])
        names[name] = digest
    return names


def scan_scancode(
    files: Mapping[str, tuple[str, bytes]], progress: Progress | None = None
) -> dict[str, Evidence]:
    """ScanCode's findings for `files` (sha256 -> (a wheel path it has, its bytes))."""
    try:
        exe = need_tool(SCANCODE, "", "to scan the files of a wheel for the recipe's review")
    except MissingToolError as exc:
        raise MissingToolError(SCANCODE, exc.why, SCANCODE_INSTALL) from None
    scanner = _version(exe, "scancode-toolkit")
    digests = sorted(files)
    found: dict[str, Evidence] = {}
    for start in range(0, len(digests), BATCH):
        with tempfile.TemporaryDirectory(prefix="splitter-scan-") as scratch:
            folder = Path(scratch) / "files"
            names = _written(files, digests[start : start + BATCH], folder)
            report = Path(scratch) / "scan.json"
            command = [
                exe, "--license", "--copyright", "--quiet", "--processes",
                str(min(4, os.cpu_count() or 1)), "--json", str(report), str(folder),
            ]  # fmt: skip
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, env=_env()
            )
            if result.returncode != 0 or not report.is_file():
                raise ExternalToolError(
                    "scancode", command, result.returncode, result.stderr[-4000:]
                )
            found.update(_read_scancode(report, names, scanner))
        if progress is not None:
            progress(min(start + BATCH, len(digests)), len(digests))
    return _complete(found, digests, scanner)


def _read_scancode(report: Path, names: Mapping[str, str], scanner: str) -> dict[str, Evidence]:
    """ScanCode's JSON report: each scanned file's detections (SPDX) and copyrights."""
    found = {}
    for item in json.loads(report.read_bytes())["files"]:
        digest = names.get(PurePosixPath(item["path"]).name)
        if item.get("type") != "file" or digest is None:
            continue
        licences = sorted(
            {
                d["license_expression_spdx"]
                for d in item.get("license_detections") or ()
                if d.get("license_expression_spdx")
            }
        )
        statements = [
            " ".join(str(c.get("copyright", "")).split()) for c in item.get("copyrights") or ()
        ]
        found[digest] = Evidence(
            licenses=tuple(licences),
            copyrights=tuple(dict.fromkeys(s for s in statements if s)),
            scanner=scanner,
        )
    return found


def scan_licensecheck(files: Mapping[str, tuple[str, bytes]]) -> dict[str, Evidence]:
    """licensecheck's findings for `files` (sha256 -> (a wheel path it has, its bytes)): the
    whole of each file read (--lines=0), SPDX short names."""
    exe = need_tool(
        LICENSECHECK, "licensecheck", "to scan files the recipe's licence scan does not hold"
    )
    scanner = _version(exe, "licensecheck")
    digests = sorted(files)
    found: dict[str, Evidence] = {}
    for start in range(0, len(digests), BATCH):
        with tempfile.TemporaryDirectory(prefix="splitter-scan-") as scratch:
            folder = Path(scratch) / "files"
            names = _written(files, digests[start : start + BATCH], folder)
            command = [
                exe, "--machine", "--copyright", "--shortname-scheme=spdx", "--lines=0",
                "--check=.", "--encoding=utf8", "--recursive", str(folder),
            ]  # fmt: skip
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, env=_env()
            )
            if result.returncode != 0:
                raise ExternalToolError(
                    "licensecheck", command, result.returncode, result.stderr[-4000:]
                )
            for line in result.stdout.splitlines():
                fields = line.split("\t")
                digest = names.get(PurePosixPath(fields[0]).name)
                if digest is None or len(fields) < 3:
                    continue
                found[digest] = Evidence(
                    licenses=_licensecheck_licences(fields[1]),
                    copyrights=tuple(
                        c.strip()
                        for c in fields[2].split(" / ")
                        if c.strip() and c != "*No copyright*"
                    ),
                    scanner=scanner,
                )
    return _complete(found, digests, scanner)


def _licensecheck_licences(field: str) -> tuple[str, ...]:
    """licensecheck's licence field ("UNKNOWN", "MIT", "GPL-2.0-or-later and/or MIT") as
    SPDX expressions, one per licence it names."""
    if field.strip() in ("", "UNKNOWN"):
        return ()
    found = []
    for name in re.split(r" and/or | or | and ", field):
        name = name.strip()
        if not name or name == "UNKNOWN":
            continue
        found.append(
            name
            if _SPDX_ID.fullmatch(name)
            else f"LicenseRef-licensecheck-{re.sub(r'[^A-Za-z0-9.-]+', '-', name)}"
        )
    return tuple(sorted(set(found)))


def _complete(found: dict[str, Evidence], digests: list[str], scanner: str) -> dict[str, Evidence]:
    """Every digest with its findings: a file the scanner passed over in silence (empty, or
    not text) was read and found to say nothing."""
    for digest in digests:
        found.setdefault(digest, Evidence(licenses=(), copyrights=(), scanner=scanner))
    return found


def _env() -> dict[str, str]:
    # ScanCode warns on stderr when libmagic's database is not where its wheel looks; the
    # warning is noise here (types come from the bytes and the suffix)
    return {**os.environ, "PYTHONWARNINGS": "ignore", "LC_ALL": "C.UTF-8"}


def _wanted(wheel: WheelInfo, unscanned: Iterable[str]) -> dict[str, str]:
    skip = set(unscanned)
    return {e.sha256: e.path for e in wheel.entries if e.path not in skip}


def gather(
    wheel: WheelInfo,
    unscanned: Iterable[str],
    recipe_scan: Path | None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Evidence]:
    """The findings for every file of `wheel` but the `unscanned` ones, by sha256: from the
    recipe's scan, then licensecheck's cache; the files neither holds are read again from the
    wheel (checked against RECORD), scanned with licensecheck, and kept in the cache."""
    wanted = _wanted(wheel, unscanned)
    reviewed = read_scan(recipe_scan) if recipe_scan is not None else {}
    found = {d: reviewed[d] for d in wanted if d in reviewed}
    found.update(cached(LICENSECHECK, (d for d in wanted if d not in found)))
    missing = sorted(set(wanted) - set(found))
    if missing:
        if progress is not None:
            progress("scan", 0, len(missing))
        with Payload(wheel) as payload:
            files = {d: (wanted[d], payload.read(wanted[d])) for d in missing}
        new = scan_licensecheck(files)
        remember(LICENSECHECK, new)
        found.update(new)
    return found


def gather_scancode(
    wheel: WheelInfo,
    unscanned: Iterable[str],
    recipe_scan: Path | None,
    progress: Progress | None = None,
) -> dict[str, Evidence]:
    """ScanCode's findings for every file of `wheel` but the `unscanned` ones: the recipe's
    scan where ScanCode made it, ScanCode's cache, then ScanCode on the rest (cached)."""
    wanted = _wanted(wheel, unscanned)
    reviewed = read_scan(recipe_scan) if recipe_scan is not None else {}
    found = {
        d: reviewed[d]
        for d in wanted
        if reviewed.get(d) and reviewed[d].scanner.startswith("scancode")
    }
    found.update(cached(SCANCODE, (d for d in wanted if d not in found)))
    missing = sorted(set(wanted) - set(found))
    if missing:
        with Payload(wheel) as payload:
            files = {d: (wanted[d], payload.read(wanted[d])) for d in missing}
        new = scan_scancode(files, progress)
        remember(SCANCODE, new)
        found.update(new)
    return found
