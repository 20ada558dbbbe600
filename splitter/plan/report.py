"""The Plan as JSON: the stable, machine-read form of `splitter plan --json`."""

from __future__ import annotations

from typing import Any

from splitter.model import Dependency, PackagePlan, Plan, Verdict
from splitter.plan.release import PlatformGroup, Release, StampedFile

SCHEMA_VERSION = 1
EXCLUSIVE_SCHEMA = "splitter.process-exclusive/1"  # the exclusivity record every target ships
RECORD = "splitter-process-exclusive.json"  # the exclusivity record, in the package's doc dir


def record_name(arch: str = "") -> str:
    """The exclusivity record's file name in a package's doc dir. A Debian package's carries
    its architecture: a Multi-Arch: same package's files outside arch-qualified paths must be
    identical in every architecture, and each architecture's record names its own wheel."""
    return f"splitter-process-exclusive.{arch}.json" if arch else RECORD


def is_record(name: str) -> bool:
    """Whether a file name is an exclusivity record's (see record_name)."""
    return name.startswith("splitter-process-exclusive.") and name.endswith(".json")


def dependency_json(dep: Dependency) -> dict[str, Any]:
    """One dependency with the binary evidence for it."""
    return {
        "name": dep.name,
        "version": dep.version or "",  # schema 1: "" for an external
        "conda": dep.conda,
        "pip": dep.pip,
        "evidence": list(dep.evidence),
    }


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """A process-exclusivity verdict in the versioned sidecar schema."""
    return {
        "schema": EXCLUSIVE_SCHEMA,
        # per file: its path, package, and the operators it registers in static tables (null
        # when unknown); decisions read these, the evidence is for people
        "files": [
            {
                "path": verdict.first,
                "package": verdict.first_package,
                "operators": verdict.first_operators,
            },
            {
                "path": verdict.second,
                "package": verdict.second_package,
                "operators": verdict.second_operators,
            },
        ],
        "declared": verdict.declared,
        "in_effect": verdict.in_effect,
        "operators": list(verdict.operators),
        "evidence": list(verdict.evidence),
    }


