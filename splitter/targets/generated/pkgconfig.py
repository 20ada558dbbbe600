"""Render the pkg-config files of each package (pure: writes nothing)."""

from __future__ import annotations

from splitter.targets.generated.cmake import C10_INCLUDE


def render_pkgconfig(
    *,
    name: str,
    description: str,
    version: str,
    to_prefix: str,
    libdir: str,
    includedir: str,
    libs: tuple[str, ...],
    retained: tuple[str, ...],
    requires: str = "",
    cflags: bool = True,
    definitions: tuple[str, ...] = (),
    retain: bool = True,
) -> str:
    """A relocatable .pc file (prefix from ${pcfiledir}); `retained` libs stay NEEDED, with
    GNU ld's --no-as-needed when `retain` (ld64 on macOS keeps every dylib it is given)."""
    lines = [
        f"prefix=${{pcfiledir}}/{to_prefix}",
        f"libdir=${{prefix}}/{libdir}",
        f"includedir=${{prefix}}/{includedir}",
        "",
        f"Name: {name}",
        f"Description: {description}",
        f"Version: {version}",
    ]
    if requires:
        lines.append(f"Requires: {requires}")
    flags = ["-L${libdir}"]
    if retained and not retain:
        flags += [f"-l{lib}" for lib in retained]
    elif retained:
        flags += [
            "-Wl,--push-state,--no-as-needed",
            *(f"-l{lib}" for lib in retained),
            "-Wl,--pop-state",
        ]
    flags += [f"-l{lib}" for lib in libs]
    lines.append("Libs: " + " ".join(flags))
    if cflags:
        defs = " ".join(f"-D{d}" for d in definitions)
        lines.append(f"Cflags: -I${{includedir}} -I${{includedir}}/{C10_INCLUDE} {defs}".rstrip())
    return "\n".join(lines) + "\n"
