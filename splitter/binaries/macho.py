"""Mach-O analysis: install name, LC_LOAD_DYLIB, LC_RPATH, and registered operators, read by
splitter.binaries.machoread.

The records are the ELF ones (`BinaryInfo`): the install name is the soname, load commands
are NEEDED (by the name written in them, e.g. `@rpath/libexecutorch.dylib`), LC_RPATH is the
runpath. Kernel tables are the ELF tables with pointers as chained fixups (rebases into
`__TEXT`, binds to imported functions). A library that imports
`register_kernels` but has no table registers from initializer code: its operators are
unknown, not zero.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from splitter.binaries.machoread import LC_LOAD_WEAK_DYLIB, MachO, fixups, read_macho, symbols
from splitter.binaries.stamps import Spans, unstamped_digest
from splitter.binaries.tables import make_image, table_operators
from splitter.model import BinaryInfo, Registry

# Thin Mach-O, little-endian, 64 and 32 bit. Universal (fat) files share 0xcafebabe with Java
# class files; the wheels splitter reads ship thin arm64 only, so fat files are not taken.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe")
# C symbols carry a leading underscore in Mach-O
REGISTER_KERNELS = "__ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"
TORCH_DEF = "__ZNR5torch7Library4_def"
SCHEMA = re.compile(rb"([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\([^\x00]*\) -> [^\x00]+\x00")


def is_macho(data: bytes) -> bool:
    """Whether `data` starts with a thin little-endian Mach-O magic."""
    return data[:4] in MACHO_MAGICS


def analyse_macho(path: str, data: bytes, registrations: bool = True) -> BinaryInfo:
    """Describe the Mach-O file `data` found at wheel path `path`; without `registrations`,
    only the dynamic-linking facts."""
    return _analyse(path, data, registrations)[0]


def analyse_with_exports(path: str, data: bytes) -> tuple[BinaryInfo, tuple[str, ...]]:
    """analyse_macho's record and the names the file exports as C and C++ spell them, from one
    read of the symbol table."""
    info, exported = _analyse(path, data, True)
    return info, _spelled(exported)


def _analyse(path: str, data: bytes, registrations: bool) -> tuple[BinaryInfo, set[str]]:
    macho = read_macho(path, data)
    registry = Registry.NONE
    operators: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    known = True
    exported: set[str] = set()
    if registrations:
        exported, imported = symbols(macho, path, data)
        if REGISTER_KERNELS in exported:
            registry = Registry.OWNS
        elif REGISTER_KERNELS in imported:
            registry = Registry.USES
        if registry:
            operators = _kernel_operators(macho, path, data)
            # It calls register_kernels yet has no table: it builds its kernels at run time.
            known = bool(operators) or registry == Registry.OWNS
        if any(TORCH_DEF in name for name in imported):
            schemas = _torch_schemas(macho, data)
    info = BinaryInfo(
        path=path,
        machine=macho.cpu_type,  # CPU_TYPE_ARM64
        soname=macho.install_name,
        needed=tuple(name for _, name in macho.loads),
        runpath=tuple(macho.rpaths),
        rpath=(),
        registry=registry,
        et_operators=operators,
        torch_schemas=schemas,
        weak=tuple(name for command, name in macho.loads if command == LC_LOAD_WEAK_DYLIB),
        operators_known=known,
        unstamped_sha256=unstamped_digest(data, _stamped_spans(macho)),
    )
    return info, exported


def _kernel_operators(macho: MachO, path: str, data: bytes) -> tuple[str, ...]:
    segments = [
        (s.address, s.file_size, s.offset, s.executable) for s in macho.segments if s.file_size
    ]
    targets, symbolic = fixups(macho, path, data)
    return tuple(sorted(table_operators(make_image(data, segments), targets, symbolic)))


def _torch_schemas(macho: MachO, data: bytes) -> tuple[str, ...]:
    section = macho.section("__TEXT", "__cstring")
    if section is None:
        return ()
    content = data[section.offset : section.offset + section.size]
    return tuple(sorted({m.group(1).decode() for m in SCHEMA.finditer(content)}))


def stamped_spans(path: str, data: bytes) -> Spans:
    """(offset, length) of what the linker stamps per link in the Mach-O file `data`: the
    LC_UUID and the code signature (its page hashes cover the UUID). Two links of the same
    code differ there and only there."""
    return _stamped_spans(read_macho(path, data))


def stamp_layout(path: str, data: bytes) -> tuple[Spans, Spans]:
    """Where the Mach-O file `data` holds its link stamps (stamped_spans) and its read-only C
    strings (`__TEXT,__cstring`), as (offset, length) spans: what a release compares two
    copies of a file by (splitter.binaries.stamps.compare_strings)."""
    macho = read_macho(path, data)
    section = macho.section("__TEXT", "__cstring")
    strings = ((section.offset, section.size),) if section is not None and section.size else ()
    return _stamped_spans(macho), strings


# section flags: S_ATTR_PURE_INSTRUCTIONS, S_ATTR_SOME_INSTRUCTIONS (mach-o/loader.h)
_INSTRUCTIONS = 0x80000000 | 0x400


def code_spans(path: str, data: bytes) -> Spans:
    """Where the Mach-O file `data` holds machine code: its sections flagged as holding
    instructions (__TEXT,__text, __stubs), as sorted (offset, length) spans."""
    macho = read_macho(path, data)
    return tuple(
        sorted((s.offset, s.size) for s in macho.sections if s.flags & _INSTRUCTIONS and s.size)
    )


def _stamped_spans(macho: MachO) -> Spans:
    return tuple(sorted(macho.stamps))


def exported_symbols(path: str, data: bytes) -> frozenset[str]:
    """The external symbols the Mach-O file `data` defines (its symbol table)."""
    macho = read_macho(path, data)
    return frozenset(symbols(macho, path, data)[0])


def _spelled(exported: Iterable[str]) -> tuple[str, ...]:
    """Exported names as C and C++ spell them: without the leading underscore Mach-O adds to
    every name (`__ZN5Eigen...` is `_ZN5Eigen...`)."""
    return tuple(n[1:] if n.startswith("_") else n for n in exported)
