"""ELF analysis: SONAME, NEEDED, RUNPATH, and the operators a library registers.

ExecuTorch kernels are registered from static `Kernel` tables (24 bytes on LP64: name pointer,
kernel-key pointer, function pointer) handed to `executorch::runtime::register_kernels`. In a
shared object such a table is a run of relocations: +0 to an op-name string, +8 null or to a
`v1/...` key string, +16 to code. Op-name strings alone prove nothing (kernels also embed them in
error messages), so only table entries count.
"""

from __future__ import annotations

import contextlib
import io
import re
import struct
from collections.abc import Iterator

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import GNUHashSection
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import (
    NoteSection,
    Section,
    StringTableSection,
    SymbolTableSection,
)

from splitter.binaries.stamps import Spans, unstamped_digest
from splitter.binaries.tables import Image, make_image, table_operators
from splitter.errors import BinaryError
from splitter.model import BinaryInfo, Registry
from splitter.platforms import by_binary_machine, by_elf_machine

ELF_MAGIC = b"\x7fELF"
REGISTER_KERNELS = b"_ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"
TORCH_DEF = b"_ZNR5torch7Library4_def"
SCHEMA = re.compile(rb"([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\([^\x00]*\) -> [^\x00]+\x00")
PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr, little-endian
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29


def is_elf(data: bytes) -> bool:
    """Whether `data` starts with the ELF magic."""
    return data[:4] == ELF_MAGIC


def analyse_elf(path: str, data: bytes, registrations: bool = True) -> BinaryInfo:
    """Describe the ELF file `data` found at wheel path `path`; without `registrations`, only
    the dynamic-linking facts (machine, SONAME, NEEDED, RUNPATH, RPATH; no operators, schemas
    or unstamped digest), read from the program headers alone where the file allows."""
    if not registrations:
        linkage = _linkage(path, data)
        if linkage is not None:
            return linkage
    try:
        return _analyse(path, data, registrations)
    # pyelftools reports corrupt input beyond ELFError: OverflowError when an offset or size
    # does not fit a seek or read, ZeroDivisionError for a .gnu.hash with an empty bloom
    # filter, AssertionError when .dynamic links to a section that is not a string table.
    except (ELFError, struct.error, ValueError, ArithmeticError, AssertionError) as exc:
        reason = str(exc) or f"pyelftools {type(exc).__name__}"
        raise BinaryError(f"cannot read ELF ({reason}): {path}") from exc


@contextlib.contextmanager
def _reading(data: bytes) -> Iterator[ELFFile]:
    """pyelftools' reader of `data`, taken apart on leaving. The reader and its structures
    hold each other in reference cycles (its structures' parsers are closures over them),
    which only a garbage collection frees, and its stream holds `data`. Its stream closed
    and the attributes of both dropped, all of it goes at once: the analysis of a wheel
    leaves no garbage for the collector, which the build runs seldom (splitter.__main__),
    and no binary's bytes wait for it."""
    stream = io.BytesIO(data)
    elf = None
    try:
        elf = ELFFile(stream)
        yield elf
    finally:
        stream.close()
        for part in (getattr(elf, "structs", None), elf):
            if part is not None:
                vars(part).clear()


def _analyse(path: str, data: bytes, registrations: bool) -> BinaryInfo:
    with _reading(data) as elf:
        return _analyse_file(path, data, registrations, elf)


def _analyse_file(path: str, data: bytes, registrations: bool, elf: ELFFile) -> BinaryInfo:
    machine = elf.header["e_machine"]
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
    # The linking facts as ld.so reads them (_linkage: a few struct reads, where pyelftools
    # builds an object per tag), or pyelftools' where _linkage gives up. The section's link
    # to its strings is checked as pyelftools' reading of its tags would check it.
    link = dynamic["sh_link"]
    if not (0 < link < len(sections) and isinstance(sections[link], StringTableSection)):
        raise BinaryError(f"cannot read ELF (.dynamic links no string table): {path}")
    linkage = _linkage(path, data)
    if linkage is not None:
        soname, needed, runpath, rpath = (
            linkage.soname,
            linkage.needed,
            linkage.runpath,
            linkage.rpath,
        )
    else:
        soname, needed, runpath, rpath = _dynamic_entries(dynamic)

    registry = Registry.NONE
    operators: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    known = True
    if registrations:
        dynstr = named.get(".dynstr")
        strtab = dynstr.data() if dynstr is not None else b""
        registry = _registry_role(named, strtab)
        if registry and elf.elfclass == 64 and elf.little_endian:
            operators = _kernel_operators(elf, sections, data, machine)
        # It calls register_kernels yet has no table: it builds its kernels in code (1.5.1's
        # libcustom_ops_aot_lib.so, 11 of them), which tables cannot show. As for Mach-O.
        known = bool(operators) or registry != Registry.USES
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
        operators_known=known,
        unstamped_sha256=unstamped_digest(data, _build_id_spans(sections)),
    )


