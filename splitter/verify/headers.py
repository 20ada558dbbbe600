"""The `headers` row of `splitter verify`: which installed headers a C++ developer can include.

Every header under the include directory of the installed `executorch.pc` is compiled alone
(`#include <h>`, C++17, -fsyntax-only) with exactly the Cflags `pkg-config --cflags executorch`
gives, by this machine's C++ compiler (the headers are the same text on every platform). The
recipe the output was built with lists the headers that do not compile alone by upstream's
design ([[headers_not_alone]], each with its reason: mman_windows.h's <_mingw.h>, c10's
#error-guarded complex headers); the row accepts exactly those failures. Any other header that
fails fails the row, with the compiler's first error (above all an include of a file in a
directory the packages ship headers in that no installed package has: a header the split lost),
and so does a listed header that compiles (the list is stale).

The compilations are kept by content in $SPLITTER_CACHE/compiled-headers (compile_alone), so
the outputs of one release, which share their headers, are compiled once. What is linkable but
declared in no shipped header is the plan's (splitter.plan.headers), not this row's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from splitter.input.fetch import cache_root
from splitter.model import HeaderNotAlone, Recipe
from splitter.plan.declared import HEADER_SUFFIXES
from splitter.verify.install import Installed
from splitter.verify.rows import Check, Row, Status, skipped

EXPECTED_HEADERS = "each compiles alone, or fails as the recipe lists"
_MISSING = re.compile(r"fatal error: (?P<name>[^:\s]+): No such file or directory")
_FIRST_ERROR = re.compile(r"^[^\n]*\berror\b[^\n]*$", re.M)


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    """One header compiled alone: ok, or the compiler's reason why not."""

    header: str  # relative to the include directory
    ok: bool
    reason: str = ""


