"""A second, independent reading of Mach-O files for the tests: struct and hashlib only, no lief.

- `check_signature`: the ad-hoc code signature as arm64 macOS checks it. LC_CODE_SIGNATURE points
  at a SuperBlob (big-endian) whose CodeDirectory holds one hash per page of the file up to
  codeLimit; every page is hashed again here and compared. The signature must also cover the
  whole file before itself (codeLimit == its offset), as the linker and LLVM write it.
- `chained_fixups`: the pointers of an LC_DYLD_CHAINED_FIXUPS file, walked page by page from
  dyld_chained_starts_in_segment (DYLD_CHAINED_PTR_64 / _64_OFFSET): rebases with their target
  and the addresses of binds.
- `kernel_table_entries`: the 24-byte ExecuTorch Kernel records among those pointers.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

MH_MAGIC_64 = 0xFEEDFACF
LC_SEGMENT_64 = 0x19
LC_CODE_SIGNATURE = 0x1D
LC_DYLD_CHAINED_FIXUPS = 0x80000034
CSMAGIC_EMBEDDED_SIGNATURE = 0xFADE0CC0
CSMAGIC_CODEDIRECTORY = 0xFADE0C02
CSSLOT_CODEDIRECTORY = 0
CS_HASHTYPE_SHA256 = 2
CS_ADHOC = 0x2
CHAINED_PTR_64, CHAINED_PTR_64_OFFSET = 2, 6
PAGE_NONE = 0xFFFF
OP_NAME = re.compile(rb"\w+::\w+(?:\.\w+)?", re.ASCII)


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """An LC_SEGMENT_64 as the file maps it."""

    name: str
    vmaddr: int
    fileoff: int
    filesize: int
    executable: bool


def load_commands(data: bytes) -> list[tuple[int, int]]:
    """(cmd, file offset) of every load command of a thin 64-bit Mach-O file."""
    magic, _, _, _, ncmds, _, _, _ = struct.unpack_from("<8I", data, 0)
    assert magic == MH_MAGIC_64, f"not a thin 64-bit Mach-O: {magic:#x}"
    out, offset = [], 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<2I", data, offset)
        out.append((cmd, offset))
        offset += size
    return out


def segments(data: bytes) -> list[Segment]:
    """Every segment with file contents."""
    out = []
    for cmd, offset in load_commands(data):
        if cmd != LC_SEGMENT_64:
            continue
        name = data[offset + 8 : offset + 24].rstrip(b"\0").decode()
        vmaddr, _, fileoff, filesize, _, initprot = struct.unpack_from("<4Q2i", data, offset + 24)
        if filesize:
            out.append(
                Segment(
                    name=name,
                    vmaddr=vmaddr,
                    fileoff=fileoff,
                    filesize=filesize,
                    executable=bool(initprot & 4),
                )
            )
    return out


def check_signature(data: bytes) -> list[str]:
    """Every way the file's ad-hoc signature fails to match its bytes; [] when it holds."""
    found = [offset for cmd, offset in load_commands(data) if cmd == LC_CODE_SIGNATURE]
    if len(found) != 1:
        return [f"{len(found)} LC_CODE_SIGNATURE commands"]
    dataoff, datasize = struct.unpack_from("<2I", data, found[0] + 8)
    if dataoff + datasize > len(data):
        return [f"signature {dataoff}+{datasize} runs past the file ({len(data)})"]
    magic, _, count = struct.unpack_from(">3I", data, dataoff)
    if magic != CSMAGIC_EMBEDDED_SIGNATURE:
        return [f"no embedded-signature SuperBlob at {dataoff:#x}: {magic:#x}"]
    index = [struct.unpack_from(">2I", data, dataoff + 12 + 8 * i) for i in range(count)]
    directories = [dataoff + off for kind, off in index if kind == CSSLOT_CODEDIRECTORY]
    if len(directories) != 1:
        return [f"{len(directories)} CodeDirectories"]
    cd = directories[0]
    (
        magic,
        _,
        version,
        flags,
        hash_offset,
        _,
        special,
        slots,
        limit,
        hash_size,
        hash_type,
        _,
        page_log2,
    ) = struct.unpack_from(">9I4B", data, cd)
    problems = []
    if magic != CSMAGIC_CODEDIRECTORY:
        return [f"CodeDirectory magic {magic:#x}"]
    if hash_type != CS_HASHTYPE_SHA256 or hash_size != 32:
        return [f"hash type {hash_type} size {hash_size}, not SHA-256"]
    if not flags & CS_ADHOC:
        problems.append(f"CodeDirectory flags {flags:#x} lack CS_ADHOC")
    if version >= 0x20300:
        (limit64,) = struct.unpack_from(">Q", data, cd + 56)
        limit = limit64 or limit
    if limit != dataoff:
        problems.append(f"codeLimit {limit:#x} is not the signature's offset {dataoff:#x}")
    page = 1 << page_log2
    if slots != (limit + page - 1) // page:
        problems.append(f"{slots} code slots for codeLimit {limit:#x} in {page}-byte pages")
    for slot in range(min(slots, (limit + page - 1) // page)):
        start = cd + hash_offset + slot * hash_size
        stored = data[start : start + hash_size]
        actual = hashlib.sha256(data[slot * page : min((slot + 1) * page, limit)]).digest()
        if stored != actual:
            problems.append(f"page {slot} (offset {slot * page:#x}) hash differs")
    del special  # special slots hash Info.plist/requirements/entitlements, none in a dylib
    return problems


def chained_fixups(data: bytes) -> tuple[dict[int, int], set[int]]:
    """Rebases (pointer address -> target address) and bind addresses of the file."""
    found = [offset for cmd, offset in load_commands(data) if cmd == LC_DYLD_CHAINED_FIXUPS]
    assert len(found) == 1, "no LC_DYLD_CHAINED_FIXUPS"
    base, _ = struct.unpack_from("<2I", data, found[0] + 8)
    _, starts_offset = struct.unpack_from("<2I", data, base)
    image = base + starts_offset
    (seg_count,) = struct.unpack_from("<I", data, image)
    segs = [s for s in segments(data) if s.name != "__PAGEZERO"]
    by_vm = sorted(segs, key=lambda s: s.vmaddr)
    text_base = next(s.vmaddr for s in by_vm if s.name == "__TEXT")

    def file_offset(vmaddr: int) -> int:
        seg = next(s for s in by_vm if s.vmaddr <= vmaddr < s.vmaddr + s.filesize)
        return seg.fileoff + vmaddr - seg.vmaddr

    rebases: dict[int, int] = {}
    binds: set[int] = set()
    for index in range(seg_count):
        (info,) = struct.unpack_from("<I", data, image + 4 + 4 * index)
        if info == 0:
            continue
        start = image + info
        _, page_size, pointer_format, segment_offset, _, page_count = struct.unpack_from(
            "<IHHQIH", data, start
        )
        assert pointer_format in (CHAINED_PTR_64, CHAINED_PTR_64_OFFSET), pointer_format
        pages = struct.unpack_from(f"<{page_count}H", data, start + 22)
        for number, first in enumerate(pages):
            if first == PAGE_NONE:
                continue
            address = text_base + segment_offset + number * page_size + first
            while True:
                (raw,) = struct.unpack_from("<Q", data, file_offset(address))
                if raw >> 63:
                    binds.add(address)
                else:
                    target = (raw & ((1 << 36) - 1)) | (((raw >> 36) & 0xFF) << 56)
                    if pointer_format == CHAINED_PTR_64_OFFSET:
                        target += text_base  # an offset from the image's start
                    rebases[address] = target
                step = (raw >> 51) & 0xFFF
                if step == 0:
                    break
                address += 4 * step
    return rebases, binds


def kernel_table_entries(data: bytes) -> list[str]:
    """Operator names of the Kernel records (name, null or `v1/` key, code) in the file."""
    segs = segments(data)

    def locate(vmaddr: int) -> tuple[int, bool] | None:
        for s in segs:
            if s.vmaddr <= vmaddr < s.vmaddr + s.filesize:
                return s.fileoff + vmaddr - s.vmaddr, s.executable
        return None

    def cstring(vmaddr: int) -> bytes | None:
        where = locate(vmaddr)
        if where is None:
            return None
        end = data.find(b"\0", where[0], where[0] + 256)
        return None if end < 0 else data[where[0] : end]

    rebases, binds = chained_fixups(data)
    names = []
    for address, target in rebases.items():
        name = cstring(target)
        if name is None or not OP_NAME.fullmatch(name):
            continue
        code = rebases.get(address + 16)
        if code is not None:
            where = locate(code)
            if where is None or not where[1]:
                continue
        elif address + 16 not in binds:
            continue
        key = address + 8
        if key in rebases:
            text = cstring(rebases[key])
            if text is None or not text.startswith(b"v1/"):
                continue
        else:
            where = locate(key)
            if key in binds or where is None or data[where[0] : where[0] + 8] != bytes(8):
                continue
        names.append(name.decode())
    return names


def same_but_spans(
    left: bytes,
    right: bytes,
    left_spans: tuple[tuple[int, int], ...],
    right_spans: tuple[tuple[int, int], ...],
) -> bool:
    """Whether two files are the same bytes once the same stamped spans are set aside in each:
    a byte comparison, independent of the digests splitter's plans record."""
    if len(left) != len(right) or not left_spans or left_spans != right_spans:
        return False
    position = 0
    for start, size in sorted(left_spans):
        if left[position:start] != right[position:start]:
            return False
        position = max(position, start + size)
    return left[position:] == right[position:]
