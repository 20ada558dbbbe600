"""`--target tree`: DESTDIR-style staged trees plus debhelper, RPM and JSON file lists."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from pathlib import Path

from splitter.errors import SplitterError
from splitter.layout import Layout, make_layout
from splitter.model import Plan, Rpath
from splitter.output import atomic_output
from splitter.release import Release
from splitter.report import dependency_json, verdict_json
from splitter.targets.stage import Progress, Staged, StagedFile, stage


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeBuilder:
    """`--target tree` with its options; the layout follows each wheel (its site-packages)."""

    prefix: str
    libdir: str
    includedir: str
    sitedir: str | None
    rpath: Rpath = Rpath.RELATIVE
    guard: bool = False

    def build(self, plan: Plan, out: Path, progress: Progress | None = None) -> list[Path]:
        """See build_tree."""
        layout = make_layout(plan.wheel, self.prefix, self.libdir, self.includedir, self.sitedir)
        return build_tree(plan, out, layout, self.rpath, progress, self.guard)

    def build_release(
        self, release: Release, out: Path, progress: Progress | None = None
    ) -> list[Path]:
        """Not yet: a release's trees need a layout per Python within one OUT."""
        raise SplitterError(
            f"--target tree takes one wheel for now, not a release of {len(release.inputs)}: "
            "build each wheel's tree on its own, or use --target conda or wheel"
        )


def build_tree(
    plan: Plan,
    out: Path,
    layout: Layout,
    rpath: Rpath = Rpath.RELATIVE,
    progress: Progress | None = None,
    guard: bool = False,
) -> list[Path]:
    """Write OUT/<package>/<prefix>/... and OUT/<package>.{install,files,json}; atomic."""
    prefix = layout.prefix.strip("/")
    with atomic_output(out) as build:
        staged = stage(plan, layout, lambda name: build / name / prefix, rpath, progress, guard)
        for package in plan.packages:
            files = staged.packages[package.name]
            (build / f"{package.name}.install").write_text(install_list(files, prefix))
            (build / f"{package.name}.files").write_text(rpm_files(plan, staged, package.name))
            (build / f"{package.name}.json").write_text(
                json.dumps(manifest(plan, staged, package.name), indent=2) + "\n"
            )
        written = sorted(p.name for p in build.iterdir())
    return [out / name for name in written]


def install_list(files: tuple[StagedFile, ...], prefix: str) -> str:
    """debhelper's .install: one staged file per line, relative to the staged root."""
    return "".join(f"{posixpath.join(prefix, f.path)}\n" for f in files)


def _directories(files: tuple[StagedFile, ...]) -> set[str]:
    dirs: set[str] = set()
    for item in files:
        parent = posixpath.dirname(item.path)
        while parent:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return dirs


def rpm_files(plan: Plan, staged: Staged, name: str) -> str:
    """An RPM %files section; %dir for directories this package creates and no dependency has."""
    layout = staged.layout
    standard = set()
    for base in (
        layout.libdir,
        layout.includedir,
        layout.sitedir,
        layout.bindir,
        layout.pkgconfigdir,
        f"{layout.libdir}/cmake",
    ):
        while base:
            standard.add(base)
            base = posixpath.dirname(base)
    package = plan.package(name)
    theirs: set[str] = set()
    for dep in package.depends:
        theirs |= _directories(staged.packages[dep.name])
    mine = _directories(staged.packages[name]) - standard - theirs
    root = "/" + layout.prefix.strip("/")
    lines = [f"%files -n {name}"]
    lines += [f"%dir {posixpath.join(root, d)}" for d in sorted(mine)]
    for item in staged.packages[name]:
        lines.append(posixpath.join(root, item.path))
    return "\n".join(lines) + "\n"


def manifest(plan: Plan, staged: Staged, name: str) -> dict[str, object]:
    """Files with sha256 and size, dependencies, sonames, components, exclusivity verdicts."""
    package = plan.package(name)
    root = "/" + staged.layout.prefix.strip("/")
    entries = {e.path: e for e in plan.wheel.entries}
    files = []
    for item in staged.packages[name]:
        # A file staged unchanged from the wheel has the digest staging verified it against;
        # relocated ELF files and generated ones are hashed as written.
        if item.source and item.path not in staged.runpaths:
            size, sha256 = entries[item.source].size, entries[item.source].sha256
        else:
            data = Path(item.real).read_bytes()
            size, sha256 = len(data), hashlib.sha256(data).hexdigest()
        files.append(
            {
                "path": posixpath.join(root, item.path),
                "size": size,
                "sha256": sha256,
                "mode": "0755" if item.executable else "0644",
            }
        )
    return {
        "name": name,
        "version": package.version,
        "summary": package.summary,
        "input": {"filename": plan.wheel.filename, "sha256": plan.wheel.sha256},
        "prefix": root,
        "depends": [dependency_json(d) for d in package.depends],
        "externals": [dependency_json(d) for d in package.externals],
        "system": list(package.system_sonames),
        "sonames": list(package.sonames),
        "cmake_components": list(package.cmake_components),
        "process_exclusive": [
            verdict_json(v) for v in plan.exclusive if name in (v.first_package, v.second_package)
        ],
        "files": files,
    }
