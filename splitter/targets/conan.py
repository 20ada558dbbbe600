"""`--target conan`: Conan 2 packages of the C++ side, prebuilt, for C++ developers.

One Conan package per Python-independent split package (executorch-runtime,
executorch-kernels-quantized; the export side is Python and stays out of Conan), version from
the wheel, one binary per os/arch of the release (Linux x86_64, Linux armv8, Macos armv8): the
package ID is made of `os` and `arch` alone, so the binaries match whatever compiler the
consumer's profile names. Each package holds the staged libraries (RUNPATH relative, as conda's),
headers, licence, the exclusivity record, and splitter's generated CMake config: the consumer
writes the same `find_package(executorch COMPONENTS kernels_quantized)` as with every other
channel, found through CMakeToolchain (`cmake_find_mode none`, the config directory as a
`builddirs` entry, which CMakeToolchain puts on CMAKE_PREFIX_PATH); `package_info` gives the
same components, include directories, definitions and kept-NEEDED link flags as splitter's .pc
files to Conan's other generators: PkgConfigDeps writes `executorch.pc` and
`executorch-kernels-quantized.pc`, the names a meson or make project asks for anyway.

OUT holds `<package>/conanfile.py` and `<package>-<version>-<os>-<arch>.conan.tgz`, written by
`conan cache save` from a scratch cache that `conan export-pkg` filled; `conan cache restore`
brings them into any cache (the consumer's CONAN_HOME), with no remote.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pprint
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitter.errors import ExternalToolError, MissingToolError
from splitter.manifest import Artifact
from splitter.model import Limits, PackagePlan, Plan, Rpath, Target
from splitter.plan.layout import make_layout
from splitter.plan.release import ReleasePlanning, planned
from splitter.plan.report import RECORD, exclusivity_record
from splitter.plan.request import check_planned
from splitter.platforms import by_subdir, supported
from splitter.targets.archive import reproducible_tar_gz
from splitter.targets.builder import artifact
from splitter.targets.generated.cmake import BASE_DEFINITIONS, RUNTIME_COMPONENT
from splitter.targets.generated.pkgconfig import INCLUDES, keep_needed
from splitter.targets.stage import Progress, doc_sbom, stage

CONAN = "conan"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConanBuilder:
    """`--target conan`: OUT/<package>/conanfile.py and one `conan cache save` archive per
    package and platform."""

    guard: bool = False
    target: Target = Target.CONAN

    @property
    def limits(self) -> Limits:
        """The platforms Conan has settings for; several Pythons are one binary (the
        packages are Python-independent)."""
        return Limits(
            target=self.target,
            platforms=frozenset(p.subdir for p in supported() if p.conan_os),
            advice="leave this platform out (--platform) or use --target wheel for it",
        )

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None = None
    ) -> list[Artifact]:
        """See the module."""
        conan = shutil.which(CONAN)
        if conan is None:
            raise MissingToolError(
                CONAN, "it exports and saves the Conan packages", "pip install 'conan>=2,<3'"
            )
        checked = planned(release, progress)
        check_planned([p for group in checked.groups for p in group.plans], self.limits)
        plans = [group.source for group in checked.groups]
        packages = [p for p in plans[0].packages if not p.python]
        scratch = Path(tempfile.mkdtemp(prefix=".conan-", dir=build))
        artifacts = []
        try:
            home = scratch / "home"
            (home / "profiles").mkdir(parents=True)
            # the settings of each binary are given on the command line (_profile)
            (home / "profiles" / "default").write_text("[settings]\n")
            _conan(conan, home, "remote", "remove", "*")  # nothing is fetched
            platforms: dict[str, dict[str, Any]] = {p.name: {} for p in packages}
            for plan in plans:
                key, files = _stage(plan, packages, scratch, progress, self.guard)
                for package in packages:
                    platforms[package.name][key] = _platform(plan, plan.package(package.name))
                    target = scratch / "recipes" / package.name / "files" / key
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(files[package.name], target)
            for package in packages:
                recipe = scratch / "recipes" / package.name
                text = render_conanfile(plans[0], package, platforms[package.name])
                (recipe / "conanfile.py").write_text(text)
                (build / package.name).mkdir(exist_ok=True)
                (build / package.name / "conanfile.py").write_text(text)
            for plan in plans:
                os_name, arch = _settings(plan)
                for package in packages:  # a package's requirements are exported before it
                    recipe = scratch / "recipes" / package.name
                    _conan(conan, home, "export-pkg", str(recipe), *_profile(os_name, arch))
                for package in packages:  # the cache holds this platform's binaries only
                    name = f"{package.name}-{plan.wheel.version}-{os_name}-{arch}.conan.tgz"
                    reference = f"{package.name}/{plan.wheel.version}:*"
                    saved = scratch / name
                    _conan(conan, home, "cache", "save", reference, "--file", str(saved))
                    reproducible(saved, build / name, plan.wheel.timestamp)
                    saved.unlink()
                    artifacts.append(artifact(name, plan, package))
                    if progress is not None:
                        total = len(plans) * len(packages)
                        progress(f"conan {package.name}", len(artifacts), total)
                for package in packages:
                    _conan(conan, home, "remove", "-c", f"{package.name}/{plan.wheel.version}")
        finally:
            shutil.rmtree(scratch)
        return artifacts


def _settings(plan: Plan) -> tuple[str, str]:
    """Conan's os and arch of the plan's platform (the builder's limits refused any other)."""
    platform = by_subdir(plan.platform.conda_subdir)
    assert platform is not None and platform.conan_os, plan.platform
    return platform.conan_os, platform.conan_arch


def _stage(
    plan: Plan,
    packages: list[PackagePlan],
    scratch: Path,
    progress: Progress | None,
    guard: bool,
) -> tuple[str, dict[str, Path]]:
    """Stage the Python-independent packages of `plan` in conda's layout (lib, include,
    lib/cmake/executorch; RUNPATH relative), each with its licence and exclusivity record;
    returns the platform's key (os-arch) and each package's root."""
    os_name, arch = _settings(plan)
    key = f"{os_name}-{arch}"
    layout = make_layout(plan.wheel, "/", "lib", "include", None)
    # Conan's place for licence texts: licenses/ in the package folder (a folder per package:
    # the packages are staged as one install plan, whose paths are unique across packages)
    layout = dataclasses.replace(layout, licensedir="licenses/{package}")
    roots = {p.name: scratch / "stage" / key / p.name for p in packages}
    stage(
        plan,
        layout,
        lambda name: roots[name],
        Rpath.RELATIVE,
        progress,
        guard,
        only=frozenset(roots),
        sbom=lambda name: doc_sbom(
            name, name, plan.wheel.version, f"pkg:conan/{name}@{plan.wheel.version}"
        ),
    )
    for package in packages:
        doc = roots[package.name] / "share" / "doc" / package.name
        doc.mkdir(parents=True, exist_ok=True)
        record = exclusivity_record(plan, plan.package(package.name))
        (doc / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return key, roots


def _platform(plan: Plan, package: PackagePlan) -> dict[str, Any]:
    """What package_info needs of one platform: each CMake component's library, the
    components it needs, include directories and definitions (those of splitter's CMake
    config), and what the binaries need of the system."""
    libraries = dict(plan.component_libraries)
    components = {}
    threadpool = any("threadpool" in p.cmake_components for p in plan.packages)
    for component in package.cmake_components:
        library = libraries[component]
        stem = library.split(".", 1)[0].removeprefix("lib")
        requires = [] if component == RUNTIME_COMPONENT else [_runtime_requirement(plan, package)]
        defines = list(BASE_DEFINITIONS) + (["ET_USE_THREADPOOL"] if threadpool else [])
        # A registration-only library stays NEEDED under --as-needed, as in the .pc files;
        # package_info puts the package's libdir for {libdir}.
        retain = component != RUNTIME_COMPONENT and not plan.platform.macos
        flags = [keep_needed("{libdir}", [library])] if retain else []
        components[component] = {
            "lib": stem,
            "requires": requires,
            "defines": defines,
            "linkflags": flags,
        }
    verdicts = [v for v in plan.exclusive if package.name in (v.first_package, v.second_package)]
    return {
        "components": components,
        "includedirs": [f"include/{d}".rstrip("/") for d in INCLUDES],
        # PkgConfigDeps names the .pc files as splitter's own: executorch, <package>
        "pkg_config_name": "executorch" if RUNTIME_COMPONENT in components else package.name,
        "system": _system(plan),
        "exclusive": [
            {"first": v.first, "second": v.second, "in_effect": v.in_effect} for v in verdicts
        ],
    }


def _runtime_requirement(plan: Plan, package: PackagePlan) -> str:
    """How a component names the runtime component: within the runtime's package, or the
    runtime package's component from another package."""
    runtime = next(p for p in plan.packages if RUNTIME_COMPONENT in p.cmake_components)
    if runtime.name == package.name:
        return RUNTIME_COMPONENT
    return f"{runtime.name}::{RUNTIME_COMPONENT}"


def _system(plan: Plan) -> str:
    """What the binaries need of the system, from the wheel's platform tag."""
    tag = plan.platform.tag
    if tag.startswith("manylinux_"):
        major, minor = tag.split("_")[1:3]
        return f"glibc >= {major}.{minor} and libstdc++ with the C++11 ABI ({tag})"
    if tag.startswith("macosx_"):
        major, minor = tag.split("_")[1:3]
        return f"macOS >= {major}.{minor} ({tag})"
    return tag


def _profile(os_name: str, arch: str) -> list[str]:
    """The settings of one binary, for both contexts: the package ID is made of these."""
    return [f"-s:a=os={os_name}", f"-s:a=arch={arch}"]


def _conan(conan: str, home: Path, *args: str) -> str:
    """Run conan on the scratch cache, offline."""
    command = [conan, *args]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CONAN_HOME": str(home), "NO_COLOR": "1"},
    )
    if result.returncode != 0:
        raise ExternalToolError(
            f"conan {args[0]} failed", command, result.returncode, result.stderr
        )
    return result.stdout


def render_conanfile(plan: Plan, package: PackagePlan, platforms: dict[str, Any]) -> str:
    """The conanfile.py of one package: the same for every platform, whose facts it holds."""
    requires = [
        f"{d.name}/{plan.wheel.version}" for d in package.depends if not plan.package(d.name).python
    ]
    data = pprint.pformat(platforms, width=96, sort_dicts=True)  # a Python literal
    description = (
        f"{package.summary}. Prebuilt, split by splitter from upstream's {plan.wheel.name} "
        f"{plan.wheel.version} wheels; find_package(executorch) finds splitter's CMake config."
    )
    return f"""\
# Generated by splitter from the {plan.wheel.name} {plan.wheel.version} wheels. The binaries of
# each os/arch are prebuilt: splitter puts them in files/<os>-<arch>/ beside this file and runs
# `conan export-pkg . -s:a os=<os> -s:a arch=<arch>`; the archives beside this folder hold the
# result (`conan cache restore`).
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy

# Per os-arch: the CMake components (library, needed components, definitions), the include
# directories, what the binaries need of the system, and the exclusivity verdicts (the record
# is share/doc/{package.name}/{RECORD} in the package and in its metadata).
PLATFORMS = {data}


class Package(ConanFile):
    name = {json.dumps(package.name)}
    version = {json.dumps(plan.wheel.version)}
    description = {json.dumps(description)}
    license = {json.dumps(package.license)}
    url = {json.dumps(plan.wheel.home)}
    package_type = "shared-library"
    # prebuilt binaries: one per os/arch, whatever compiler the consumer's profile names
    settings = "os", "arch"
    requires = {json.dumps(requires)}

    @property
    def _platform(self):
        return f"{{self.settings.os}}-{{self.settings.arch}}"

    def validate(self):
        if self._platform not in PLATFORMS:
            raise ConanInvalidConfiguration(
                f"no prebuilt binary for {{self._platform}}: built for {{', '.join(PLATFORMS)}}"
            )

    def package(self):
        files = os.path.join(self.recipe_folder, "files", self._platform)
        copy(self, "*", src=files, dst=self.package_folder)
        record = os.path.join(files, "share", "doc", self.name, {json.dumps(RECORD)})
        copy(self, os.path.basename(record), src=os.path.dirname(record),
             dst=self.package_metadata_folder)

    def package_info(self):
        facts = PLATFORMS[self._platform]
        # splitter's CMake config, shipped in the package, is what find_package(executorch)
        # reads: CMakeToolchain puts the components' builddirs on CMAKE_PREFIX_PATH
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.set_property("pkg_config_name", facts["pkg_config_name"])
        self.cpp_info.set_property("splitter_system_requirements", facts["system"])
        self.cpp_info.set_property("splitter_process_exclusive", facts["exclusive"])
        for name, component in facts["components"].items():
            info = self.cpp_info.components[name]
            info.libs = [component["lib"]]
            info.includedirs = facts["includedirs"]
            info.defines = component["defines"]
            libdir = os.path.join(self.package_folder, "lib")
            info.sharedlinkflags = [f.format(libdir=libdir) for f in component["linkflags"]]
            info.exelinkflags = list(info.sharedlinkflags)
            info.requires = component["requires"]
            info.set_property("cmake_target_name", f"executorch::{{name}}")
            # with components, Conan reads builddirs from them, not from cpp_info itself
            info.builddirs = ["lib/cmake/executorch"]
"""


def reproducible(saved: Path, out: Path, epoch: int) -> None:
    """`conan cache save`'s archive rewritten to depend on its content alone: the package
    folder Conan named at random named after the package revision (in pkglist.json too),
    every revision's timestamp, the time atop each conanmanifest.txt and every file's time
    `epoch`, owners root, members sorted,
    gzip without name or time. `conan cache restore` reads it as it reads Conan's."""
    members = []
    with tarfile.open(saved, "r:gz") as archive:
        for member in archive:
            handle = archive.extractfile(member) if member.isfile() else None
            members.append((member, handle.read() if handle is not None else b""))
    listing = json.loads(next(data for m, data in members if m.name == "pkglist.json"))
    renames = {}
    for recipe in listing.values():
        for revision in recipe["revisions"].values():
            revision["timestamp"] = float(epoch)
            for package in revision.get("packages", {}).values():
                for prev, entry in package.get("revisions", {}).items():
                    entry["timestamp"] = float(epoch)
                    old = entry["package_folder"].rsplit("/", 1)[0]  # b/<random>
                    new = f"b/{old.split('/')[1][:5]}{prev[:13]}"
                    renames[old] = new
                    for key in ("package_folder", "metadata_folder"):
                        if key in entry:
                            entry[key] = new + entry[key][len(old) :]
    text = json.dumps(listing, indent=2).encode()

    def renamed(name: str) -> str:
        for old, new in renames.items():
            if name == old or name.startswith(old + "/"):
                return new + name[len(old) :]
        return name

    with reproducible_tar_gz(out, 9) as tar:
        for member, data in sorted(members, key=lambda item: renamed(item[0].name)):
            info = tarfile.TarInfo(renamed(member.name))
            info.type, info.mode, info.mtime = member.type, member.mode, epoch
            info.uname = info.gname = "root"
            info.linkname = member.linkname
            if member.name == "pkglist.json":
                data = text
            elif member.name.endswith("/conanmanifest.txt"):  # its first line is a time
                data = f"{epoch}\n".encode() + data.split(b"\n", 1)[1]
            info.size = len(data) if member.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if member.isfile() else None)
