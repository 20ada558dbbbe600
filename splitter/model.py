"""Frozen records shared by every stage: the wheel, its binaries, the recipe and the plan."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the licence records live in splitter.licensing
    from splitter.licensing import Conclusion, ExcludedFile, Exclusion, FileLicence


# A progress report: (what is being done, how much is done, of how much; 0 when not known).
# The core reports through it; the CLI draws it (a bar), and None means nobody listens.
Progress = Callable[[str, int, int], None]


class Target(StrEnum):
    """The output formats of `splitter build`."""

    CONDA = "conda"
    WHEEL = "wheel"
    TREE = "tree"
    DEB = "deb"
    RPM = "rpm"
    CONAN = "conan"


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What a target cannot build, declared by the target and judged from the request before
    anything is fetched (splitter.plan.request) and again from each wheel's plan."""

    target: Target
    # the conda subdirs it packages; None: every platform splitter splits
    platforms: frozenset[str] | None = None
    one_python_per_platform: bool = False  # deb, rpm: the distribution's python3
    release: bool = True  # whether it builds several wheels at once
    why_not_release: str = ""  # what to do instead, when it does not
    advice: str = ""  # what to use instead for a platform it does not package


class Registry(StrEnum):
    """A binary's part in ExecuTorch's kernel registry (`register_kernels`)."""

    OWNS = "owns"  # defines register_kernels: a registry lives in this file
    USES = "uses"  # imports it: registers kernels into another file's registry
    NONE = ""  # neither


class Rpath(StrEnum):
    """How staged ELF files find their libraries."""

    RELATIVE = "relative"  # RUNPATH recomputed from NEEDED, relative to $ORIGIN
    STRIP = "strip"  # no RUNPATH where the libdir is on the linker's default search path


