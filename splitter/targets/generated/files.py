"""Files each package gets that the wheel does not carry: CMake config, pkg-config, launchers."""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Mapping

from splitter.model import PackagePlan, Plan
from splitter.plan.layout import Layout
from splitter.plan.report import verdict_json
from splitter.targets.generated.cmake import (
    BASE_DEFINITIONS,
    CONFIG,
    FRAGMENT,
    RUNTIME_COMPONENT,
    UPSTREAM_DIRS,
    VERSION,
    CMakeLayout,
    render_exclusive,
    render_forward,
    render_fragment,
    render_version,
)
from splitter.targets.generated.cmakeconfig import render_config
from splitter.targets.generated.pkgconfig import RUNTIME_NAME, render_pkgconfig

# The words before the input wheel's name wherever a package says where it comes from; a
# changelog that wraps the name and digest over lines lays them out itself.
SPLIT_FROM = "Split by splitter from"


def generated_files(
    plan: Plan,
    package: PackagePlan,
    layout: Layout,
    names: Mapping[str, str] | None = None,
) -> list[tuple[str, str, bool]]:
    """CMake config, pkg-config and console scripts for one package: (path, text, executable).
    `names` gives the package names the CMake messages tell users to install (a distro's,
    e.g. libexecutorch-kernels-quantized); by default the plan's."""
    out: list[tuple[str, str, bool]] = []
    libraries = dict(plan.component_libraries)
    cmake_layout = CMakeLayout(
        to_libdir=posixpath.relpath(layout.libdir, layout.cmakedir),
        to_includedir=posixpath.relpath(layout.includedir, layout.cmakedir),
        libdir_from_bindir=posixpath.relpath(layout.libdir, layout.bindir),
    )
    out += [
        (path, text, False)
        for path, text in cmake_files(plan, package, layout.cmakedir, cmake_layout, names)
    ]
    render = functools.partial(
        render_pkgconfig,
        description=package.summary,
        version=plan.wheel.version,
        to_prefix=posixpath.relpath(".", layout.pkgconfigdir),
        libdir=layout.libdir,
        includedir=layout.includedir,
        gnu=not plan.platform.macos,
    )
    # Every library but the runtime's registers kernels or backends: each stays NEEDED.
    retained = tuple(libraries[c] for c in package.cmake_components if c != RUNTIME_COMPONENT)
    if RUNTIME_COMPONENT in package.cmake_components:
        definitions = BASE_DEFINITIONS + (
            ("ET_USE_THREADPOOL",) if "threadpool" in package.cmake_components else ()
        )
        text = render(
            name=RUNTIME_NAME,
            libs=tuple(_link_name(libraries[c]) for c in package.cmake_components),
            retained=retained,
            definitions=definitions,
        )
        out.append((f"{layout.pkgconfigdir}/executorch.pc", text, False))
    elif package.cmake_components:
        text = render(
            name=package.name,
            libs=tuple(_link_name(libraries[c]) for c in package.cmake_components),
            retained=retained,
            requires=f"executorch = {plan.wheel.version}",
            cflags=False,
        )
        out.append((f"{layout.pkgconfigdir}/{package.name}.pc", text, False))
    if package.python and layout.sitedir:
        out += [(path, text, False) for path, text in forward_files(plan, layout, names)]
    if package.python:
        for name, target in plan.wheel.console_scripts:
            out.append(
                (f"{layout.bindir}/{name}", console_script(target, layout.interpreter), True)
            )
    return out


def cmake_files(
    plan: Plan,
    package: PackagePlan,
    cmakedir: str,
    cmake_layout: CMakeLayout,
    names: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The CMake package files of one package in `cmakedir`, as (path, text): for the runtime
    component the config and its version file, for every other component its fragment with
    its exclusivity block. `names` as for generated_files."""
    libraries = dict(plan.component_libraries)
    called = names or {p.name: p.name for p in plan.packages}
    providers = {
        c: called[p.name]
        for p in plan.packages
        for c in p.cmake_components
        if c != RUNTIME_COMPONENT
    }
    out: list[tuple[str, str]] = []
    for component in package.cmake_components:
        if component == RUNTIME_COMPONENT:
            config = render_config(
                build_version=plan.build_version,
                runtime_library=libraries[component],
                runtime_package=called[package.name],
                providers=providers,
                layout=cmake_layout,
                macos=bool(plan.platform.macos),
            )
            out.append((f"{cmakedir}/{CONFIG}", config))
            version = render_version(plan.wheel.version, plan.build_version)
            out.append((f"{cmakedir}/{VERSION}", version))
        else:
            exclusive = render_exclusive(component, exclusive_pairs(plan, libraries[component]))
            fragment = render_fragment(
                component,
                libraries[component],
                called[package.name],
                cmake_layout.to_libdir,
                exclusive,
            )
            out.append((f"{cmakedir}/{FRAGMENT.format(name=component)}", fragment))
    return out


def forward_files(
    plan: Plan, layout: Layout, names: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """Upstream's CMake directories inside the Python package (<site-packages>/executorch/
    share/cmake, the documented one, and lib/cmake/executorch, which CMAKE_PREFIX_PATH at the
    package finds), for a layout that moves the CMake package to <libdir>/cmake/executorch:
    in each, a config that loads the moved one, naming the package that ships it should it be
    missing, and the same version file (upstream's checks read it as text)."""
    called = names or {p.name: p.name for p in plan.packages}
    runtime = next(p.name for p in plan.packages if RUNTIME_COMPONENT in p.cmake_components)
    version = render_version(plan.wheel.version, plan.build_version)
    out = []
    for upstream in UPSTREAM_DIRS:
        here = f"{layout.sitedir}/{upstream}"
        forward = render_forward(
            plan.build_version,
            posixpath.relpath(layout.cmakedir, here),
            posixpath.join(layout.prefix.rstrip("/") or "<prefix>", layout.cmakedir),
            called[runtime],
        )
        out += [(f"{here}/{CONFIG}", forward), (f"{here}/{VERSION}", version)]
    return out


def split_from(plan: Plan) -> str:
    """The sentence every package's description gives its origin: the input wheel and its
    sha256."""
    return f"{SPLIT_FROM} {plan.wheel.filename} (sha256 {plan.wheel.sha256})."


def exclusive_pairs(plan: Plan, library: str) -> list[tuple[str, bool, str, str]]:
    """Verdicts touching the shipped library `library`, in render_exclusive's form."""
    pairs = []
    for verdict in plan.exclusive:
        names = (verdict.first.rsplit("/", 1)[-1], verdict.second.rsplit("/", 1)[-1])
        if library not in names:
            continue
        other = names[1] if names[0] == library else names[0]
        operator = verdict.operators[0] if verdict.operators else ""
        data = json.dumps(verdict_json(verdict), sort_keys=True, separators=(",", ":"))
        pairs.append((other, verdict.in_effect, operator, data))
    return pairs


def _link_name(library: str) -> str:
    stem = library.removesuffix(".dylib").split(".so", 1)[0]
    return stem[3:] if stem.startswith("lib") else stem


def console_script(target: str, interpreter: str) -> str:
    """A console-script launcher like pip's, for `module:function`."""
    module, _, function = target.partition(":")
    head = function.split(".")[0]
    return (
        f"#!{interpreter}\n"
        "import sys\n"
        f"from {module} import {head}\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit({function}())\n"
    )
