"""What a licence scanner finds in each file's bytes, kept by content digest.

The scanner is ScanCode toolkit (licences and copyright statements; `scancode -l -c`), a
maintained detector: splitter never judges licence text with expressions of its own. Its
findings are kept by the sha256 the wheel's RECORD gives each file, in two places read in
order:

- the recipe's scan (`<recipe>.scan.json` beside it): the findings for every file of the
  wheels the recipe was reviewed against, so that building those wheels needs no scanner;
- the user's cache (`$SPLITTER_CACHE/scan/`), one small file per digest, written by this
  module when it scans what neither holds (a new wheel), so a rebuild does not scan again.

A file is scanned at most once per machine; `splitter licences scan` writes a recipe's scan.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath

from splitter.errors import ExternalToolError, MissingToolError, RecipeError
from splitter.input.fetch import cache_root
from splitter.input.payload import Payload
from splitter.model import Evidence, WheelInfo
from splitter.tools import need_tool

SCHEMA = "splitter.licence-scan/1"
SCANNER = "scancode"  # the executable, from ScanCode toolkit (PyPI: scancode-toolkit-mini)
INSTALL = (
    "pip install scancode-toolkit-mini 'pluggy<1.6' into a venv of its own and put its bin on "
    "PATH (ci/locks/scancode.lock pins a set that works)"
)
# a file's findings in the cache: $SPLITTER_CACHE/scan/<first two hex digits>/<sha256>.json
CACHE = "scan"
BATCH = 2000  # files per scancode run: its start-up (the licence index) is paid once a batch

Progress = Callable[[int, int], None]


def read_scan(path: Path) -> dict[str, Evidence]:
    """A recipe's scan: sha256 -> Evidence; a file that is not one names itself."""
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise RecipeError(
            f"cannot read the recipe's licence scan ({exc.strerror or exc}): {path}\n"
            "write it with `splitter licences scan WHEEL... --write`"
        ) from exc
    except ValueError as exc:
        raise RecipeError(
            f"the recipe's licence scan is not JSON ({exc}): {path}\n"
            "write it again with `splitter licences scan WHEEL... --write`"
        ) from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RecipeError(
            f"the recipe's licence scan is not a {SCHEMA} document: {path}\n"
            "write it again with `splitter licences scan WHEEL... --write`"
        )
    return {digest: _evidence(entry) for digest, entry in doc["files"].items()}


def render_scan(scanner: str, found: Mapping[str, Evidence]) -> bytes:
    """A recipe's scan document: one line per file, sorted by digest, so a review reads its
    diff."""
    head = json.dumps({"schema": SCHEMA, "scanner": scanner}, sort_keys=True)[:-1]
    lines = [
        f"{json.dumps(digest)}:{json.dumps(_entry(found[digest]), sort_keys=True)}"
        for digest in sorted(found)
    ]
    return (f'{head}, "files": {{\n' + ",\n".join(lines) + "\n}}\n").encode()


def _entry(evidence: Evidence) -> dict[str, list[str]]:
    return {"copyrights": list(evidence.copyrights), "licenses": list(evidence.licenses)}


def _evidence(entry: Mapping[str, Iterable[str]]) -> Evidence:
    return Evidence(
        licenses=tuple(entry.get("licenses", ())), copyrights=tuple(entry.get("copyrights", ()))
    )


def cached(digests: Iterable[str], root: Path | None = None) -> dict[str, Evidence]:
    """The findings the user's cache holds for `digests`."""
    base = (root or cache_root()) / CACHE
    found = {}
    for digest in digests:
        try:
            entry = json.loads((base / digest[:2] / f"{digest}.json").read_bytes())
        except (OSError, ValueError):
            continue
        found[digest] = _evidence(entry)
    return found


def remember(found: Mapping[str, Evidence], scanner: str, root: Path | None = None) -> None:
    """Keep `found` in the user's cache, each file written whole (a temporary file renamed)."""
    base = (root or cache_root()) / CACHE
    for digest, evidence in found.items():
        folder = base / digest[:2]
        folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps({**_entry(evidence), "scanner": scanner}, sort_keys=True).encode()
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{digest}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, folder / f"{digest}.json")


