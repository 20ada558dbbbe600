"""Conda metadata from the plan: subdir, build strings, depends, run_exports, about extra."""

from __future__ import annotations

import hashlib
import re

from packaging.markers import default_environment
from packaging.requirements import Requirement

from splitter.errors import RecipeError, UnsupportedWheel
from splitter.model import PackagePlan, Plan
from splitter.report import verdict_json

SUBDIRS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}


def conda_subdir(platform_tag: str) -> str:
    """linux-64 / linux-aarch64 from a manylinux platform tag."""
    for arch, subdir in SUBDIRS.items():
        if platform_tag.startswith("manylinux") and platform_tag.endswith(arch):
            return subdir
    raise UnsupportedWheel(
        f"no conda subdir for platform tag (only manylinux x86_64/aarch64): {platform_tag}"
    )


def glibc_floor(platform_tag: str) -> str:
    """The glibc a manylinux tag promises: manylinux_2_28 -> 2.28, manylinux2014 -> 2.17."""
    match = re.match(r"manylinux_(\d+)_(\d+)_", platform_tag)
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    legacy = {"manylinux2014": "2.17", "manylinux2010": "2.12", "manylinux1": "2.5"}
    return next((v for k, v in legacy.items() if platform_tag.startswith(k)), "2.17")


def python_version(plan: Plan) -> tuple[int, int]:
    """The CPython version of the wheel's ABI tag (cp311 -> (3, 11))."""
    tag = plan.wheel.python_tag
    return int(tag[2]), int(tag[3:])


def build_string(plan: Plan, package: PackagePlan) -> str:
    """Deterministic build string: a hash of the input and the package's dependencies."""
    digest = hashlib.sha256()
    digest.update(plan.wheel.sha256.encode())
    digest.update(package.name.encode())
    for dep in package.depends:
        digest.update(dep.name.encode())
    prefix = "py{}{}".format(*python_version(plan)) if package.python else ""
    return f"{prefix}h{digest.hexdigest()[:8]}_0"


def pin_compatible(name: str, version: str) -> str:
    """run_exports pin: same major.minor.patch (ExecuTorch promises no C++ ABI beyond it)."""
    parts = version.split(".")
    upper = ".".join([*parts[:2], str(int(parts[2]) + 1)]) if len(parts) >= 3 else version
    return f"{name} >={version},<{upper}.0a0"


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


def requires_dist_for_conda(plan: Plan) -> list[str]:
    """The wheel's Requires-Dist for its own platform and Python, in conda names."""
    major, minor = python_version(plan)
    arch = "aarch64" if plan.wheel.platform_tag.endswith("aarch64") else "x86_64"
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(
        {
            "python_version": f"{major}.{minor}",
            "python_full_version": f"{major}.{minor}.0",
            "platform_system": "Linux",
            "sys_platform": "linux",
            "platform_machine": arch,
            "os_name": "posix",
            "implementation_name": "cpython",
            "extra": "",
        }
    )
    names = dict(plan.recipe.conda_names)
    specs, missing = [], []
    for text in plan.wheel.requires_dist:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(env):
            continue
        key = requirement.name.lower()
        conda_name = names.get(key) or names.get(requirement.name)
        if conda_name is None:
            missing.append(requirement.name)
            continue
        specs.append(conda_spec(requirement, conda_name))
    if missing:
        raise RecipeError(
            f"Requires-Dist names without a conda name ({', '.join(sorted(missing))}): "
            f"{plan.recipe.path}\nadd them under [conda.names]"
        )
    return sorted(specs)


def conda_depends(plan: Plan, package: PackagePlan, builds: dict[str, str]) -> list[str]:
    """Run dependencies: exact sibling pins, externals, GCC runtime, glibc, Python side."""
    depends = [f"{d.name} =={d.version} {builds[d.name]}" for d in package.depends]
    depends += [d.conda for d in package.externals]
    system = dict(plan.recipe.conda_system)
    depends += sorted({system[s] for s in package.system_sonames if s in system})
    depends.append(f"__glibc >={glibc_floor(plan.wheel.platform_tag)}")
    if package.python:
        major, minor = python_version(plan)
        depends.append(f"python >={major}.{minor},<{major}.{minor + 1}.0a0")
        depends.append(f"python_abi {major}.{minor}.* *_cp{major}{minor}")
        depends += requires_dist_for_conda(plan)
    return sorted(dict.fromkeys(depends))


def run_exports(package: PackagePlan) -> dict[str, list[str]]:
    """Packages that link a library of this package pin it (weak run_exports)."""
    if not package.sonames or package.python:
        return {}
    return {"weak": [pin_compatible(package.name, package.version)]}


def exclusivity_sidecar(plan: Plan, package: PackagePlan) -> dict[str, object]:
    """The versioned process-exclusivity record of one package."""
    return {
        "schema": "splitter.process-exclusive/1",
        "package": package.name,
        "input": {"filename": plan.wheel.filename, "sha256": plan.wheel.sha256},
        "pairs": [
            verdict_json(v)
            for v in plan.exclusive
            if package.name in (v.first_package, v.second_package)
        ],
    }
