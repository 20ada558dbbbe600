"""ELF analysis: SONAME, NEEDED, RUNPATH, and the operators a library registers.

ExecuTorch kernels are registered from static `Kernel` tables (24 bytes on LP64: name pointer,
kernel-key pointer, function pointer) handed to `executorch::runtime::register_kernels`. In a
shared object such a table is a run of relocations: +0 to an op-name string, +8 null or to a
`v1/...` key string, +16 to code. Op-name strings alone prove nothing (kernels also embed them in
error messages), so only table entries count.
"""

from __future__ import annotations

import io
import re
import struct

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import GNUHashSection
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import NoteSection, Section, SymbolTableSection

from splitter.binaries.stamps import Spans, unstamped_digest
from splitter.binaries.tables import Image, make_image, table_operators
from splitter.errors import BinaryError
from splitter.model import BinaryInfo, Registry

ELF_MAGIC = b"\x7fELF"
REGISTER_KERNELS = b"_ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"
TORCH_DEF = b"_ZNR5torch7Library4_def"
SCHEMA = re.compile(rb"([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\([^\x00]*\) -> [^\x00]+\x00")
# (relative, absolute-with-symbol) relocation types per machine
RELOC_TYPES = {"EM_X86_64": (8, 1), "EM_AARCH64": (1027, 257)}
PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr, little-endian
PT_LOAD = 1


def is_elf(data: bytes) -> bool:
    """Whether `data` starts with the ELF magic."""
    return data[:4] == ELF_MAGIC


def analyse_elf(path: str, data: bytes, registrations: bool = True) -> BinaryInfo:
    """Describe the ELF file `data` found at wheel path `path`; without `registrations`, only
    the dynamic-linking facts, skipping the relocation and string scans that dominate."""
    try:
        return _analyse(path, data, registrations)
    # pyelftools reports corrupt input beyond ELFError: OverflowError when an offset or size
    # does not fit a seek or read, ZeroDivisionError for a .gnu.hash with an empty bloom
    # filter, AssertionError when .dynamic links to a section that is not a string table.
    except (ELFError, struct.error, ValueError, ArithmeticError, AssertionError) as exc:
        reason = str(exc) or f"pyelftools {type(exc).__name__}"
        raise BinaryError(f"cannot read ELF ({reason}): {path}") from exc


def _analyse(path: str, data: bytes, registrations: bool) -> BinaryInfo:
    elf = ELFFile(io.BytesIO(data))
    machine = elf.header["e_machine"]
    soname, needed, runpath, rpath = "", [], [], []
    # Each section parsed once: pyelftools parses the section headers again on every
    # iter_sections and name lookup.
    sections = list(elf.iter_sections())
    named: dict[str, Section] = {}
    for section in sections:
        named.setdefault(section.name, section)
    dynamic = next((s for s in sections if isinstance(s, DynamicSection)), None)
    if dynamic is None:
        raise BinaryError(
            f"ELF file has no dynamic section (static binaries are not supported): {path}"
        )
    for tag in dynamic.iter_tags():
        kind = tag.entry.d_tag
        if kind not in ("DT_NEEDED", "DT_SONAME", "DT_RUNPATH", "DT_RPATH"):
            continue
        value = str(vars(tag)[kind[3:].lower()])  # pyelftools sets .needed, .soname, ...
        if kind == "DT_NEEDED":
            needed.append(value)
        elif kind == "DT_SONAME":
            soname = value
        elif kind == "DT_RUNPATH":
            runpath = [p for p in value.split(":") if p]
        else:
            rpath = [p for p in value.split(":") if p]

    registry = Registry.NONE
    operators: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    if registrations:
        dynstr = named.get(".dynstr")
        strtab = dynstr.data() if dynstr is not None else b""
        registry = _registry_role(named, strtab)
        if registry and elf.elfclass == 64 and elf.little_endian:
            operators = _kernel_operators(elf, sections, data, machine)
        if TORCH_DEF in strtab:
            schemas = _torch_schemas(named)
    return BinaryInfo(
        path=path,
        machine=machine,
        soname=soname,
        needed=tuple(needed),
        runpath=tuple(runpath),
        rpath=tuple(rpath),
        registry=registry,
        et_operators=operators,
        torch_schemas=schemas,
        unstamped_sha256=unstamped_digest(data, _build_id_spans(sections)),
    )


