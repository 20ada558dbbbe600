"""Facts about the target platforms that follow from the wheel and the recipe alone, decided
once by make_plan so that `splitter plan` refuses exactly what `splitter build` would: the
conda subdir and glibc floor of the wheel's platform tag, and the wheel's Requires-Dist in
conda's names."""

from __future__ import annotations

import re

from packaging.markers import default_environment
from packaging.requirements import Requirement

from splitter.errors import RecipeError, UnsupportedWheel
from splitter.model import Plan, Platform, Recipe, WheelInfo
from splitter.platforms import (
    MACOSX,
    SupportedPlatform,
    by_subdir,
    by_wheel_tag,
    cpython_of,
    supported,
)

MACOS_TAG = re.compile(r"macosx_(\d+)_(\d+)_(\w+)")
LEGACY_GLIBC = {"manylinux2014": "2.17", "manylinux2010": "2.12", "manylinux1": "2.5"}


def subdir_of_tag(tag: str) -> str:
    """The conda subdir of a wheel platform tag ("" when splitter builds for none)."""
    found = _platform_of_tag(tag)
    return "" if found is None else found.subdir


def _platform_of_tag(tag: str) -> SupportedPlatform | None:
    """The supported platform of a wheel platform tag; a macosx tag names its version too."""
    found = by_wheel_tag(tag)
    if found is not None and found.family == MACOSX and MACOS_TAG.fullmatch(tag) is None:
        return None
    return found


def decide_platform(wheel: WheelInfo) -> Platform:
    """The platform a wheel's tags name; refuses tags there is no conda subdir for."""
    return platform_of(wheel.python_tag, wheel.platform_tag)


def platform_of(python: str, tag: str) -> Platform:
    """The platform of a python tag (cp312) and a platform tag; see decide_platform."""
    found = _platform_of_tag(tag)
    if found is None:
        raise UnsupportedWheel(f"no conda subdir for platform tag (only {_known_tags()}): {tag}")
    version = cpython_of(python)
    if version is None:
        raise UnsupportedWheel(f"not a CPython wheel (splitter splits CPython's): {python}")
    macos = MACOS_TAG.fullmatch(tag)
    if macos is not None:
        return Platform(
            tag=tag,
            machine=found.machine,
            conda_subdir=found.subdir,
            glibc="",
            python=version,
            macos=f"{macos.group(1)}.{macos.group(2)}",
        )
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    glibc = (
        f"{match.group(1)}.{match.group(2)}"
        if match
        else next((v for k, v in LEGACY_GLIBC.items() if tag.startswith(k)), "2.17")
    )
    return Platform(
        tag=tag, machine=found.machine, conda_subdir=found.subdir, glibc=glibc, python=version
    )


def _known_tags() -> str:
    """The platform tags splitter splits, by family: manylinux x86_64/aarch64 and macosx arm64."""
    machines: dict[str, list[str]] = {}
    for platform in supported():
        machines.setdefault(platform.family, []).append(platform.machine)
    return spoken([f"{family} {'/'.join(names)}" for family, names in machines.items()])


def spoken(words: list[str]) -> str:
    """Words as a sentence lists them: a, b and c."""
    return " and ".join(filter(None, (", ".join(words[:-1]), *words[-1:])))


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


def arch_of(plan: Plan) -> SupportedPlatform:
    """The platform record of the plan's wheel (its Debian and RPM architectures); the deb and
    rpm builders refuse a wheel of a platform without one before (plan.request.check_planned)."""
    found = by_subdir(plan.platform.conda_subdir)
    assert found is not None, plan.platform
    return found
