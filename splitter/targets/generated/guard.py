"""The optional import guard (`--guard`): refuse to load an export plugin into a process that
already holds a library it would collide with, instead of letting the process abort.

For each process-exclusive pair in effect whose first file is a plugin inside a Python package,
a module `_splitter_guard.py` is added beside the plugin and the package's `__init__.py` calls
it first, before upstream's own loader (whose bare `except:` would swallow the error).
"""

from __future__ import annotations

import posixpath

from splitter.errors import UsageError
from splitter.input.payload import Payload
from splitter.model import Plan

GUARD_MODULE = "_splitter_guard.py"
HOOK = (
    "from . import _splitter_guard as _splitter_guard  # added by splitter --guard\n"
    "_splitter_guard.check()\n"
)

TEMPLATE = '''"""Added by splitter --guard: refuse to load {plugin} next to a colliding library."""

import os
import sys

# (plugin file, its package, colliding library file name, its package, an operator both register)
PAIRS = {pairs!r}


def mapped_files():
    """Paths of the files mapped into this process: /proc/self/maps on Linux, dyld's list of
    loaded images on macOS (which has no /proc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return _dyld_images() if sys.platform == "darwin" else set()
    return {{line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6
             and line.split(None, 5)[5].startswith("/")}}


def _dyld_images():
    import ctypes

    dyld = ctypes.CDLL(None)
    dyld._dyld_image_count.restype = ctypes.c_uint32
    dyld._dyld_get_image_name.restype = ctypes.c_char_p
    dyld._dyld_get_image_name.argtypes = [ctypes.c_uint32]
    names = (dyld._dyld_get_image_name(i) for i in range(dyld._dyld_image_count()))
    return {{os.fsdecode(name) for name in names if name}}


def check():
    """Raise ImportError if a library the plugin collides with is already loaded."""
    loaded = mapped_files()
    for plugin, plugin_package, other, other_package, operator in PAIRS:
        for path in sorted(loaded):
            if os.path.basename(path) == other:
                raise ImportError(
                    f"{{plugin}} ({{plugin_package}}) registers the same ExecuTorch operators as "
                    f"{{path}} ({{other_package}}), which this process has already loaded; "
                    f"loading both aborts the process (Re-registering {{operator}}). "
                    f"Use {{plugin_package}} and {{other_package}} in separate processes."
                )
'''


def guard_files(plan: Plan) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(replaced wheel files, added wheel files) that install the guard; empty when no pair
    in effect has a plugin inside a Python package."""
    by_init: dict[str, list[tuple[str, str, str, str, str]]] = {}
    for verdict in plan.exclusive:
        if not verdict.in_effect:
            continue
        package = plan.package(verdict.first_package)
        if not package.python:
            continue
        init = posixpath.join(posixpath.dirname(verdict.first), "__init__.py")
        if init not in plan.owners:
            raise UsageError(
                f"--guard needs a Python package around the plugin, but {init} is not in "
                f"{plan.wheel.filename}: build without --guard"
            )
        by_init.setdefault(init, []).append(
            (
                verdict.first,
                verdict.first_package,
                verdict.second.rsplit("/", 1)[-1],
                verdict.second_package,
                verdict.operators[0],
            )
        )
    replaced: dict[str, bytes] = {}
    added: dict[str, bytes] = {}
    if not by_init:
        return replaced, added
    with Payload(plan.wheel) as payload:
        for init, pairs in sorted(by_init.items()):
            text = payload.read(init).decode("utf-8")
            lines = text.splitlines(keepends=True)
            # `from __future__` must stay first; the hook goes right after it.
            at = max(
                (
                    i + 1
                    for i, line in enumerate(lines)
                    if line.startswith("from __future__ import")
                ),
                default=0,
            )
            replaced[init] = "".join([*lines[:at], HOOK, *lines[at:]]).encode()
            module = posixpath.join(posixpath.dirname(init), GUARD_MODULE)
            added[module] = TEMPLATE.format(plugin=pairs[0][0], pairs=sorted(pairs)).encode()
    return replaced, added