def _registry_role(named: dict[str, Section], strtab: bytes) -> Registry:
    """Whether the file defines register_kernels (owns a registry) or imports it (uses one)."""
    if REGISTER_KERNELS not in strtab:
        return Registry.NONE
    # The GNU hash table holds exactly the defined dynamic symbols: one hashed lookup instead
    # of pyelftools indexing every dynamic symbol by name.
    table = named.get(".gnu.hash")
    if isinstance(table, GNUHashSection):
        found = table.get_symbol(REGISTER_KERNELS.decode())
        defined = found is not None and found["st_shndx"] != "SHN_UNDEF"
        return Registry.OWNS if defined else Registry.USES
    symbols = named.get(".dynsym")
    if not isinstance(symbols, SymbolTableSection):
        return Registry.NONE
    for symbol in symbols.get_symbol_by_name(REGISTER_KERNELS.decode()) or ():
        if symbol["st_shndx"] != "SHN_UNDEF":
            return Registry.OWNS
    return Registry.USES


def _image(elf: ELFFile, data: bytes) -> Image:
    """The loaded image of a 64-bit little-endian ELF file, from its PT_LOAD program
    headers, unpacked here with struct (pyelftools' segments cost more than the scan)."""
    header = elf.header
    if header["e_phentsize"] != PROGRAM_HEADER.size:
        raise ELFError(f"unexpected program header size {header['e_phentsize']}")
    loads = []
    for index in range(header["e_phnum"]):
        start = header["e_phoff"] + index * PROGRAM_HEADER.size
        kind, flags, offset, vaddr, _, filesz, _, _ = PROGRAM_HEADER.unpack_from(data, start)
        if kind == PT_LOAD:
            loads.append((vaddr, filesz, offset, bool(flags & 1)))
    return make_image(data, loads)


def _relocations(sections: list[Section], machine: str) -> tuple[dict[int, int], set[int]]:
    """Map offset -> target address for relative relocations, and offsets of symbolic ones."""
    relative_type, absolute_type = RELOC_TYPES.get(machine, (None, None))
    targets: dict[int, int] = {}
    symbolic: set[int] = set()
    for section in sections:
        if not isinstance(section, RelocationSection) or not section.is_RELA():
            continue
        # Bulk decode: pyelftools builds one Python object per entry, which dominates on
        # tables of over a thousand entries.
        for offset, info, addend in struct.iter_unpack("<QQq", section.data()):
            kind = info & 0xFFFFFFFF
            if kind == relative_type:
                targets[offset] = addend
            elif kind == absolute_type:
                symbolic.add(offset)
    return targets, symbolic


def _kernel_operators(
    elf: ELFFile, sections: list[Section], data: bytes, machine: str
) -> tuple[str, ...]:
    targets, symbolic = _relocations(sections, machine)
    return tuple(sorted(table_operators(_image(elf, data), targets, symbolic)))


def _torch_schemas(named: dict[str, Section]) -> tuple[str, ...]:
    rodata = named.get(".rodata")
    if rodata is None:
        return ()
    names = {m.group(1).decode() for m in SCHEMA.finditer(rodata.data())}
    return tuple(sorted(names))


def _build_id_spans(sections: list[Section]) -> Spans:
    """(offset, length) of the GNU build-id's bytes, or nothing without one: the linker
    stamps it per link, so two links of the same code differ there and only there. Read
    from the note sections (pyelftools builds a PT_DYNAMIC segment by walking every section
    again, so the segments cost more than the sections already parsed)."""
    for section in sections:
        if not isinstance(section, NoteSection):
            continue
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                name_size = (note["n_namesz"] + 3) & ~3  # the name is padded to 4 bytes
                return ((note["n_offset"] + 12 + name_size, note["n_descsz"]),)
    return ()
