"""The platforms splitter splits wheels of: one record each, holding every name the platform goes
by (conda, wheel tags, ELF and Mach-O headers, Debian, RPM, Conan, qemu and its cross compiler),
and the one CPython tag parser. Every other table of platform facts is derived from SUPPORTED,
read at each use: adding a platform is adding its record."""

from __future__ import annotations

from dataclasses import dataclass

MANYLINUX = "manylinux"
MACOSX = "macosx"


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportedPlatform:
    """One platform splitter splits wheels of, as each format and tool names it ("" or None
    where it has no such name: macOS has no Debian architecture)."""

    subdir: str  # conda subdir: linux-64
    family: str  # wheel platform tag family: MANYLINUX or MACOSX
    wheel_tag: str  # the platform tag a wheel is fetched for: manylinux_2_28_x86_64
    machine: str  # the wheel tag's (and uname's) machine: x86_64, aarch64, arm64
    elf_machine: int | None  # ELF e_machine: 62
    elf_name: str  # e_machine as pyelftools (and BinaryInfo.machine) names it: EM_X86_64
    # ELF relocation types of a Kernel table entry: (relative, absolute with a symbol)
    elf_relocations: tuple[int, int] | None
    macho_cpu: str  # Mach-O CPU type as lief (and BinaryInfo.machine) names it: CPU_TYPE_ARM64
    deb: str  # Debian architecture: amd64
    triplet: str  # Debian multiarch triplet (the libdir is lib/<triplet>): x86_64-linux-gnu
    rpm: str  # RPM architecture: x86_64
    conan_os: str  # Conan settings.os: Linux
    conan_arch: str  # Conan settings.arch: x86_64
    qemu: str  # the qemu-user program that runs its code elsewhere: qemu-x86_64
    cross_cxx: str  # the cross C++ compiler that builds its code elsewhere
    cross_package: str  # the Debian package of that compiler


# upstream ships no macOS x86_64 wheel
SUPPORTED: tuple[SupportedPlatform, ...] = (
    SupportedPlatform(
        subdir="linux-64",
        family=MANYLINUX,
        wheel_tag="manylinux_2_28_x86_64",
        machine="x86_64",
        elf_machine=62,
        elf_name="EM_X86_64",
        elf_relocations=(8, 1),  # R_X86_64_RELATIVE, R_X86_64_64
        macho_cpu="",
        deb="amd64",
        triplet="x86_64-linux-gnu",
        rpm="x86_64",
        conan_os="Linux",
        conan_arch="x86_64",
        qemu="qemu-x86_64",
        cross_cxx="x86_64-linux-gnu-g++",
        cross_package="g++-x86-64-linux-gnu",
    ),
    SupportedPlatform(
        subdir="linux-aarch64",
        family=MANYLINUX,
        wheel_tag="manylinux_2_28_aarch64",
        machine="aarch64",
        elf_machine=183,
        elf_name="EM_AARCH64",
        elf_relocations=(1027, 257),  # R_AARCH64_RELATIVE, R_AARCH64_ABS64
        macho_cpu="",
        deb="arm64",
        triplet="aarch64-linux-gnu",
        rpm="aarch64",
        conan_os="Linux",
        conan_arch="armv8",
        qemu="qemu-aarch64",
        cross_cxx="aarch64-linux-gnu-g++",
        cross_package="g++-aarch64-linux-gnu",
    ),
    SupportedPlatform(
        subdir="osx-arm64",
        family=MACOSX,
        wheel_tag="macosx_14_0_arm64",
        machine="arm64",
        elf_machine=None,
        elf_name="",
        elf_relocations=None,
        macho_cpu="CPU_TYPE_ARM64",
        deb="",
        triplet="",
        rpm="",
        conan_os="Macos",
        conan_arch="armv8",
        qemu="",
        cross_cxx="",
        cross_package="",
    ),
)


def supported() -> tuple[SupportedPlatform, ...]:
    """Every supported platform, in the table's order (read SUPPORTED through this, not by
    importing it, so that a record added to the table is seen)."""
    return SUPPORTED


def subdirs() -> tuple[str, ...]:
    """The conda subdirs of every supported platform, in the table's order."""
    return tuple(p.subdir for p in SUPPORTED)


def by_subdir(subdir: str) -> SupportedPlatform | None:
    """The platform of a conda subdir (linux-64)."""
    return next((p for p in SUPPORTED if p.subdir == subdir), None)


def by_wheel_tag(tag: str) -> SupportedPlatform | None:
    """The platform of a wheel platform tag: its family's tags (manylinux2014_, manylinux_2_28_,
    macosx_14_0_ ...) that end with its machine."""
    return next(
        (p for p in SUPPORTED if tag.startswith(p.family) and tag.endswith("_" + p.machine)), None
    )


def by_elf_machine(e_machine: int) -> SupportedPlatform | None:
    """The platform of an ELF header's e_machine."""
    return next((p for p in SUPPORTED if p.elf_machine == e_machine), None)


def by_binary_machine(name: str) -> SupportedPlatform | None:
    """The platform of a binary's machine as BinaryInfo names it (EM_AARCH64, CPU_TYPE_ARM64)."""
    if not name:
        return None
    return next((p for p in SUPPORTED if name in (p.elf_name, p.macho_cpu)), None)


def by_machine(machine: str, family: str) -> SupportedPlatform | None:
    """The platform of a machine (uname's: x86_64) in a wheel tag family."""
    return next((p for p in SUPPORTED if p.machine == machine and p.family == family), None)


def cpython_of(tag: str) -> tuple[int, int] | None:
    """A CPython tag's version: cp311 -> (3, 11); None for any other tag."""
    digits = tag.removeprefix("cp")
    if not tag.startswith("cp") or len(digits) < 2 or not digits.isdigit():
        return None
    return int(digits[0]), int(digits[1:])


def cpython_version(tag: str) -> str:
    """A CPython tag's version as text: cp311 -> "3.11"; "" for any other tag."""
    version = cpython_of(tag)
    return "" if version is None else "{}.{}".format(*version)


def cpython_tag(version: str) -> str:
    """The CPython tag of a version: "3.11" -> cp311."""
    return "cp" + version.replace(".", "")