class CondaBackend(StrEnum):
    """What turns the staged trees into .conda packages."""

    ASSEMBLE = "assemble"  # rattler-build's assembler on the staged trees (reproducible)
    RATTLER_BUILD = "rattler-build"  # the rendered rattler-build recipe
    CONDA_BUILD = "conda-build"  # the rendered conda-build recipe


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelEntry:
    """One verified file of the wheel: its POSIX path in the archive, size, sha256 and SHA-1."""

    path: str
    size: int
    sha256: str
    sha1: str
    executable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WheelInfo:
    """What was read and verified from a wheel: identity, metadata and file list."""

    path: Path
    filename: str
    sha256: str
    name: str
    version: str
    build_tag: str
    python_tag: str
    abi_tag: str
    platform_tag: str
    dist_info: str
    summary: str
    license: str
    home: str
    requires_python: str
    requires_dist: tuple[str, ...]
    provides_extra: tuple[str, ...]
    console_scripts: tuple[tuple[str, str], ...]
    license_files: tuple[str, ...]
    timestamp: int
    entries: tuple[WheelEntry, ...]
    # the bytes of each of license_files, in order (verified against RECORD with the rest)
    license_texts: tuple[bytes, ...] = field(default=(), repr=False)

    @property
    def tag(self) -> str:
        """The wheel's compressed tag, e.g. `cp311-cp311-manylinux_2_28_x86_64`."""
        return f"{self.python_tag}-{self.abi_tag}-{self.platform_tag}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BinaryInfo:
    """What the dynamic linker and the kernel registries will see of one ELF or Mach-O file."""

    path: str
    machine: str
    soname: str
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    registry: Registry
    et_operators: tuple[str, ...]  # operators in its static ExecuTorch Kernel tables
    torch_schemas: tuple[str, ...]  # schema strings it hands to the torch dispatcher
    # sha256 of the file with its link stamps (ELF GNU build-id; Mach-O LC_UUID and code
    # signature) set aside, with their places (splitter.binaries.stamps): equal in two wheels
    # when the file is the same link but for those stamps
    unstamped_sha256: str = ""
    # Mach-O only: LC_LOAD_WEAK_DYLIB names (also in `needed`; dyld loads on without them)
    weak: tuple[str, ...] = ()
    # False when the file registers kernels from initializer code rather than static tables:
    # `et_operators` is then what could be seen, and the real set is unknown (not empty)
    operators_known: bool = True

    @property
    def provides(self) -> str:
        """The name a NEEDED entry must use to reach this file."""
        return self.soname or self.path.rsplit("/", 1)[-1]

    @property
    def macho(self) -> bool:
        """Whether this is a Mach-O file (its machine is a Mach-O CPU type)."""
        return self.machine.startswith("CPU_TYPE_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One ownership rule: files matching `globs` (minus `exclude`) belong to `package`."""

    index: int
    globs: tuple[str, ...]
    exclude: tuple[str, ...]
    package: str
    reason: str
    line: int
    platforms: tuple[str, ...] = ()  # platform-tag globs the rule applies to; empty: all

    def applies(self, tag: str) -> bool:
        """Whether this rule takes part in splitting a wheel with platform tag `tag`."""
        return matches_platform(self.platforms, tag)


def matches_platform(platforms: tuple[str, ...], tag: str) -> bool:
    """Whether `tag` matches one of the `platforms` globs; no globs means every platform."""
    return not platforms or any(fnmatch.fnmatchcase(tag, p) for p in platforms)


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageSpec:
    """A package the recipe declares."""

    name: str
    summary: str
    python: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    """A CMake component and the library that provides it (one file name per platform)."""

    name: str
    libraries: tuple[str, ...]
    platforms: tuple[str, ...]
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ThirdParty:
    """Another project's code the recipe says the binaries may carry, and how it is recognised.

    `symbols` are globs (fnmatch, case-sensitive) over the raw exported symbol names as C and
    C++ spell them (mangled; Mach-O's leading underscore set aside). Each exported symbol counts
    for the first pattern, in recipe order, that matches it. `paths` are globs over wheel
    paths: files that are the component's own (headers copied from it, its tools)."""

    name: str
    license: str  # an SPDX licence identifier
    url: str  # the project's upstream
    license_repo: str  # owner/name of the repository holding its licence text
    license_path: str  # the licence text's path in that repository
    license_revision: str  # the commit it was copied from
    license_file: str  # where the copy is, relative to the recipe: licenses/<name>-<file>
    license_text: bytes = field(repr=False)  # the copy, verbatim
    symbols: tuple[str, ...]
    paths: tuple[str, ...] = ()
    # literal strings its code leaves in a binary's data (hidden code: build paths, typeinfo)
    strings: tuple[str, ...] = ()
    supplier: str = ""  # who distributes it (the NTIA minimum elements' supplier)
    version: str = ""  # the release or commit ExecuTorch pins, as upstream names it
    purl: str = ""  # its package URL at that version
    cpe: str = ""  # its CPE 2.3 name, where NVD has a product for it
    notice_file: str = ""  # its NOTICE copied beside the recipe, where upstream has one
    notice_text: bytes = field(default=b"", repr=False)
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentFound:
    """A third-party component found in one file of the wheel, with the evidence: exported
    symbols of a binary, or the file's path."""

    component: str
    path: str  # the file's wheel path
    package: str  # the package that owns the file
    # (pattern, exported symbols it matched), in recipe order; only patterns that matched
    patterns: tuple[tuple[str, int], ...]
    # the recipe's path patterns that match the file itself
    paths: tuple[str, ...] = ()
    # (literal string, occurrences) of the component's strings found in the binary's bytes
    strings: tuple[tuple[str, int], ...] = ()

    @property
    def symbols(self) -> int:
        """How many exported symbols of the file are this component's."""
        return sum(count for _, count in self.patterns)


@dataclass(frozen=True, slots=True, kw_only=True)
class External:
    """Sonames satisfied by another project, and how each ecosystem names it."""

    name: str
    sonames: tuple[str, ...]
    site_dirs: tuple[str, ...]
    conda: str
    pip: str
    deb: str = ""  # a Debian Depends entry; "" when the recipe maps none
    rpm: str = ""  # an RPM Requires entry; "" when the recipe maps none


@dataclass(frozen=True, slots=True, kw_only=True)
class Distro:
    """How one distribution family names the packages: Debian (revision) or RPM (release)."""

    revision: str  # Debian revision / RPM release appended to the upstream version
    maintainer: str  # "Name <address>": Debian's Maintainer, RPM's Packager
    names: tuple[tuple[str, str], ...]  # splitter package -> distro package name
    # splitter package -> the name of its development package (headers, CMake, pkg-config),
    # built for each package that has such files: <name>-dev (deb) / <name>-devel (rpm)
    dev_names: tuple[tuple[str, str], ...]
    system: tuple[tuple[str, str], ...]  # system soname -> dependency, when the tool cannot tell


@dataclass(frozen=True, slots=True, kw_only=True)
class ExclusivePair:
    """Two files the recipe declares must not meet in one process."""

    first: str
    second: str
    reason: str
    line: int
    platforms: tuple[str, ...] = ()  # platform-tag globs where both files ship; empty: all


@dataclass(frozen=True, slots=True, kw_only=True)
class Together:
    """Files the recipe says travel together: one package, one directory in every layout (one
    finds the other beside it at run time)."""

    files: tuple[str, ...]  # wheel paths, at least two
    reason: str
    line: int
    platforms: tuple[str, ...] = ()  # platform-tag globs where the rule applies; empty: all


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderNotAlone:
    """A shipped header the recipe says does not compile on its own, by upstream's design:
    `splitter verify`'s headers row accepts its failure, with `reason`, and no other."""

    header: str  # relative to the include directory, as `#include <...>` spells it
    reason: str
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """A validated recipe."""

    path: Path
    project: str
    default_version: str
    supported: str
    packages: tuple[PackageSpec, ...]
    rules: tuple[Rule, ...]
    components: tuple[Component, ...]
    externals: tuple[External, ...]
    system_sonames: tuple[str, ...]
    conda_system: tuple[tuple[str, str], ...]
    conda_names: tuple[tuple[str, str], ...]
    exclusive: tuple[ExclusivePair, ...]
    deb: Distro | None = None  # [deb] of the recipe; None when it has none
    rpm: Distro | None = None  # [rpm] of the recipe; None when it has none
    # globs over absolute install names the OS provides (macOS: /usr/lib, /System frameworks)
    system_paths: tuple[str, ...] = ()
    together: tuple[Together, ...] = ()
    third_party: tuple[ThirdParty, ...] = ()  # [[third_party]], in recipe order
    headers_not_alone: tuple[HeaderNotAlone, ...] = ()  # [[headers_not_alone]]
    conclusions: tuple[Conclusion, ...] = ()  # [[license_conclusion]], in recipe order
    exclusions: tuple[Exclusion, ...] = ()  # [[exclude]], in recipe order
    scan_file: Path | None = None  # the licence scan it was reviewed with (input.scan)
    # SPDX id -> its standard text (licenses/spdx/<id>.txt beside the recipe, verbatim)
    standard_texts: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)

    def is_system(self, name: str) -> bool:
        """Whether the platform provides the library a binary loads as `name`."""
        return name in self.system_sonames or (
            name.startswith("/") and any(fnmatch.fnmatchcase(name, p) for p in self.system_paths)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Dependency:
    """A dependency of one package on another, with the binary evidence for it."""

    name: str
    version: str | None  # exact sibling version; None for an external (its range is below)
    conda: str
    pip: str
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PackagePlan:
    """Everything a target needs to write one package."""

    name: str
    version: str
    summary: str
    python: bool
    files: tuple[str, ...]
    bytes: int
    depends: tuple[Dependency, ...]
    externals: tuple[Dependency, ...]
    system_sonames: tuple[str, ...]
    cmake_components: tuple[str, ...]
    sonames: tuple[str, ...]
    conda_requires: tuple[str, ...]  # a Python package: the wheel's Requires-Dist in conda names
    # the SPDX licence expression of what it holds: the project's and every third-party
    # component's found in its files (splitter.plan.licences)
    license: str = ""
    third_party: tuple[str, ...] = ()  # those components, in recipe order
    # per library (wheel path) it holds, its exported functions in ExecuTorch's namespace that
    # no shipped header names: linkable, not callable (splitter.plan.declared; a lower bound)
    undeclared: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Whether two files must not share a process, decided from their binaries."""

    first: str
    first_package: str
    second: str
    second_package: str
    declared: bool
    in_effect: bool
    operators: tuple[str, ...]
    # the operators each file registers in static tables; None when unknown (it registers
    # from initializer code): what a decision reads, never the evidence sentences
    first_operators: int | None
    second_operators: int | None
    evidence: tuple[str, ...]  # for people

    @property
    def state(self) -> str:
        """The verdict in the words every output uses: IN EFFECT or not in effect."""
        return "IN EFFECT" if self.in_effect else "not in effect"


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    """Where the wheel's binaries run, from its tags (see splitter.plan.facts)."""

    tag: str  # the wheel's platform tag, e.g. manylinux_2_28_x86_64
    machine: str  # x86_64 or aarch64, as PEP 508's platform_machine says it
    conda_subdir: str  # linux-64 or linux-aarch64
    glibc: str  # the glibc the manylinux tag promises, e.g. 2.28 ("" on macOS)
    python: tuple[int, int]  # the CPython of the wheel's python tag, e.g. (3, 11)
    macos: str = ""  # the macOS the macosx tag promises, e.g. 14.0 ("" on Linux)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The one computed description of the split; the only input of every target."""

    wheel: WheelInfo
    recipe: Recipe
    packages: tuple[PackagePlan, ...]
    # path -> (package, rule index); read-only (a MappingProxyType over make_plan's dict)
    owners: Mapping[str, tuple[str, int]] = field(hash=False)
    binaries: tuple[BinaryInfo, ...]
    exclusive: tuple[Verdict, ...]
    build_version: str  # the full version the wheel says it was built as, e.g. 1.5.1+cpu
    platform: Platform
    # CMake component -> library file name, for each component whose library the wheel ships
    component_libraries: tuple[tuple[str, str], ...]
    # third-party components found in the binaries, by path then component
    third_party: tuple[ComponentFound, ...] = ()
    # the recipe's third-party components found in no file of this wheel
    third_party_missing: tuple[str, ...] = ()
    licences: tuple[FileLicence, ...] = ()  # every shipped file's, by path (plan.conclude)
    excluded: tuple[ExcludedFile, ...] = ()  # the files no package ships, by path

    def package(self, name: str) -> PackagePlan:
        """The package called `name`."""
        for package in self.packages:
            if package.name == name:
                return package
        raise KeyError(name)

    def binary(self, path: str) -> BinaryInfo | None:
        """The analysis of the ELF at `path`, if it is one."""
        for info in self.binaries:
            if info.path == path:
                return info
        return None


class Only(StrEnum):
    """The groups of checks `verify --only` selects."""

    CO_LOAD = "co-load"
    CMAKE = "cmake"
    RELOCATION = "relocation"
    PYTHON = "python"
    DEPENDS = "depends"  # .deb and .rpm outputs
    SBOM = "sbom"  # each installed package's SBOM against what is installed
    HEADERS = "headers"  # each installed header compiled alone with the .pc's Cflags
