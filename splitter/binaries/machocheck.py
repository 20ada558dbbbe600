"""The structural rules LLVM's libObject holds a thin little-endian Mach-O file to when it
opens one (the MachOObjectFile constructor, llvm/lib/Object/MachOObjectFile.cpp, LLVM 14).

A file LLVM calls "truncated or malformed object" would pass `splitter plan` and then fail
where LLVM's tools read it: the build's llvm-install-name-tool (for the files machoedit leaves
to it), verify's llvm-otool, a conda recipe's install_name_tool on macOS. check_structure
refuses it first, with LLVM's words for the rule, so that they can be searched.
In one pass over the load commands (splitter.binaries.machocommands lists them):
- each command's size: at least 8, a multiple of 8 (64-bit) or 4 (32-bit), inside the file
  and inside the load commands; the size each known command must have; the commands allowed
  once (LC_SYMTAB, LC_UUID, LC_MAIN, LC_ID_DYLIB...); no obsolete command;
- strings inside their command (dylibs, dylinkers, rpaths, sub-frameworks, linker options);
- segments and their sections against the file and the segment; thread states;
- every blob the commands place (symbol and string tables, the dysymtab's tables, dyld info,
  linkedit data, section contents and relocations) inside the file, overlapping neither the
  headers and load commands nor another blob;
- then: LC_DYSYMTAB's symbol ranges inside LC_SYMTAB's, one LC_ID_DYLIB in a dylib.
Two rules are splitter's own, where LLVM's tools accept a file they then read otherwise than
splitter would: no LC_IDENT (machocommands.OBSOLETE says why), and no empty name (an
LC_ID_DYLIB naming "" is a dylib whose install name LLVM lists as "", and splitter's reader
as none).
read_macho has checked the magic, that the header fits, and the file type: MH_DYLIB_STUB,
MH_DSYM and MH_CORE, which LLVM exempts from some rules, never come here.
"""

from __future__ import annotations

import struct

from splitter.binaries.machocommands import (
    EXACT_LOAD,
    LC_BUILD_VERSION,
    LC_ID_DYLIB,
    LC_LINKER_OPTION,
    LC_NOTE,
    LC_SEGMENT,
    LC_SEGMENT_64,
    LC_THREAD,
    LC_UNIXTHREAD,
    LEAST,
    OBSOLETE,
    SIZED,
    STRINGS,
    THREAD_STATES,
)
from splitter.errors import BinaryError

MH_DYLIB = 0x6
ZEROFILLS = (0x1, 0x12)  # S_ZEROFILL, S_THREAD_LOCAL_ZEROFILL: LLVM compares the whole flags
MASK = (1 << 64) - 1  # LLVM sums a section's and a segment's 64-bit addresses in uint64_t


class _Malformed(Exception):
    """One rule broken, in LLVM's words."""


def check_structure(path: str, data: bytes) -> None:
    """Refuse the Mach-O file `data` (at `path`) with a BinaryError when LLVM's libObject would
    call it truncated or malformed, naming the first rule it breaks."""
    try:
        _Checker(data).run()
    except _Malformed as broken:
        raise BinaryError(f"cannot read Mach-O ({broken}): {path}") from None