def exclusivity_record(plan: Plan, package: PackagePlan) -> dict[str, Any]:
    """The exclusivity record one package ships: the pairs it is part of, with the input."""
    return {
        "schema": EXCLUSIVE_SCHEMA,
        "package": package.name,
        "input": {"filename": plan.wheel.filename, "sha256": plan.wheel.sha256},
        "pairs": [
            verdict_json(v)
            for v in plan.exclusive
            if package.name in (v.first_package, v.second_package)
        ],
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    """The whole plan; every list is sorted so equal plans give equal JSON."""
    wheel = plan.wheel
    return {
        "schema": SCHEMA_VERSION,
        "input": {
            "name": wheel.name,
            "version": wheel.version,
            "tag": wheel.tag,
            "filename": wheel.filename,
            "sha256": wheel.sha256,
        },
        "build_version": plan.build_version,
        "platform": {
            "tag": plan.platform.tag,
            "machine": plan.platform.machine,
            "conda_subdir": plan.platform.conda_subdir,
            "glibc": plan.platform.glibc,
            "python": "{}.{}".format(*plan.platform.python),
            # schema 1 grows only by keys that carry information: Linux plans are unchanged
            **({"macos": plan.platform.macos} if plan.platform.macos else {}),
        },
        "recipe": plan.recipe.path.name,
        "cmake_components": {c: library for c, library in plan.component_libraries},
        "packages": [
            {
                "name": pkg.name,
                "version": pkg.version,
                "summary": pkg.summary,
                "files": list(pkg.files),
                "bytes": pkg.bytes,
                "depends": [dependency_json(d) for d in pkg.depends],
                "externals": [dependency_json(d) for d in pkg.externals],
                "system": list(pkg.system_sonames),
                "cmake_components": list(pkg.cmake_components),
                "sonames": list(pkg.sonames),
                "conda_requires": list(pkg.conda_requires),
                "license": pkg.license,
                "third_party": list(pkg.third_party),
                # exported functions no shipped header names (splitter.plan.declared)
                **(
                    {"undeclared": {path: list(names) for path, names in pkg.undeclared}}
                    if pkg.undeclared
                    else {}
                ),
            }
            for pkg in plan.packages
        ],
        "binaries": [
            {
                "path": b.path,
                "soname": b.soname,
                "needed": list(b.needed),
                "runpath": list(b.runpath),
                "rpath": list(b.rpath),
                "registry": b.registry,
                "et_operators": list(b.et_operators),
                "torch_schemas": list(b.torch_schemas),
                **({"weak": list(b.weak)} if b.weak else {}),
                **({} if b.operators_known else {"et_operators_known": False}),
            }
            for b in plan.binaries
        ],
        "process_exclusive": [verdict_json(v) for v in plan.exclusive],
        "third_party": third_party_json(plan),
        "licences": licences_json(plan),
        "excluded": [
            {"path": e.path, "reason": e.reason, "detected": list(e.detected)}
            for e in plan.excluded
        ],
    }


def licences_json(plan: Plan) -> list[dict[str, Any]]:
    """Each shipped file whose licence is not simply the project's: a scanner finding of
    another licence in it, a component's code, or a reviewed conclusion (the others are the
    project's own code under its licence, with nothing else found), with its evidence and
    basis."""
    return [
        {
            "path": f.path,
            "package": f.package,
            "concluded": f.concluded,
            "basis": f.basis,
            "detected": list(f.detected),
            "copyrights": list(f.copyrights),
            **({} if f.covered else {"covered": False}),
        }
        for f in plan.licences
        if f.basis != "project" or set(f.detected) - {plan.wheel.license}
    ]


def third_party_json(plan: Plan) -> dict[str, Any]:
    """The recipe's third-party components found in the files (per file, with the symbol
    patterns and their counts, and the path patterns that match it), and those found in no
    file of this wheel."""
    return {
        "found": [
            {
                "component": f.component,
                "path": f.path,
                "package": f.package,
                "symbols": f.symbols,
                "patterns": dict(f.patterns),
                **({"paths": list(f.paths)} if f.paths else {}),
                **({"strings": dict(f.strings)} if f.strings else {}),
            }
            for f in plan.third_party
        ],
        "not_found": list(plan.third_party_missing),
    }


def release_json(release: Release) -> dict[str, Any]:
    """A release: its inputs, and per platform where each package comes from and why the
    shared ones may be shared (the files that differ only in their link stamps)."""
    platforms = []
    for group in release.groups:
        source = group.source.wheel.filename
        rows = [
            {"package": name, "python": None, "wheel": source} for name in group.shared_packages
        ]
        for plan in group.plans:
            rows += [
                {
                    "package": package.name,
                    "python": "{}.{}".format(*plan.platform.python),
                    "wheel": plan.wheel.filename,
                }
                for package in plan.packages
                if package.name not in group.shared_packages
            ]
        platforms.append(
            {
                "subdir": group.subdir,
                "shared_from": source,
                "rule": "the wheel for the oldest Python",
                "pythons": ["{}.{}".format(*p.platform.python) for p in group.plans],
                "identical": "every file of the shared packages, but for the stamped ones",
                "stamped": [stamped_json(f) for f in group.stamped],
                "packages": rows,
            }
        )
    return {
        "schema": SCHEMA_VERSION,
        "release": {"project": release.project, "version": release.version},
        "inputs": [{"filename": name, "sha256": sha} for name, sha in release.inputs],
        "platforms": platforms,
    }


def stamped_json(stamped: StampedFile) -> dict[str, Any]:
    """A file a release compared with its stamps set aside: what, in which wheels, and the
    build strings per wheel."""
    return {
        "path": stamped.path,
        "region": stamped.region,
        "wheels": list(stamped.wheels),
        "strings": [
            {"wheel": s.wheel, "offset": s.offset, "text": s.text} for s in stamped.strings
        ],
    }


def shared_json(group: PlatformGroup, package: PackagePlan) -> dict[str, Any]:
    """What a shared package of a release stands for, as data (release_note's facts): every
    wheel of its platform with its sha256, and each of its files compared with something set
    aside."""
    files = set(package.files)
    return {
        "inputs": [{"filename": name, "sha256": sha} for name, sha in group.inputs],
        "set_aside": [stamped_json(f) for f in group.stamped if f.path in files],
    }
