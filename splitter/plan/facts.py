"""Facts about the target platforms that follow from the wheel and the recipe alone, decided
once by make_plan so that `splitter plan` refuses exactly what `splitter build` would: the
conda subdir and glibc floor of the wheel's platform tag, and the wheel's Requires-Dist in
conda's names."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.markers import default_environment
from packaging.requirements import Requirement

from splitter.errors import RecipeError, UnsupportedWheel, UsageError
from splitter.input.fetch import SUBDIRS
from splitter.model import Plan, Platform, Recipe, WheelInfo

# macOS machine -> conda subdir (upstream ships no macOS x86_64 wheel)
MACOS_SUBDIRS = {"arm64": "osx-arm64"}
MACOS_TAG = re.compile(r"macosx_(\d+)_(\d+)_(\w+)")
LEGACY_GLIBC = {"manylinux2014": "2.17", "manylinux2010": "2.12", "manylinux1": "2.5"}


def subdir_of_tag(tag: str) -> str:
    """The conda subdir of a wheel platform tag ("" when splitter builds for none)."""
    macos = MACOS_TAG.fullmatch(tag)
    if macos is not None:
        return MACOS_SUBDIRS.get(macos.group(3), "")
    machine = next((m for m in SUBDIRS if tag.startswith("manylinux") and tag.endswith(m)), "")
    return SUBDIRS.get(machine, "")


def decide_platform(wheel: WheelInfo) -> Platform:
    """The platform a wheel's tags name; refuses tags there is no conda subdir for."""
    return platform_of(wheel.python_tag, wheel.platform_tag)


def platform_of(python: str, tag: str) -> Platform:
    """The platform of a python tag (cp312) and a platform tag; see decide_platform."""
    macos = MACOS_TAG.fullmatch(tag)
    if macos is not None and macos.group(3) in MACOS_SUBDIRS:
        return Platform(
            tag=tag,
            machine=macos.group(3),
            conda_subdir=MACOS_SUBDIRS[macos.group(3)],
            glibc="",
            python=(int(python[2]), int(python[3:])),
            macos=f"{macos.group(1)}.{macos.group(2)}",
        )
    machine = next((m for m in SUBDIRS if tag.startswith("manylinux") and tag.endswith(m)), None)
    if machine is None:
        raise UnsupportedWheel(
            f"no conda subdir for platform tag (only manylinux x86_64/aarch64 and "
            f"macosx arm64): {tag}"
        )
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    glibc = (
        f"{match.group(1)}.{match.group(2)}"
        if match
        else next((v for k, v in LEGACY_GLIBC.items() if tag.startswith(k)), "2.17")
    )
    return Platform(
        tag=tag,
        machine=machine,
        conda_subdir=SUBDIRS[machine],
        glibc=glibc,
        python=(int(python[2]), int(python[3:])),
    )


def conda_spec(requirement: Requirement, conda_name: str) -> str:
    """A conda MatchSpec for a pip requirement's version specifiers."""
    pieces = []
    for spec in sorted(requirement.specifier, key=str):
        op, version = spec.operator, spec.version
        if op == "~=":
            head = ".".join(version.split(".")[:-1])
            pieces += [f">={version}", f"{head}.*"]
        elif op == "===":
            pieces.append(f"=={version}")
        else:
            pieces.append(f"{op}{version}")
    return f"{conda_name} {','.join(pieces)}".strip()


def conda_requirements(wheel: WheelInfo, recipe: Recipe, platform: Platform) -> tuple[str, ...]:
    """The wheel's Requires-Dist that apply on its own platform and Python, as conda specs
    named through the recipe's [conda.names]; every unnamed one is listed in one error."""
    major, minor = platform.python
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(
        {
            "python_version": f"{major}.{minor}",
            "python_full_version": f"{major}.{minor}.0",
            "platform_system": "Darwin" if platform.macos else "Linux",
            "sys_platform": "darwin" if platform.macos else "linux",
            "platform_machine": platform.machine,
            "os_name": "posix",
            "implementation_name": "cpython",
            "extra": "",
        }
    )
    names = dict(recipe.conda_names)
    specs, missing = [], []
    for text in wheel.requires_dist:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(env):
            continue
        conda_name = names.get(requirement.name.lower()) or names.get(requirement.name)
        if conda_name is None:
            missing.append(requirement.name)
            continue
        specs.append(conda_spec(requirement, conda_name))
    if missing:
        raise RecipeError(
            f"Requires-Dist names without a conda name ({', '.join(sorted(missing))}): "
            f"{recipe.path}\nadd them under [conda.names]"
        )
    return tuple(sorted(specs))


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
        raise linux_only(target, plan.platform.tag, plan.wheel.filename)
    return arch


def linux_only(target: str, tag: str, wheel: str) -> UsageError:
    """The refusal of a deb or rpm for a wheel of a platform that has none."""
    return UsageError(
        f"--target {target} packages Linux x86_64 and aarch64 wheels only "
        f"(the wheel's platform is {tag}): {wheel}\n"
        f"give a manylinux wheel, or use --target wheel or conda for this platform"
    )
