"""What the deb and rpm targets share: tools, names from the recipe, staging under a root,
the documentation files every distro package carries, and clamped times."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import ExternalToolError, RecipeError, SplitterError
from splitter.input.payload import Payload
from splitter.model import Distro, PackagePlan, Plan, Rpath
from splitter.plan.layout import Layout
from splitter.plan.report import exclusivity_record
from splitter.targets.stage import Progress, Staged, stage

RECORD = "splitter-process-exclusive.json"  # the exclusivity record, in the package's doc dir


@dataclass(frozen=True, slots=True, kw_only=True)
class Arch:
    """One Linux architecture as each distribution spells it."""

    machine: str  # x86_64, aarch64 (the plan's platform.machine)
    deb: str  # amd64, arm64
    triplet: str  # Debian's multiarch triplet: the libdir is lib/<triplet>


ARCHES = {
    "x86_64": Arch(machine="x86_64", deb="amd64", triplet="x86_64-linux-gnu"),
    "aarch64": Arch(machine="aarch64", deb="arm64", triplet="aarch64-linux-gnu"),
}


def arch_of(plan: Plan, target: str) -> Arch:
    """The architecture of the plan's wheel; other platforms have no deb or rpm."""
    arch = ARCHES.get(plan.platform.machine)
    if arch is None or not plan.platform.tag.startswith("manylinux"):
        raise SplitterError(
            f"--target {target} packages Linux x86_64 and aarch64 wheels only "
            f"(the wheel's platform is {plan.platform.tag}): {plan.wheel.filename}\n"
            f"give a manylinux wheel, or use --target wheel or conda for this platform"
        )
    return arch


def need_tool(command: str, debian_package: str) -> str:
    """The absolute path of `command`; a missing tool names the Debian package holding it."""
    found = shutil.which(command)
    if found is None:
        raise SplitterError(
            f"{command} is not installed (needed to build these packages): {command}\n"
            f"install it: apt-get install {debian_package}"
        )
    return found


SBIN = ("/usr/sbin", "/sbin")


def tool_path() -> str:
    """$PATH with the system's sbin directories after it: dpkg refuses to install anything
    when ldconfig and start-stop-daemon are not on PATH (they are in /sbin and /usr/sbin),
    which a user's or a CI job's PATH need not include."""
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p]
    return os.pathsep.join([*path, *(d for d in SBIN if d not in path)])


def run_tool(
    what: str, command: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] = {}
) -> str:
    """Run a distro tool in the C locale; its stdout, or ExternalToolError with its stderr."""
    result = subprocess.run(
        list(command),
        cwd=cwd,
        env={**os.environ, "LC_ALL": "C.UTF-8", "PATH": tool_path(), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ExternalToolError(what, command, result.returncode, result.stderr + result.stdout)
    return result.stdout


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
