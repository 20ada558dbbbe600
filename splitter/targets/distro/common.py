"""What the deb and rpm targets share: names from the recipe, staging under a root,
the documentation files every distro package carries, and clamped times."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from splitter.errors import RecipeError
from splitter.input.payload import Payload
from splitter.model import Distro, PackagePlan, Plan, Rpath
from splitter.plan.layout import Layout
from splitter.plan.report import exclusivity_record
from splitter.targets.stage import Progress, Staged, stage


def distro_of(plan: Plan, kind: str) -> Distro:
    """The recipe's [deb] or [rpm] table; a recipe without it cannot name the packages."""
    distro = plan.recipe.deb if kind == "deb" else plan.recipe.rpm
    if distro is None:
        raise RecipeError(
            f"the recipe has no [{kind}] table (--target {kind} needs the revision and a "
            f"{kind} name for each package): {plan.recipe.path}\n"
            f'add [{kind}] with {"revision" if kind == "deb" else "release"} = "1" and '
            f"[{kind}.names] mapping {', '.join(p.name for p in plan.packages)}"
        )
    return distro


def external_requirements(plan: Plan, package: PackagePlan, kind: str) -> list[str]:
    """The package's externals in deb or rpm spelling; an external the recipe does not map
    for this ecosystem is an error, never dropped."""
    by_name = {e.name: e for e in plan.recipe.externals}
    missing = []
    found = []
    for dep in package.externals:
        value = by_name[dep.name].deb if kind == "deb" else by_name[dep.name].rpm
        if value:
            found.append(value)
        else:
            missing.append(dep.name)
    if missing:
        raise RecipeError(
            f"{package.name} links against {', '.join(missing)}, which the recipe does not "
            f"map for {kind} (externals.{missing[0]}.{kind} is missing): {plan.recipe.path}\n"
            f'add {kind} = "<dependency>" under [externals.{missing[0]}]'
        )
    return found


def stage_under(
    plan: Plan,
    layout: Layout,
    roots: Mapping[str, Path],
    progress: Progress | None,
    guard: bool,
    names: Mapping[str, str],
) -> Staged:
    """Stage every package of the plan as installed under `roots[name]` + the prefix, with
    no RUNPATH where the libdir is the system's (Debian policy, Fedora's check-rpaths); the
    CMake config names the distro packages."""
    prefix = layout.prefix.strip("/")
    return stage(
        plan, layout, lambda name: roots[name] / prefix, Rpath.STRIP, progress, guard, names=names
    )


def license_text(plan: Plan) -> str:
    """The wheel's licence files, verified against the plan, joined."""
    with Payload(plan.wheel) as source:
        return "\n".join(
            source.read(p).decode("utf-8", "replace") for p in plan.wheel.license_files
        )


def record_json(plan: Plan, package: PackagePlan, name: str) -> str:
    """The exclusivity record a distro package ships, under its distro name too."""
    record = exclusivity_record(plan, package)
    record["distro_package"] = name
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def exclusivity_sentence(plan: Plan, package: PackagePlan, path: str) -> str:
    """One sentence for the description: which pairs the record lists and their verdicts."""
    pairs = [v for v in plan.exclusive if package.name in (v.first_package, v.second_package)]
    if not pairs:
        return f"The process-exclusivity record {path} lists no pair for this package."
    states = "; ".join(
        f"{v.first} with {v.second}: {'IN EFFECT' if v.in_effect else 'not in effect'}"
        for v in pairs
    )
    return (
        f"The process-exclusivity record {path} says which files must not share a process "
        f"({states}); installing both packages is fine either way."
    )


def clamp_times(root: Path, epoch: int) -> None:
    """Every file and directory under `root` (itself too) gets mtime `epoch`, deepest first,
    so that the archives do not carry the build's wall clock."""
    for directory, subdirs, files in os.walk(root, topdown=False):
        for name in files + subdirs:
            os.utime(os.path.join(directory, name), (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))


def has_bare_executable(staged: Staged, name: str) -> bool:
    """Whether the package ships an executable file that is neither ELF nor has a #! line
    (the x86_64 1.5.1 wheel has one, the aarch64 wheel none): the linters' overrides for it
    are written only when it is there, since an unused override is itself reported."""
    return any(not head.startswith((b"\x7fELF", b"#!")) for head in _executable_heads(staged, name))


def has_env_script(staged: Staged, name: str) -> bool:
    """Whether the package ships an executable script run through /usr/bin/env (the x86_64
    1.5.1 wheel has 21, the aarch64 wheel none executable); see has_bare_executable."""
    return any(
        head.replace(b" ", b"").startswith(b"#!/usr/bin/env")
        for head in _executable_heads(staged, name)
    )


def _executable_heads(staged: Staged, name: str) -> list[bytes]:
    heads = []
    for item in staged.packages[name]:
        if item.executable:
            with open(item.real, "rb") as handle:
                heads.append(handle.read(32))
    return heads