def _dynamic_entries(
    dynamic: DynamicSection,
) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(SONAME, NEEDED, RUNPATH, RPATH) as pyelftools reads the dynamic section."""
    soname, needed, runpath, rpath = "", [], [], []
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
    return soname, tuple(needed), tuple(runpath), tuple(rpath)


def stamp_layout(path: str, data: bytes) -> tuple[Spans, Spans]:
    """Where the ELF file `data` holds its GNU build-id and its read-only data (`.rodata`), as
    (offset, length) spans: what a release compares two copies of a file by
    (splitter.binaries.stamps.compare_strings)."""
    try:
        with _reading(data) as elf:
            sections = list(elf.iter_sections())
            strings = tuple(
                (s["sh_offset"], s["sh_size"])
                for s in sections
                if s.name == ".rodata" and s["sh_type"] != "SHT_NOBITS" and s["sh_size"]
            )
            return _build_id_spans(sections), strings
    except (ELFError, struct.error, ValueError, ArithmeticError, AssertionError) as exc:
        reason = str(exc) or f"pyelftools {type(exc).__name__}"
        raise BinaryError(f"cannot read ELF ({reason}): {path}") from exc


SHF_EXECINSTR, SHT_NOBITS = 0x4, 8


def code_spans(data: bytes) -> Spans:
    """Where the 64-bit little-endian ELF file `data` holds machine code: its sections flagged
    SHF_EXECINSTR (.text, .plt, .init), from the section headers, as sorted (offset, length)
    spans; none for a file whose headers do not check out (it is searched whole)."""
    if len(data) < 64 or data[4:6] != b"\x02\x01":
        return ()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<2H", data, 0x3A)
    if entsize < 64 or shoff + count * entsize > len(data):
        return ()
    spans = []
    for index in range(count):
        kind, flags, _, offset, size = struct.unpack_from("<4xIQQQQ", data, shoff + index * entsize)
        if flags & SHF_EXECINSTR and kind != SHT_NOBITS and size and offset + size <= len(data):
            spans.append((offset, size))
    return tuple(sorted(spans))


def _linkage(path: str, data: bytes) -> BinaryInfo | None:
    """The dynamic-linking facts of a 64-bit little-endian ELF file of a known machine, read
    the way ld.so reads them: PT_DYNAMIC's entries, their strings from DT_STRTAB through the
    PT_LOAD segment that maps it. A few struct reads, where pyelftools parses every section
    header: the resolver runs this on every staged binary of every package. Anything
    unexpected gives None, and pyelftools reads the file (and names what is wrong)."""
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        return None
    # the 64-bit little-endian machines the wheels ship, as pyelftools names them
    platform = by_elf_machine(struct.unpack_from("<H", data, 18)[0])
    machine = None if platform is None else platform.elf_name
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    if machine is None or phentsize != PROGRAM_HEADER.size:
        return None
    if phoff + phnum * PROGRAM_HEADER.size > len(data):
        return None
    loads, dynamic = [], None
    for index in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = PROGRAM_HEADER.unpack_from(
            data, phoff + index * PROGRAM_HEADER.size
        )
        if kind == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None or dynamic[0] + dynamic[1] > len(data):
        return None
    tags: list[tuple[int, int]] = []
    for tag, value in struct.iter_unpack(
        "<qQ", data[dynamic[0] : dynamic[0] + dynamic[1] // 16 * 16]
    ):
        if tag == DT_NULL:
            break
        tags.append((tag, value))
    else:
        return None  # no DT_NULL: a truncated table
    found = dict(tags)
    strtab = next(
        (
            offset + found[DT_STRTAB] - vaddr
            for vaddr, offset, filesz in loads
            if DT_STRTAB in found and vaddr <= found[DT_STRTAB] < vaddr + filesz
        ),
        None,
    )
    if strtab is None or DT_STRSZ not in found or strtab + found[DT_STRSZ] > len(data):
        return None
    strings = data[strtab : strtab + found[DT_STRSZ]]
    values: dict[int, list[str]] = {DT_NEEDED: [], DT_SONAME: [], DT_RPATH: [], DT_RUNPATH: []}
    for tag, value in tags:
        if tag in values:
            end = strings.find(b"\0", value)
            if end < 0:
                return None
            try:
                values[tag].append(strings[value:end].decode("utf-8"))
            except UnicodeDecodeError:
                return None
    return BinaryInfo(
        path=path,
        machine=machine,
        soname=values[DT_SONAME][-1] if values[DT_SONAME] else "",
        needed=tuple(values[DT_NEEDED]),
        # the last of each, as ld.so (which keeps the last it meets) and _analyse take them
        runpath=tuple(p for p in (values[DT_RUNPATH] or [""])[-1].split(":") if p),
        rpath=tuple(p for p in (values[DT_RPATH] or [""])[-1].split(":") if p),
        registry=Registry.NONE,
        et_operators=(),
        torch_schemas=(),
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
    platform = by_binary_machine(machine)
    types = None if platform is None else platform.elf_relocations
    relative_type, absolute_type = types or (None, None)
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


def exported_symbols(path: str, data: bytes) -> frozenset[str]:
    """The dynamic symbols the ELF file `data` defines for others to use: global or weak,
    default or protected visibility, not undefined (what `nm -D --defined-only` lists, less
    local and hidden ones); versioned names without their version."""
    try:
        with _reading(data) as elf:
            symbols = elf.get_section_by_name(".dynsym")
            if not isinstance(symbols, SymbolTableSection):
                return frozenset()
            return frozenset(
                symbol.name
                for symbol in symbols.iter_symbols()
                if symbol.name
                and symbol["st_shndx"] != "SHN_UNDEF"
                and symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE")
                and symbol["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")
            )
    except (ELFError, struct.error, ValueError, ArithmeticError, AssertionError) as exc:
        raise BinaryError(f"cannot read ELF ({exc or type(exc).__name__}): {path}") from exc


def has_debug_info(data: bytes) -> bool:
    """Whether the ELF file `data` has DWARF (a .debug_info section), which abidiff needs to
    compare type layouts; False for anything that does not read as ELF."""
    try:
        with _reading(data) as elf:
            return elf.get_section_by_name(".debug_info") is not None
    except (ELFError, struct.error, ValueError, ArithmeticError, AssertionError):
        return False


SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr, little-endian
SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym, little-endian
SHT_DYNSYM = 11
EXPORTED_BINDS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
EXPORTED_VISIBILITIES = (0, 3)  # STV_DEFAULT, STV_PROTECTED


def exported_names(path: str, data: bytes) -> tuple[str, ...]:
    """The names exported_symbols gives, read with struct from `.dynsym` of a 64-bit
    little-endian file (pyelftools builds an object per symbol: tens of thousands per wheel);
    other files are read by exported_symbols."""
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        return tuple(exported_symbols(path, data))
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize != SECTION_HEADER.size or shoff + shnum * shentsize > len(data):
        return tuple(exported_symbols(path, data))
    headers = [SECTION_HEADER.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next((h for h in headers if h[1] == SHT_DYNSYM), None)
    if dynsym is None:
        return ()
    offset, size, link = dynsym[4], dynsym[5], dynsym[6]
    if link >= shnum or offset + size > len(data):
        return tuple(exported_symbols(path, data))
    strings = data[headers[link][4] : headers[link][4] + headers[link][5]]
    names = []
    for name_at, info, other, shndx, _, _ in SYMBOL.iter_unpack(
        data[offset : offset + size // SYMBOL.size * SYMBOL.size]
    ):
        if (
            name_at
            and shndx != 0
            and info >> 4 in EXPORTED_BINDS
            and other & 3 in EXPORTED_VISIBILITIES
        ):
            names.append(strings[name_at : strings.find(b"\0", name_at)].decode("utf-8", "replace"))
    return tuple(names)
