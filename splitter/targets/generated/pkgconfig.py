"""Render the pkg-config files of each package (pure: writes nothing).

The runtime package's `executorch.pc` keeps upstream's `tools/cmake/executorch.pc.in`: its name,
`exec_prefix`, Cflags (the include directories below and C10_USING_CUSTOM_GENERATED_MACROS) and
`-lexecutorch`; it adds what splitter's CMake config gives too (ET_EVENT_TRACER_ENABLED,
ET_USE_THREADPOOL, the runtime package's other libraries) and a prefix computed from the file's
own place, so the installed prefix can move. Every other package with libraries gets
`<package>.pc`, which `Requires:` executorch at the exact version.
"""

from __future__ import annotations

from collections.abc import Sequence

from splitter.targets.generated.cmake import C10_INCLUDE

# Upstream's Cflags directories, relative to includedir: the prefix, portable_type (which makes
# its complex.h, optional.h, tensor.h... visible unqualified, as upstream's does) and c10 in it.
INCLUDES = ("", "executorch/runtime/core/portable_type", C10_INCLUDE)
# The Name: upstream's .pc.in gives the runtime's; the others are called by their package name.
RUNTIME_NAME = "ExecuTorch"


def keep_needed(libdir: str, files: Sequence[str]) -> str:
    """One linker argument that links `files` (in `libdir`) with GNU ld's --no-as-needed and
    restores the previous state. Registration-only libraries export nothing a program calls,
    so --as-needed (the default of Debian's and Ubuntu's toolchains, and of meson) drops them
    and their kernels are missing at run time. It is one argument, by path, because build
    systems rewrite the others: pkgconf keeps one copy of a `-Wl,--push-state,--no-as-needed`
    / `-Wl,--pop-state` pair two .pc files both carry (so `-l` lands outside it), meson turns
    `-l` into paths inside its own --as-needed group and drops `-L`."""
    return f"-Wl,--push-state,--no-as-needed,{','.join(f'{libdir}/{f}' for f in files)},--pop-state"


def render_pkgconfig(
    *,
    name: str,
    description: str,
    version: str,
    to_prefix: str,
    libdir: str,
    includedir: str,
    libs: Sequence[str],
    retained: Sequence[str] = (),
    requires: str = "",
    cflags: bool = True,
    definitions: Sequence[str] = (),
    gnu: bool = True,
) -> str:
    """A relocatable .pc file (prefix from ${pcfiledir}) linking `libs` (names for -l). The
    files in `retained` (relative to libdir) must stay NEEDED: with `gnu` (GNU ld) they are
    linked once more through keep_needed; ld64 on macOS keeps every dylib it is given."""
    lines = [
        f"prefix=${{pcfiledir}}/{to_prefix}",
        "exec_prefix=${prefix}",
        f"libdir=${{prefix}}/{libdir}",
        f"includedir=${{prefix}}/{includedir}",
        "",
        f"Name: {name}",
        f"Description: {description}",
        f"Version: {version}",
    ]
    if requires:
        lines.append(f"Requires: {requires}")
    flags = ["-L${libdir}", *(f"-l{lib}" for lib in libs)]
    if retained and gnu:
        flags.append(keep_needed("${libdir}", retained))
    lines.append("Libs: " + " ".join(flags))
    if cflags:
        includes = (f"-I${{includedir}}/{d}".rstrip("/") for d in INCLUDES)
        lines.append("Cflags: " + " ".join([*includes, *(f"-D{d}" for d in definitions)]))
    return "\n".join(lines) + "\n"
