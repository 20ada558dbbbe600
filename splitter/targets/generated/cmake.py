"""Render the CMake package config files of each package (pure: writes nothing).

The runtime package installs the core `executorch-config.cmake` and its version file, plus one
fragment per component it ships; every other package installs only its own fragments. The core
config includes whatever fragments are present, so `find_package(executorch COMPONENTS x)`
succeeds exactly when the package shipping `x` is installed, and otherwise names that package.
The variables keep the consumer contract of upstream's 1.5.1 config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

CONFIG = "executorch-config.cmake"
# Upstream's places of the package inside the Python package (its wheel's layout): the documented
# one, and the one CMAKE_PREFIX_PATH=<site-packages>/executorch finds.
UPSTREAM_DIRS = ("executorch/share/cmake", "executorch/lib/cmake/executorch")
VERSION = "executorch-config-version.cmake"
FRAGMENT = "executorch-component-{name}.cmake"
RUNTIME_COMPONENT = "runtime"
# Held out of EXECUTORCH_LIBRARIES, as upstream does: a consumer opts in by name and links the
# variable upstream defines for it. Each fragment's flag and the config's sorting, on both routes,
# are derived from this mapping (component -> variable) alone.
OPT_IN: Mapping[str, str] = MappingProxyType(
    {"kernels_quantized": "EXECUTORCH_QUANTIZED_KERNELS_LIBRARY"}
)
# The order EXECUTORCH_LIBRARIES lists the components in, upstream 1.5.1's on each route: from
# CMake 3.28 the order its config defines the imported targets in; before, the order of its
# by-path list. A component upstream does not know comes after these, in name order.
TARGET_ORDER = (
    "threadpool",
    "kernels_optimized",
    "kernels_torchao",
    "etdump",
    "backend_xnnpack",
    "backend_coreml",
    "backend_mlx",
    "backend_openvino",
    "backend_cuda",
    "extension_cuda",
    "backend_qnn",
)
PATH_ORDER = (
    "kernels_optimized",
    "kernels_torchao",
    "backend_xnnpack",
    "backend_coreml",
    "backend_mlx",
    "backend_cuda",
    "extension_cuda",
    "backend_openvino",
    "threadpool",
    "etdump",
    # not in upstream's by-path list, which leaves the Qualcomm delegate out although its own
    # rule is "every shipped library" and its 3.28 aggregate holds it (docs: departures)
    "backend_qnn",
)
BASE_DEFINITIONS = ("C10_USING_CUSTOM_GENERATED_MACROS", "ET_EVENT_TRACER_ENABLED")
C10_INCLUDE = "executorch/runtime/core/portable_type/c10"
_PLACEHOLDER = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)@")


@dataclass(frozen=True, slots=True, kw_only=True)
class CMakeLayout:
    """Paths the config needs, relative to the directory holding the config files."""

    to_libdir: str
    to_includedir: str
    libdir_from_bindir: str  # `$ORIGIN/<this>` from a consumer installed in <prefix>/bin


def bracket(text: str) -> str:
    """A CMake bracket argument holding `text` verbatim."""
    level = 0
    # The closing bracket must first occur where we put it, not earlier (a `]` ending the text
    # followed by `]]` would close one character early).
    while (text + f"]{'=' * level}]").find(f"]{'=' * level}]") != len(text):
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def escape_quoted(text: str) -> str:
    """`text` for the inside of a CMake quoted argument or a comment: literal, on one line."""
    for char, escaped in (("\\", "\\\\"), ('"', '\\"'), ("$", "\\$"), ("\n", "\\n"), ("\r", "\\r")):
        text = text.replace(char, escaped)
    return text


def configure(template: str, values: Mapping[str, str]) -> str:
    """A template (templates/ beside this module) with every `@KEY@` replaced by `values[KEY]`,
    as CMake's configure_file(@ONLY): values are CMake text already (bracket, escape_quoted)
    and are not scanned again; `${...}` in the template stays literal."""
    text = _read_template(template)
    used = set(_PLACEHOLDER.findall(text))
    problems = []
    if missing := sorted(used - values.keys()):
        problems.append(f"no value for {', '.join(missing)}")
    if unused := sorted(values.keys() - used):
        problems.append(f"no placeholder for {', '.join(unused)}")
    if problems:
        raise ValueError(f"template and values do not match ({'; '.join(problems)}): {template}")
    return _PLACEHOLDER.sub(lambda match: values[match[1]], text)


@cache
def _read_template(name: str) -> str:
    return (resources.files("splitter.targets.generated") / "templates" / name).read_text(
        encoding="utf-8"
    )


def render_version(version: str, build_version: str) -> str:
    """The version file: same major, at least the requested version, ranges honoured."""
    return configure(
        "executorch-config-version.cmake.in",
        {"BUILD_VERSION": escape_quoted(build_version), "VERSION": escape_quoted(version)},
    )


def render_forward(build_version: str, to_config: str, config_dir: str, package: str) -> str:
    """The config at upstream's documented path that loads the package's own (`to_config`:
    its directory, relative to the forwarder's; `config_dir`: where that is, for the reader)."""
    return configure(
        "executorch-config-forward.cmake.in",
        {
            "BUILD_VERSION": escape_quoted(build_version),
            "TO_CONFIG": escape_quoted(to_config),
            "CONFIG_DIR": escape_quoted(config_dir),
            "CONFIG_PACKAGE": escape_quoted(package),
        },
    )


def render_fragment(
    component: str, library: str, package: str, to_libdir: str, extra: str = ""
) -> str:
    """One component: its library (relative to libdir, which is `to_libdir` from the CMake
    directory) and the package that ships it."""
    return (
        configure(
            "executorch-component.cmake.in",
            {
                "COMPONENT": component,
                "LIBRARY": escape_quoted(library),
                "TO_LIBDIR": escape_quoted(to_libdir),
                "OPT_IN": "TRUE" if component in OPT_IN else "FALSE",
                "PACKAGE": escape_quoted(package),
                "PACKAGE_BRACKET": bracket(package),
            },
        )
        + extra
    )


def render_exclusive(component: str, pairs: list[tuple[str, bool, str, str]]) -> str:
    """Exclusivity of one component's library, from the plan's verdicts.

    `pairs` holds (other file name, in effect, an operator both register, sidecar JSON). The
    imported target gets EXECUTORCH_PROCESS_EXCLUSIVE_* properties (CMake >= 3.28); every
    route gets EXECUTORCH_<COMPONENT>_PROCESS_EXCLUSIVE; a pair in effect adds a
    configure-time warning when a target of the project also links the other file.
    """
    if not pairs:
        return ""
    active = [other for other, in_effect, _, _ in pairs if in_effect]
    text = configure(
        "component-exclusive.cmake.in",
        {
            "ACTIVE_BRACKET": bracket(";".join(active)),
            "COMPONENT": component,
            "OTHERS_BRACKET": bracket(";".join(other for other, _, _, _ in pairs)),
            "SIDECAR_BRACKET": bracket("[" + ",".join(data for _, _, _, data in pairs) + "]"),
            "UPPER": component.upper(),
        },
    )
    if not active:
        return text
    examples = ", ".join(f"{other} ({op})" for other, in_effect, op, _ in pairs if in_effect)
    return text + configure(
        "component-exclusive-check.cmake.in",
        {"COMPONENT": component, "EXAMPLES": escape_quoted(examples)},
    )
