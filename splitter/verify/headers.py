"""The `headers` row of `splitter verify`: what the installed headers give a C++ developer.

Every header under the include directory of the installed `executorch.pc` is compiled alone
(`#include <h>`, C++17, -fsyntax-only) with exactly the Cflags `pkg-config --cflags executorch`
gives, by this machine's C++ compiler (the headers are the same text on every platform). A
header may fail for upstream's own reasons, which the row names and accepts: an `#error` that
refuses inclusion on its own, or a system header this platform does not have (mman_windows.h's
<_mingw.h>). Any other failure fails the row, above all an include of a file in a directory the
packages ship headers in that no installed package has: a header the split lost.

The row also says what is linkable but not callable: the exported C++ functions of each
installed ELF library (binutils' `nm -D -C --defined-only`) whose name occurs in no installed
header (e.g. libexecutorch_threadpool.so's `get_threadpool`: upstream ships only
threadpool_guard.h). A name that occurs may still be undeclared in that scope: the list is a
lower bound, stated as such.

The compilations are kept by content in $SPLITTER_CACHE/compiled-headers (compile_alone), so
the outputs of one release, which share their headers, are compiled once.
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
from splitter.verify.install import Installed
from splitter.verify.rows import Check, Row, Status, skipped

EXPECTED_HEADERS = "each compiles alone, or fails as upstream's does"
_ERROR_DIRECTIVE = re.compile(r"^(?P<file>[^:\n]+):\d+:\d+: error: #error", re.M)
_MISSING = re.compile(r"fatal error: (?P<name>[^:\s]+): No such file or directory")
_FIRST_ERROR = re.compile(r"^[^\n]*\berror\b[^\n]*$", re.M)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# The API namespace; torch::executor:: holds the kernels, reached through the registry.
NAMESPACE = "executorch::"


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    """One header compiled alone: ok, or why not and whether the reason is upstream's."""

    header: str  # relative to the include directory
    ok: bool
    reason: str = ""
    upstream: bool = False


def header_checks(full: Installed) -> list[Check]:
    """The `headers` row of an installed output that has the runtime's executorch.pc (none
    for an output without it: a Python-only selection has no headers to check)."""
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
    exports = [] if full.platform.startswith("osx") else undeclared_exports(full.libdir, includedir)
    return [_row(results, exports)]


def _is_header(path: Path) -> bool:
    return path.suffix in (".h", ".hpp") and path.is_file()


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
    errors = result.stderr
    directive = _ERROR_DIRECTIVE.search(errors)
    if directive is not None and directive["file"].endswith("/" + header):
        return Compiled(header, False, "#error: not to be included alone", upstream=True)
    missing = _MISSING.search(errors)
    if missing is not None:
        name = missing["name"]
        if name.split("/", 1)[0] in shipped:
            return Compiled(header, False, f"includes <{name}>, which no installed package has")
        return Compiled(header, False, f"includes <{name}>, not on this platform", upstream=True)
    first = _FIRST_ERROR.search(errors)
    return Compiled(header, False, first[0].strip() if first else errors.strip()[-200:])


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


def undeclared_exports(libdir: Path, includedir: Path) -> list[tuple[str, list[str]]]:
    """Per installed ELF library (by file name), its exported C++ functions in ExecuTorch's
    API namespace whose name occurs in no installed header; binutils' nm reads them."""
    nm = shutil.which("nm")
    if nm is None:
        return []
    named: set[str] = set()
    for header in includedir.rglob("*"):
        if _is_header(header):
            named.update(_IDENTIFIER.findall(header.read_text(encoding="utf-8", errors="replace")))
    found = []
    for library in sorted(libdir.glob("lib*.so*")):
        if library.is_symlink() or not library.is_file():
            continue
        listing = subprocess.run(
            [nm, "-D", "-C", "--defined-only", str(library)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        missing = sorted(
            {
                name
                for line in listing.splitlines()
                if (name := _function(line)) is not None and _unqualified(name) not in named
            }
        )
        if missing:
            found.append((library.name, missing))
    return found


def _function(line: str) -> str | None:
    """The qualified name (no parameters, template arguments, ABI tags or the return type nm
    prints for a template instance) of an exported function on a line of `nm -C`, when it is
    in ExecuTorch's API namespace."""
    parts = line.split(" ", 2)
    if len(parts) != 3 or parts[1] not in ("T", "W"):
        return None
    name = re.sub(r"\[abi:\w+\]", "", parts[2])
    while True:  # drop template arguments, innermost first
        stripped = re.sub(r"<[^<>]*>", "", name)
        if stripped == name:
            break
        name = stripped
    name = name.split("(", 1)[0].rsplit(" ", 1)[-1]
    return name if name.startswith(NAMESPACE) else None


def _unqualified(name: str) -> str:
    last = name.rsplit("::", 1)[-1].lstrip("~")
    return "operator" if last.startswith("operator") else last


def _row(results: tuple[Compiled, ...], exports: list[tuple[str, list[str]]]) -> Check:
    failed = [r for r in results if not r.ok]
    ours = [r for r in failed if not r.upstream]
    notes = [f"{r.header}: {r.reason}" for r in ours + [r for r in failed if r.upstream]]
    if exports:
        named = "; ".join(
            f"{library}: {len(names)} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for library, names in exports
        )
        notes.append(f"exported functions named in no installed header: {named}")
    return Check(
        check=Row.HEADERS,
        subject=f"{len(results)} headers",
        expected=EXPECTED_HEADERS,
        outcome=f"{len(results) - len(failed)} compile alone"
        + (f", {len(failed) - len(ours)} fail as upstream's" if len(failed) > len(ours) else "")
        + (f", {len(ours)} fail" if ours else ""),
        status=Status.FAIL if ours else Status.PASS,
        detail="; ".join(notes),
    )