class _Checker:
    """One walk over a file's load commands: the blobs placed so far, the commands seen."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)
        self.wide = data[:4] == b"\xcf\xfa\xed\xfe"
        self.cpu, _, self.filetype, self.count, commands = struct.unpack_from("<5I", data, 4)
        self.headers = (32 if self.wide else 28) + commands
        self.blobs: list[tuple[int, int, str]] = [(0, self.headers, "Mach-O headers")]
        self.seen: dict[str, int] = {}  # a group of commands allowed once -> where its one is

    def run(self) -> None:
        if self.headers > self.size:
            raise _Malformed("load commands extend past the end of the file")
        at, align = (32, 8) if self.wide else (28, 4)
        for index in range(self.count):
            if at + 8 > self.headers:
                raise _Malformed(
                    f"load command {index} extends past the end all load commands in the file"
                )
            command, size = struct.unpack_from("<II", self.data, at)
            if at + size > self.size:
                raise _Malformed(f"load command {index} extends past end of file")
            if size < 8:
                raise _Malformed(f"load command {index} with size less than 8 bytes")
            if size % align:
                raise _Malformed(f"load command {index} cmdsize not a multiple of {align}")
            self.command(index, command, at, size)
            at += size
        self.finish()

    def command(self, index: int, command: int, at: int, size: int) -> None:
        if command in (LC_SEGMENT_64, LC_SEGMENT):
            self.segment(index, at, size, command == LC_SEGMENT_64)
        elif command in SIZED:
            self.sized(index, command, at, size)
        elif command in STRINGS:
            self.string(index, command, at, size)
        elif command == LC_NOTE:
            if size != 40:
                raise _Malformed(f"load command {index} LC_NOTE has incorrect cmdsize")
            offset, length = struct.unpack_from("<QQ", self.data, at + 24)
            label = f"LC_NOTE command {index}"
            self.place(label, offset, length, "offset", "size field", "LC_NOTE data")
        elif command == LC_BUILD_VERSION:
            if at + 24 > self.size:
                raise _Malformed("Structure read out-of-range")
            (tools,) = struct.unpack_from("<I", self.data, at + 20)
            if size != 24 + 8 * tools:
                raise _Malformed(
                    f"load command {index} LC_BUILD_VERSION_COMMAND has incorrect cmdsize"
                )
        elif command in (LC_THREAD, LC_UNIXTHREAD):
            self.thread(index, at, size, "LC_THREAD" if command == LC_THREAD else "LC_UNIXTHREAD")
        elif command == LC_LINKER_OPTION:
            self.linker_option(index, at, size)
        elif command in OBSOLETE:
            raise _Malformed(
                f"load command {index} for cmd value of: {command} is obsolete and not supported"
            )

    def once(self, group: str, at: int) -> None:
        if group in self.seen:
            raise _Malformed(f"more than one {group} command")
        self.seen[group] = at

    def sized(self, index: int, command: int, at: int, size: int) -> None:
        """A command of one size, allowed once, and the blobs it places."""
        name, group, wanted, wording, pairs, blobs = SIZED[command]
        label = f"{name} command {index}"
        named = f"load command {index} {name}" if wording == EXACT_LOAD else label
        wrong = f"{named} has incorrect cmdsize"
        if wording == LEAST and size < wanted:
            raise _Malformed(f"load command {index} {name} cmdsize too small")
        if wording != LEAST and size != wanted:
            raise _Malformed(wrong)
        self.once(group, at)
        if size != wanted:
            raise _Malformed(wrong)
        fields = struct.unpack_from(f"<{2 * len(blobs)}I", self.data, at + pairs)
        for number, (start, extent, units, blob) in enumerate(blobs):
            offset, count = fields[2 * number], fields[2 * number + 1]
            phrase = extent.format("_64" if self.wide else "")
            self.place(label, offset, count * units[self.wide], start, phrase, blob)

    def place(
        self, label: str, offset: int, size: int, start: str, extent: str, blob: str | None
    ) -> None:
        """The blob of `size` bytes at `offset`, given by `label`'s fields `start` and `extent`:
        inside the file, and overlapping no blob placed before it."""
        if offset > self.size:
            raise _Malformed(f"{start} field of {label} extends past the end of the file")
        if offset + size > self.size:
            raise _Malformed(
                f"{start} field plus {extent} of {label} extends past the end of the file"
            )
        if blob is not None and size:
            for other, length, name in self.blobs:  # in order: LLVM names the first
                if offset < other + length and offset + size > other:
                    raise _Malformed(
                        f"{blob} at offset {offset} with a size of {size}, overlaps {name} at "
                        f"offset {other} with a size of {length}"
                    )
            self.blobs.append((offset, size, blob))
            self.blobs.sort()

    def segment(self, index: int, at: int, size: int, wide: bool) -> None:
        name = "LC_SEGMENT_64" if wide else "LC_SEGMENT"
        head, each = (72, 80) if wide else (56, 68)
        if size < head:
            raise _Malformed(f"load command {index} {name} cmdsize too small")
        address, vmsize, offset, filesize, _, _, count, _ = struct.unpack_from(
            "<4Q4I" if wide else "<8I", self.data, at + 24
        )
        if count * each > size - head:
            raise _Malformed(
                f"load command {index} inconsistent cmdsize in {name} for the number of sections"
            )
        table = self.data[at + head : at + head + count * each]
        for number, fields in enumerate(
            struct.iter_unpack("<16s16s2Q8I" if wide else "<16s16s9I", table)
        ):
            label = f"section {number} in {name} command {index}"
            self.section(label, fields[2:9], (address, vmsize, offset, filesize))
        label = f"load command {index} fileoff field"
        if offset > self.size:
            raise _Malformed(f"{label} in {name} extends past the end of the file")
        if offset + filesize > self.size:
            raise _Malformed(
                f"{label} plus filesize field in {name} extends past the end of the file"
            )
        if vmsize and filesize > vmsize:
            raise _Malformed(
                f"load command {index} filesize field in {name} greater than vmsize field"
            )

    def section(self, label: str, fields: tuple[int, ...], segment: tuple[int, ...]) -> None:
        """One section of a segment (vmaddr, vmsize, fileoff, filesize)."""
        address, size, offset, _, relocations, count, flags = fields
        base, vmsize, fileoff, filesize = segment
        filled = flags not in ZEROFILLS
        if filled and offset > self.size:
            raise _Malformed(f"offset field of {label} extends past the end of the file")
        if filled and fileoff == 0 and offset < self.headers and size:
            raise _Malformed(f"offset field of {label} not past the headers of the file")
        if filled and offset + size > self.size:
            raise _Malformed(
                f"offset field plus size field of {label} extends past the end of the file"
            )
        if filled and size > filesize:
            raise _Malformed(f"size field of {label} greater than the segment")
        if size and address < base:
            raise _Malformed(f"addr field of {label} less than the segment's vmaddr")
        if vmsize and size and (address + size) & MASK > (base + vmsize) & MASK:
            raise _Malformed(
                f"addr field plus size of {label} greater than than the segment's vmaddr plus "
                "vmsize"
            )
        if filled:
            self.place(label, offset, size, "offset", "size field", "section contents")
        extent = "nreloc field times sizeof(struct relocation_info)"
        self.place(label, relocations, 8 * count, "reloff", extent, "section relocation entries")

    def string(self, index: int, command: int, at: int, size: int) -> None:
        """A command naming a string: the string starts past the struct and ends in it."""
        name, least, kind, field, what = STRINGS[command]
        if size < least:
            raise _Malformed(f"load command {index} {name} cmdsize too small")
        (offset,) = struct.unpack_from("<I", self.data, at + 8)
        start = f"load command {index} {name} {field}.offset field"
        if offset < least:
            raise _Malformed(f"{start} too small, not past the end of the {kind}")
        if offset >= size:
            raise _Malformed(f"{start} extends past the end of the load command")
        if self.data.find(b"\x00", at + offset, at + size) < 0:
            raise _Malformed(
                f"load command {index} {name} {what} extends past the end of the load command"
            )
        if self.data[at + offset] == 0:  # splitter's rule (see the module)
            raise _Malformed(f"load command {index} {name} {what} is empty")
        if command == LC_ID_DYLIB:
            self.once("LC_ID_DYLIB", at)
            if self.filetype != MH_DYLIB:
                raise _Malformed("LC_ID_DYLIB load command in non-dynamic library file type")

    def thread(self, index: int, at: int, size: int, name: str) -> None:
        """LC_THREAD or LC_UNIXTHREAD: (flavor, count, state) entries the CPU type knows."""
        state, end, number = at + 8, at + size, 0
        flavors = THREAD_STATES.get(self.cpu, {})
        while state < end:
            if state + 8 > end:
                field = "flavor" if state + 4 > end else " count"
                raise _Malformed(
                    f"load command {index}{field} in {name} extends past end of command"
                )
            flavor, count = struct.unpack_from("<II", self.data, state)
            if self.cpu not in THREAD_STATES:
                raise _Malformed(
                    f"unknown cputype ({self.cpu}) load command {index} for {name} command "
                    "can't be checked"
                )
            if flavor not in flavors:
                raise _Malformed(
                    f"load command {index} unknown flavor ({flavor}) for flavor number {number} "
                    f"in {name} command"
                )
            kind, length = flavors[flavor]
            if count != length // 4:
                raise _Malformed(
                    f"load command {index} count not {kind}_COUNT for flavor number {number} "
                    f"which is a {kind} flavor in {name} command"
                )
            if state + 8 + length > end:
                raise _Malformed(
                    f"load command {index} {kind} extends past end of command in {name} command"
                )
            state, number = state + 8 + length, number + 1
        if name == "LC_UNIXTHREAD":
            self.once(name, at)

    def linker_option(self, index: int, at: int, size: int) -> None:
        """LC_LINKER_OPTION: as many NUL-terminated strings as its count says."""
        if size < 12:
            raise _Malformed(f"load command {index} LC_LINKER_OPTION cmdsize too small")
        (count,) = struct.unpack_from("<I", self.data, at + 8)
        strings = self.data[at + 12 : at + size].split(b"\x00")
        found = sum(1 for string in strings if string)
        if strings[-1]:
            raise _Malformed(
                f"load command {index} LC_LINKER_OPTION string #{found} is not NULL terminated"
            )
        if count != found:
            raise _Malformed(
                f"load command {index} LC_LINKER_OPTION string count {count} does not match "
                "number of strings"
            )

    def finish(self) -> None:
        """What LLVM checks once every command is read."""
        symtab, dysymtab = self.seen.get("LC_SYMTAB"), self.seen.get("LC_DYSYMTAB")
        if dysymtab is not None and symtab is None:
            raise _Malformed("contains LC_DYSYMTAB load command without a LC_SYMTAB load command")
        if dysymtab is not None and symtab is not None:
            (symbols,) = struct.unpack_from("<I", self.data, symtab + 12)
            ranges = struct.unpack_from("<6I", self.data, dysymtab + 8)
            for number, kind in enumerate(("local", "extdef", "undef")):
                first, count = ranges[2 * number], ranges[2 * number + 1]
                where = "in LC_DYSYMTAB load command extends past the end of the symbol table"
                if count and first > symbols:
                    raise _Malformed(f"i{kind}sym {where}")
                if count and first + count > symbols:
                    raise _Malformed(f"i{kind}sym plus n{kind}sym {where}")
        if self.filetype == MH_DYLIB and "LC_ID_DYLIB" not in self.seen:
            raise _Malformed("no LC_ID_DYLIB load command in dynamic library filetype")
