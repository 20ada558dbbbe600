"""`--target tree`: DESTDIR-style staged trees plus debhelper, RPM and JSON file lists."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from dataclasses import dataclass
from pathlib import Path

from splitter.manifest import Artifact
from splitter.model import Limits, Plan, Rpath, Target
from splitter.plan.layout import Layout, make_layout
from splitter.plan.release import PlatformGroup, ReleasePlanning, planned
from splitter.plan.report import dependency_json, shared_json, verdict_json
from splitter.targets.builder import artifact, build_output, single
from splitter.targets.stage import Progress, Staged, StagedFile, doc_sbom, own_directories, stage

TREE_LICENSES = "share/licenses/{package}"  # each package's licence texts, as RPM's


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeBuilder:
    """`--target tree` with its options; the layout follows each wheel (its site-packages).

    One wheel: OUT/<package>/<prefix>/... and OUT/<package>.{install,files,json}. A release:
    OUT/<subdir>/, the shared packages' trees once (from the group's source wheel) and each
    Python package's tree per input wheel, named <package>-py3XY, each with its own
    site-packages and file lists. The artifacts are the `.json` file lists."""

    prefix: str
    libdir: str
    includedir: str
    sitedir: str | None
    rpath: Rpath = Rpath.RELATIVE
    guard: bool = False
    target: Target = Target.TREE

    @property
    def limits(self) -> Limits:
        """Every platform, and releases."""
        return Limits(target=self.target)

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the class."""
        checked = planned(release, progress)
        one = single(checked)
        written: list[Artifact] = []
        for group in checked.groups:
            for plan in group.plans:
                layout = make_layout(
                    plan.wheel, self.prefix, self.libdir, self.includedir, self.sitedir
                )
                python = "py{}{}".format(*plan.platform.python)
                names = {
                    p.name: p.name
                    if one is not None or p.name in group.shared_packages
                    else f"{p.name}-{python}"
                    for p in group.packaged_from(plan)
                }
                folder = build if one is not None else build / group.subdir
                shared = group if one is None and plan is group.source else None
                _write_trees(plan, folder, layout, self.rpath, progress, self.guard, names, shared)
                written += [
                    artifact(str((folder / f"{names[p.name]}.json").relative_to(build)), plan, p)
                    for p in group.packaged_from(plan)
                ]
        return written


def build_tree(
    plan: Plan,
    out: Path,
    layout: Layout,
    rpath: Rpath = Rpath.RELATIVE,
    progress: Progress | None = None,
    guard: bool = False,
) -> list[Path]:
    """Write OUT/<package>/<prefix>/... and OUT/<package>.{install,files,json}; atomic. The
    layout's prefix, libdir, includedir and sitedir are the tree's."""
    builder = TreeBuilder(
        prefix=layout.prefix,
        libdir=layout.libdir,
        includedir=layout.includedir,
        sitedir=layout.sitedir,
        rpath=rpath,
        guard=guard,
    )
    return build_output(builder, plan, out, progress).written


def _write_trees(
    plan: Plan,
    build: Path,
    layout: Layout,
    rpath: Rpath,
    progress: Progress | None,
    guard: bool,
    names: dict[str, str],
    group: PlatformGroup | None = None,
) -> None:
    """Stage the packages in `names` under `build`, each as build/<its name>/<prefix> with
    its file lists (the others are not written: splitter.targets.stage's `only`); a shared
    package of a release (`group`) says in its .json what it stands for (shared_json)."""
    prefix = layout.prefix.strip("/")
    build.mkdir(parents=True, exist_ok=True)
    root_of = {name: build / names[name] / prefix for name in names}
    layout = dataclasses.replace(layout, licensedir=TREE_LICENSES)
    staged = stage(
        plan,
        layout,
        root_of.__getitem__,
        rpath,
        progress,
        guard,
        only=frozenset(names),
        sbom=lambda package: doc_sbom(
            package,
            names.get(package, package),
            plan.wheel.version,
            f"pkg:generic/{names.get(package, package)}@{plan.wheel.version}",
        ),
    )
    for package in plan.packages:
        if package.name not in names:
            continue
        name, files = names[package.name], staged.packages[package.name]
        (build / f"{name}.install").write_text(install_list(files, prefix))
        (build / f"{name}.files").write_text(rpm_files(plan, staged, package.name))
        record = manifest(plan, staged, package.name)
        if group is not None and package.name in group.shared_packages:
            record["release"] = shared_json(group, package)
        (build / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")


def install_list(files: tuple[StagedFile, ...], prefix: str) -> str:
    """debhelper's .install: one staged file per line, relative to the staged root."""
    return "".join(f"{posixpath.join(prefix, f.path)}\n" for f in files)


def rpm_files(plan: Plan, staged: Staged, name: str) -> str:
    """An RPM %files section; %dir for directories this package creates and no dependency has."""
    layout = staged.layout
    package = plan.package(name)
    mine = own_directories(staged, name, (d.name for d in package.depends))
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
        "license": package.license,
        "third_party": list(package.third_party),
        "process_exclusive": [
            verdict_json(v) for v in plan.exclusive if name in (v.first_package, v.second_package)
        ],
        "files": files,
    }
