"""What each C++ library exports that no shipped header names: linkable, not callable.

A C++ developer can call an exported function only through a declaration. For every library of
the wheel's C++ runtime (executorch/lib/), the functions it exports in ExecuTorch's API
namespace (`executorch::`; `torch::executor::` holds the kernels, reached through the
registry) are read from the symbols the plan already reads (splitter.binaries.itanium), and
each is checked against the identifiers of every header the wheel ships: a function whose name
(a constructor's: its class's; an operator's: its class's) occurs in no header is reported, e.g.
libexecutorch_threadpool's get_threadpool() in 1.5.1, whose header upstream does not ship.

A name that occurs may still be undeclared in that scope: the list is a lower bound, and says
so wherever it is shown (`splitter plan`, the development packages' documentation).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping

from splitter.binaries.itanium import function_name
from splitter.model import PackagePlan, Plan

NAMESPACE = "executorch"
# A nested name in the namespace, with a member function's qualifiers before it.
_IN_NAMESPACE = re.compile(r"_ZN[rVK]*[RO]?10executorch")
# Every byte that cannot be part of an identifier, as a space: a header splits into its words
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_NOT_WORD = bytes(c if c in _WORD_BYTES else 0x20 for c in range(256))
HEADER_SUFFIXES = (".h", ".hpp")


def api_symbols(names: Iterable[str]) -> tuple[str, ...]:
    """The exported `names` that may be functions in ExecuTorch's namespace (a cheap prefix
    test, kept while the wheel is read; `undeclared` reads them)."""
    return tuple(n for n in names if n[:3] == "_ZN" and _IN_NAMESPACE.match(n))


def identifiers(header: bytes) -> set[bytes]:
    """The identifiers a header's text holds (comments and strings too: a lower bound): its
    words, runs of letters, digits and underscores (numbers among them, which no function's
    name equals). translate and split run in C: a fifth of a regular expression's time
    over the 120 headers of a wheel (docs/performance.md)."""
    return set(header.translate(_NOT_WORD).split())


def undeclared(
    symbols: Mapping[str, tuple[str, ...]], named: set[bytes]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Per library path (sorted), the qualified functions of its `symbols` (api_symbols)
    whose name occurs in no header (`named`: identifiers of every shipped header); a symbol
    the reader cannot follow is listed as it is mangled."""
    found = []
    for path in sorted(symbols):
        names: set[str] = set()
        for symbol in symbols[path]:
            try:
                parts = function_name(symbol)
            except ValueError:
                names.add(symbol)
                continue
            if parts is None or parts[0] != NAMESPACE:
                continue
            last = parts[-1]
            key = parts[-2] if last.startswith("operator") and len(parts) > 1 else last
            if key.lstrip("~").encode() not in named:
                names.add("::".join(parts))
        if names:
            found.append((path, tuple(sorted(names))))
    return tuple(found)


DOC_STEM = "splitter-undeclared-functions"  # in the development package's doc directory


def doc_name(arch: str = "") -> str:
    """The document's file name; a Debian one is named for its architecture (`amd64`), as
    Multi-Arch: same packages sharing /usr/share/doc must be (the lists differ by arch)."""
    return f"{DOC_STEM}.{arch}.txt" if arch else f"{DOC_STEM}.txt"


def doc_text(plan: Plan, package: PackagePlan) -> str:
    """The development package's document of `package`'s undeclared functions (empty when
    it has none): per library, each function's qualified name."""
    if not package.undeclared:
        return ""
    head = (
        f"Functions the C++ libraries of {package.name} {package.version} export in "
        f"ExecuTorch's namespace (executorch::) whose name occurs in no header of the "
        f"packages split from {plan.wheel.filename}: a program can link them, but no "
        f"installed header declares them to call them through (upstream does not ship "
        f"their headers). A name that does occur may still be undeclared in that scope, so "
        f'this list is a lower bound. `splitter plan --json` gives it as "undeclared".'
    )
    lines = [*textwrap.wrap(head, width=79, break_long_words=False, break_on_hyphens=False)]
    for path, names in package.undeclared:
        lines += ["", f"{path.rsplit('/', 1)[-1]} ({len(names)}):", *(f"  {n}" for n in names)]
    return "\n".join(lines) + "\n"