def scanner_version() -> str:
    """The scanner's name and version, as its findings record it."""
    exe = need_scanner()
    result = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, check=False, env=_env()
    )
    words = [w for w in result.stdout.split() if w[:1].isdigit()]
    if result.returncode != 0 or not words:
        raise ExternalToolError(
            "scancode --version", [exe, "--version"], result.returncode, result.stderr
        )
    return f"scancode-toolkit {words[0]}"


def need_scanner() -> str:
    """The scancode executable; missing, an error that says how to install it."""
    try:
        return need_tool(SCANNER, "", "to scan files the recipe's licence scan does not hold")
    except MissingToolError as exc:
        raise MissingToolError(SCANNER, exc.why, INSTALL) from None


def scan(
    files: Mapping[str, tuple[str, bytes]], progress: Progress | None = None
) -> dict[str, Evidence]:
    """Scan `files` (sha256 -> (a wheel path it has, its bytes)): their findings by digest.

    Each file is written under its digest with its own suffix (ScanCode tells file types by
    name as well as by content) and scanned in batches of BATCH."""
    exe = need_scanner()
    digests = sorted(files)
    found: dict[str, Evidence] = {}
    for start in range(0, len(digests), BATCH):
        batch = digests[start : start + BATCH]
        with tempfile.TemporaryDirectory(prefix="splitter-scan-") as scratch:
            folder = Path(scratch) / "files"
            folder.mkdir()
            names = {}
            for digest in batch:
                suffix = PurePosixPath(files[digest][0]).suffix
                name = f"{digest}{suffix if suffix.isascii() and len(suffix) < 12 else ''}"
                (folder / name).write_bytes(files[digest][1])
                names[name] = digest
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
            found.update(_read_report(report, names))
        if progress is not None:
            progress(min(start + BATCH, len(digests)), len(digests))
    missing = sorted(set(digests) - set(found))
    if missing:
        raise ExternalToolError(
            "scancode", [exe], 0, f"no findings for {len(missing)} files, e.g. {missing[0]}"
        )
    return found


def _read_report(report: Path, names: Mapping[str, str]) -> dict[str, Evidence]:
    """ScanCode's JSON report: each scanned file's detections (SPDX) and copyrights."""
    found = {}
    for item in json.loads(report.read_bytes())["files"]:
        if item.get("type") != "file":
            continue
        digest = names.get(PurePosixPath(item["path"]).name)
        if digest is None:
            continue
        licences = sorted(
            {
                d["license_expression_spdx"]
                for d in item.get("license_detections") or ()
                if d.get("license_expression_spdx")
            }
        )
        statements: list[str] = []
        for each in item.get("copyrights") or ():
            text = " ".join(str(each.get("copyright", "")).split())
            if text and text not in statements:
                statements.append(text)
        found[digest] = Evidence(licenses=tuple(licences), copyrights=tuple(statements))
    return found


def _env() -> dict[str, str]:
    # ScanCode warns on stderr when libmagic's database is not where its wheel looks; the
    # warning is noise here (types come from the bytes and the suffix)
    return {**os.environ, "PYTHONWARNINGS": "ignore", "LC_ALL": "C.UTF-8"}


def gather(
    wheel: WheelInfo,
    binaries: Iterable[str],
    recipe_scan: Path | None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Evidence]:
    """The scanner's findings for every file of `wheel` but its `binaries`, by sha256: from
    the recipe's scan, then the user's cache; the files neither holds are read again from the
    wheel (checked against RECORD), scanned, and kept in the cache."""
    loadable = set(binaries)
    wanted = {e.sha256: e.path for e in wheel.entries if e.path not in loadable}
    found = read_scan(recipe_scan) if recipe_scan is not None else {}
    found = {d: found[d] for d in wanted if d in found}
    found.update(cached(d for d in wanted if d not in found))
    missing = sorted(set(wanted) - set(found))
    if missing:
        with Payload(wheel) as payload:
            files = {d: (wanted[d], payload.read(wanted[d])) for d in missing}
        report = None if progress is None else (lambda n, t: progress("scan", n, t))
        scanner = scanner_version()
        new = scan(files, report)
        remember(new, scanner)
        found.update(new)
    return found
