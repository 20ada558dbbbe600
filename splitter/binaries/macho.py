"""Mach-O analysis (lief): install name, LC_LOAD_DYLIB, LC_RPATH, and registered operators.

The records are the ELF ones (`BinaryInfo`): the install name is the soname, load commands
are NEEDED (by the name written in them, e.g. `@rpath/libexecutorch.dylib`), LC_RPATH is the
runpath. Kernel tables are the ELF tables with pointers as chained fixups (rebases into
`__TEXT`, binds to imported functions), which lief decodes. A library that imports
`register_kernels` but has no table registers from initializer code: its operators are
unknown, not zero.
"""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import TYPE_CHECKING

from splitter.binaries.stamps import Spans, unstamped_digest
from splitter.binaries.tables import make_image, table_operators
from splitter.errors import BinaryError
from splitter.model import BinaryInfo, Registry

# Thin Mach-O, little-endian, 64 and 32 bit. Universal (fat) files share 0xcafebabe with Java
# class files; the wheels splitter reads ship thin arm64 only, so fat files are not taken.
MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe")
# C symbols carry a leading underscore in Mach-O
REGISTER_KERNELS = "__ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"
TORCH_DEF = "__ZNR5torch7Library4_def"
SCHEMA = re.compile(rb"([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\([^\x00]*\) -> [^\x00]+\x00")
VM_PROT_EXECUTE = 4

if TYPE_CHECKING:
    import lief


@functools.cache
def _lief() -> ModuleType:
    """lief, imported at the first Mach-O file: importing it costs every process tens of MB
    of resident memory (docs/performance.md), which a Linux split never needs."""
    import lief

    lief.logging.disable()  # lief logs parse warnings to stderr; errors surface as None
    # nanobind reports lief's module-level objects as leaks at interpreter exit, on every run
    lief.disable_leak_warning()
    return lief


def is_macho(data: bytes) -> bool:
    """Whether `data` starts with a thin little-endian Mach-O magic."""
    return data[:4] in MACHO_MAGICS


def parse_macho(path: str, data: bytes) -> lief.MachO.Binary:
    """The one slice of the Mach-O file `data`; BinaryError when lief cannot read it."""
    # lief reads a truncated file as far as it goes without complaint: check the header's
    # promise (mach_header(_64) then sizeofcmds bytes of load commands) first.
    header = 32 if data[:4] == MACHO_MAGICS[0] else 28
    commands = int.from_bytes(data[20:24], "little") if len(data) >= 24 else 0
    if len(data) < header or len(data) < header + commands:
        raise BinaryError(
            f"cannot read Mach-O (the file ends inside its load commands, {len(data)} bytes): "
            f"{path}"
        )
    fat: lief.MachO.FatBinary | None = _lief().MachO.parse(data)
    if fat is None or fat.size != 1:
        raise BinaryError(f"cannot read Mach-O (lief found no single slice): {path}")
    binary = fat.at(0)
    if binary is None:
        raise BinaryError(f"cannot read Mach-O (lief found no single slice): {path}")
    return binary


def analyse_macho(path: str, data: bytes, registrations: bool = True) -> BinaryInfo:
    """Describe the Mach-O file `data` found at wheel path `path`; without `registrations`,
    only the dynamic-linking facts."""
    lief = _lief()
    kinds = lief.MachO.LoadCommand.TYPE
    loads = {kinds.LOAD_DYLIB, kinds.LOAD_WEAK_DYLIB, kinds.REEXPORT_DYLIB, kinds.LOAD_UPWARD_DYLIB}
    binary = parse_macho(path, data)
    soname = ""
    needed: list[str] = []
    weak: list[str] = []
    runpath: list[str] = []
    for command in binary.commands:
        if isinstance(command, lief.MachO.DylibCommand):
            if command.command == kinds.ID_DYLIB:
                soname = command.name
            elif command.command in loads:
                needed.append(command.name)
                if command.command == kinds.LOAD_WEAK_DYLIB:
                    weak.append(command.name)
        elif isinstance(command, lief.MachO.RPathCommand):
            runpath.append(command.path)

    registry = Registry.NONE
    operators: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    known = True
    if registrations:
        exported = {s.name for s in binary.exported_symbols}
        imported = {s.name for s in binary.imported_symbols}
        if REGISTER_KERNELS in exported:
            registry = Registry.OWNS
        elif REGISTER_KERNELS in imported:
            registry = Registry.USES
        if registry:
            operators = _kernel_operators(binary, data)
            # It calls register_kernels yet has no table: it builds its kernels at run time.
            known = bool(operators) or registry == Registry.OWNS
        if any(TORCH_DEF in name for name in imported):
            schemas = _torch_schemas(binary)
    return BinaryInfo(
        path=path,
        machine=str(binary.header.cpu_type).replace(".", "_"),  # CPU_TYPE_ARM64
        soname=soname,
        needed=tuple(needed),
        runpath=tuple(runpath),
        rpath=(),
        registry=registry,
        et_operators=operators,
        torch_schemas=schemas,
        weak=tuple(weak),
        operators_known=known,
        unstamped_sha256=unstamped_digest(data, _stamped_spans(binary)),
    )


def _kernel_operators(binary: lief.MachO.Binary, data: bytes) -> tuple[str, ...]:
    segments = [
        (s.virtual_address, s.file_size, s.file_offset, bool(s.init_protection & VM_PROT_EXECUTE))
        for s in binary.segments
        if s.file_size
    ]
    image = make_image(data, segments)
    targets: dict[int, int] = {}
    fixup = _lief().MachO.RelocationFixup
    for relocation in binary.relocations:
        if isinstance(relocation, fixup):
            targets[relocation.address] = relocation.target
        else:
            # Opcode rebases (LC_DYLD_INFO) leave the unslid target in place.
            word = image.word(relocation.address)
            if word is not None:
                targets[relocation.address] = word
    symbolic = {binding.address for binding in binary.bindings}
    return tuple(sorted(table_operators(image, targets, symbolic)))


def _torch_schemas(binary: lief.MachO.Binary) -> tuple[str, ...]:
    section = binary.get_section("__TEXT", "__cstring")
    if section is None:
        return ()
    names = {m.group(1).decode() for m in SCHEMA.finditer(bytes(section.content))}
    return tuple(sorted(names))


def stamped_spans(path: str, data: bytes) -> Spans:
    """(offset, length) of what the linker stamps per link in the Mach-O file `data`: the
    LC_UUID and the code signature (its page hashes cover the UUID). Two links of the same
    code differ there and only there."""
    return _stamped_spans(parse_macho(path, data))


def stamp_layout(path: str, data: bytes) -> tuple[Spans, Spans]:
    """Where the Mach-O file `data` holds its link stamps (stamped_spans) and its read-only C
    strings (`__TEXT,__cstring`), as (offset, length) spans: what a release compares two
    copies of a file by (splitter.binaries.stamps.compare_strings)."""
    binary = parse_macho(path, data)
    section = binary.get_section("__TEXT", "__cstring")
    strings = ((section.offset, section.size),) if section is not None and section.size else ()
    return _stamped_spans(binary), strings


def _stamped_spans(binary: lief.MachO.Binary) -> Spans:
    lief = _lief()
    spans = []
    for command in binary.commands:
        if isinstance(command, lief.MachO.UUIDCommand):
            spans.append((command.command_offset + 8, 16))  # after cmd and cmdsize
        elif isinstance(command, lief.MachO.CodeSignature):
            spans.append((command.data_offset, command.data_size))
    return tuple(sorted(spans))