def header_checks(full: Installed, recipe: Recipe) -> list[Check]:
    """The `headers` row of an installed output that has the runtime's executorch.pc (none
    for an output without it: a Python-only selection has no headers to check), judged by
    `recipe`'s [[headers_not_alone]] (the recipe the output was built with)."""
    pc_dir = full.libdir / "pkgconfig"
    if not (pc_dir / "executorch.pc").is_file():
        return []
    compiler = shutil.which("c++") or shutil.which("g++")
    pkg_config = shutil.which("pkg-config")
    if compiler is None or pkg_config is None:
        reason = (
            "needs a C++ compiler (c++) and pkg-config on PATH (apt-get install g++ pkg-config)"
        )
        return [skipped(Row.HEADERS, EXPECTED_HEADERS, reason)]
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc_dir), "PKG_CONFIG_LIBDIR": ""}

    def ask(*args: str) -> str:
        return subprocess.run(
            [pkg_config, *args, "executorch"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    # -I paths normalised: pkg-config gives them through the .pc's own place (lib/pkgconfig/..)
    cflags = tuple(
        f"-I{os.path.normpath(f[2:])}" if f.startswith("-I") else f for f in ask("--cflags").split()
    )
    includedir = Path(os.path.normpath(ask("--variable=includedir")))
    headers = tuple(
        sorted(str(p.relative_to(includedir)) for p in includedir.rglob("*") if _is_header(p))
    )
    results = compile_alone(compiler, cflags, includedir, headers)
    return [_row(results, {e.header: e for e in recipe.headers_not_alone})]


def _is_header(path: Path) -> bool:
    return path.name.endswith(HEADER_SUFFIXES) and path.is_file()


def compile_alone(
    compiler: str, cflags: tuple[str, ...], includedir: Path, headers: tuple[str, ...]
) -> tuple[Compiled, ...]:
    """Each header compiled on its own with `cflags`, on every core. The result depends only
    on the headers' bytes, the flags (with the include directory's place taken out), the
    compiler (its path and `--version`) and this module's text, so it is kept under that
    digest in $SPLITTER_CACHE/compiled-headers: every output of one release shares its
    headers, and a second verify of them costs nothing (as with ccache, a changed byte is
    another key)."""
    place = str(includedir)
    digest = hashlib.sha256()
    identity = subprocess.run([compiler, "--version"], capture_output=True, check=False).stdout
    digest.update(os.path.realpath(compiler).encode() + b"\0" + identity + b"\0")
    digest.update(Path(__file__).read_bytes())  # this module's rules: a change is a new key
    for flag in cflags:
        digest.update(flag.replace(place, "<includedir>").encode() + b"\0")
    for header in headers:
        digest.update(header.encode() + b"\0" + (includedir / header).read_bytes() + b"\0")
    entry = cache_root() / "compiled-headers" / f"{digest.hexdigest()}.json"
    try:
        return tuple(Compiled(**item) for item in json.loads(entry.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass  # not there yet, or unreadable: compile
    shipped = _shipped_directories(includedir, cflags)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = tuple(pool.map(lambda h: _compile(compiler, cflags, h, shipped), headers))
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps([dataclasses.asdict(r) for r in results]), "utf-8")
        partial.replace(entry)  # atomic: a concurrent verify reads all of it or nothing
    return results


def _compile(
    compiler: str, cflags: tuple[str, ...], header: str, shipped: frozenset[str]
) -> Compiled:
    command = [compiler, "-std=c++17", "-fsyntax-only", "-x", "c++", *cflags, "-"]
    result = subprocess.run(
        command, input=f"#include <{header}>\n", capture_output=True, text=True, check=False
    )
    if result.returncode == 0:
        return Compiled(header, True)
    missing = _MISSING.search(result.stderr)
    if missing is not None:
        name = missing["name"]
        lost = name.split("/", 1)[0] in shipped
        where = "which no installed package has" if lost else "not found"
        return Compiled(header, False, f"includes <{name}>, {where}")
    first = _FIRST_ERROR.search(result.stderr)
    return Compiled(header, False, first[0].strip() if first else result.stderr.strip()[-200:])


def _shipped_directories(includedir: Path, cflags: tuple[str, ...]) -> frozenset[str]:
    """The first path component of every installed header, as each -I directory under the
    include directory sees it: an include starting with one of these is the packages' own."""
    names: set[str] = set()
    for flag in cflags:
        if not flag.startswith("-I"):
            continue
        directory = Path(os.path.normpath(flag[2:]))
        if directory != includedir and includedir not in directory.parents:
            continue
        names.update(
            p.relative_to(directory).parts[0]
            for p in directory.rglob("*")
            if _is_header(p) and len(p.relative_to(directory).parts) > 1
        )
    return frozenset(names)


def _row(results: tuple[Compiled, ...], listed: dict[str, HeaderNotAlone]) -> Check:
    """The row: pass when exactly the listed headers fail alone."""
    accepted = [r for r in results if not r.ok and r.header in listed]
    failed = [r for r in results if not r.ok and r.header not in listed]
    stale = [r for r in results if r.ok and r.header in listed]
    notes = [f"{r.header}: {r.reason}" for r in failed]
    notes += [
        f"{r.header}: compiles alone, but the recipe lists it as not "
        f"(headers_not_alone, line {listed[r.header].line}): remove the entry"
        for r in stale
    ]
    notes += [f"{r.header}: {listed[r.header].reason} (as the recipe lists)" for r in accepted]
    outcome = f"{len(results) - len(accepted) - len(failed)} compile alone"
    outcome += f", {len(accepted)} fail as the recipe lists" if accepted else ""
    outcome += f", {len(failed)} fail" if failed else ""
    outcome += f", {len(stale)} listed compile" if stale else ""
    return Check(
        check=Row.HEADERS,
        subject=f"{len(results)} headers",
        expected=EXPECTED_HEADERS,
        outcome=outcome,
        status=Status.FAIL if failed or stale else Status.PASS,
        detail="; ".join(notes),
    )
