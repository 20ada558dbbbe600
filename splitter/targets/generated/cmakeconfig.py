"""Render the core `executorch-config.cmake` the runtime package installs (pure: writes
nothing): locate the prefix from the file's own directory, load whichever component fragments
are installed, name the package to install for a missing component, and define upstream
1.5.1's variables and, on CMake >= 3.28, imported targets. The text is
templates/executorch-config.cmake.in; the fragments and version file are rendered in
splitter.targets.generated.cmake."""

from __future__ import annotations

from collections.abc import Mapping

from splitter.targets.generated.cmake import (
    BASE_DEFINITIONS,
    C10_INCLUDE,
    OPT_IN,
    PATH_ORDER,
    RUNTIME_COMPONENT,
    TARGET_ORDER,
    CMakeLayout,
    bracket,
    configure,
    escape_quoted,
)

# Link options are spelled `-Wl,` (what CMake's `LINKER:` becomes for GCC and Clang, the
# drivers on Linux and macOS), not `LINKER:`: meson's CMake method reads the imported targets'
# INTERFACE_LINK_OPTIONS and passes `LINKER:` to the linker as a file name.
# GNU ld drops a registration-only library nothing calls unless told to keep it NEEDED
RETAIN_OPTION = '\n            "-Wl,--push-state,--no-as-needed,${_executorch_lib},--pop-state"'


def render_config(
    *,
    build_version: str,
    runtime_library: str,
    runtime_package: str,
    providers: dict[str, str],
    layout: CMakeLayout,
    macos: bool = False,
) -> str:
    """The core config: locate the prefix, load fragments, define variables and targets;
    `macos` spells the imported targets' link options for Mach-O, as upstream's macOS config
    does (@loader_path rpaths, no --no-as-needed: ld64 keeps every dylib it is given)."""
    origin = "@loader_path" if macos else "$ORIGIN"
    to_libdir = escape_quoted(layout.libdir_from_bindir)
    rpath = (
        f'"-Wl,-rpath,{origin}"\n        "-Wl,-rpath,{origin}/{to_libdir}" '
        '"-Wl,-rpath,${_executorch_libdir}"'
    )
    return configure(
        "executorch-config.cmake.in",
        {
            "BUILD_VERSION": escape_quoted(build_version),
            "C10_INCLUDE": escape_quoted(C10_INCLUDE),
            "CLEAR_OPT_IN": "\n".join(f"set({variable})" for _, variable in sorted(OPT_IN.items())),
            # Before 3.28 a component is its (wrapped) path, from 3.28 its imported target.
            "COLLECT_PATH": _collect('"${_executorch_lib}"'),
            "COLLECT_TARGET": _collect("${_executorch_target}"),
            "DEFINITIONS": " ".join(BASE_DEFINITIONS),
            "DEFINITION_LIST": escape_quoted(";".join(BASE_DEFINITIONS)),
            "KNOWN": escape_quoted(" ".join(sorted({RUNTIME_COMPONENT, *providers}))),
            # Mach-O: CMake's APPLE; ELF: Linux, where DT_RUNPATH needs --enable-new-dtags
            "PATH_ORDER": " ".join(PATH_ORDER),
            "TARGET_ORDER": " ".join(TARGET_ORDER),
            "LOADER_CONDITION": "APPLE" if macos else 'CMAKE_SYSTEM_NAME STREQUAL "Linux"',
            "PROVIDERS": "\n".join(
                f"set(_executorch_provider_{name} {bracket(package)})"
                for name, package in sorted(providers.items())
            ),
            "RETAIN_OPTION": "" if macos else RETAIN_OPTION,
            "RPATH_OPTIONS": rpath if macos else f'"-Wl,--enable-new-dtags" {rpath}',
            "RUNTIME_COMPONENT": RUNTIME_COMPONENT,
            "RUNTIME_LIBRARY": escape_quoted(runtime_library),
            "RUNTIME_PACKAGE": escape_quoted(runtime_package),
            "RUNTIME_PACKAGE_BRACKET": bracket(runtime_package),
            "TO_INCLUDEDIR": escape_quoted(layout.to_includedir),
            "TO_LIBDIR": escape_quoted(layout.to_libdir),
        },
    )


def _collect(item: str) -> str:
    """Put one component's `item` into EXECUTORCH_LIBRARIES or, for an OPT_IN component, into
    the variable upstream names for it: the one rule both routes share."""
    set_opt_in = "\n".join(
        _block(
            "opt-in-variable.cmake.in",
            {"COMPONENT": escape_quoted(component), "ITEM": item, "VARIABLE": variable},
        )
        for component, variable in sorted(OPT_IN.items())
    )
    return _block("opt-in.cmake.in", {"ITEM": item, "SET_OPT_IN": set_opt_in})


def _block(template: str, values: Mapping[str, str]) -> str:
    """A template's text for a placeholder on a line of its own (final newline dropped)."""
    return configure(template, values).removesuffix("\n")
