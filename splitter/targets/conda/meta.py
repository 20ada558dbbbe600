"""A conda package's metadata from the plan, the same for the assembled packages and the
rebuild recipes: its build string, its run dependencies (depends) and its run_exports pin."""

from __future__ import annotations

import hashlib

from splitter.model import PackagePlan, Plan


def build_string(plan: Plan, package: PackagePlan) -> str:
    """Deterministic build string: a hash of the input and the package's dependencies."""
    digest = hashlib.sha256()
    digest.update(plan.wheel.sha256.encode())
    digest.update(package.name.encode())
    for dep in package.depends:
        digest.update(dep.name.encode())
    prefix = "py{}{}".format(*plan.platform.python) if package.python else ""
    return f"{prefix}h{digest.hexdigest()[:8]}_0"


def pin_compatible(name: str, version: str) -> str:
    """run_exports pin: same major.minor.patch (ExecuTorch promises no C++ ABI beyond it)."""
    parts = version.split(".")
    upper = ".".join([*parts[:2], str(int(parts[2]) + 1)]) if len(parts) >= 3 else version
    return f"{name} >={version},<{upper}.0a0"


def conda_depends(plan: Plan, package: PackagePlan, builds: dict[str, str]) -> list[str]:
    """Run dependencies: exact sibling pins, externals, C++ runtime, glibc or macOS, Python."""
    depends = [f"{d.name} =={d.version} {builds[d.name]}" for d in package.depends]
    depends += [d.conda for d in package.externals]
    system = dict(plan.recipe.conda_system)
    depends += sorted({system[s] for s in package.system_sonames if s in system})
    if plan.platform.macos:
        depends.append(f"__osx >={plan.platform.macos}")
    else:
        depends.append(f"__glibc >={plan.platform.glibc}")
    if package.python:
        major, minor = plan.platform.python
        depends.append(f"python >={major}.{minor},<{major}.{minor + 1}.0a0")
        depends.append(f"python_abi {major}.{minor}.* *_cp{major}{minor}")
        depends += package.conda_requires
    return sorted(dict.fromkeys(depends))


def run_exports(package: PackagePlan) -> dict[str, list[str]]:
    """Packages that link a library of this package pin it (weak run_exports)."""
    if not package.sonames or package.python:
        return {}
    return {"weak": [pin_compatible(package.name, package.version)]}
