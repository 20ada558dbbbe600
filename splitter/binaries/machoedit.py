"""Set a Mach-O file's LC_RPATHs in place and keep its linker-made ad-hoc signature valid.

ld64 signs every arm64 file it links ad hoc (`linker-signed`): one CodeDirectory with a
SHA-256 hash of each 4 KiB page up to the signature, and nothing else (no requirements, no
CMS blob, no special slots); macOS checks those hashes when it maps a page. Editing the load
commands changes the first page(s) only and not the file's length, so re-signing is
re-hashing the pages that changed. That is what this does, in one pass over the bytes,
instead of one or two llvm-install-name-tool processes per file (docs/performance.md). Files
it cannot edit so simply (another signature, no room for the
load commands, a 32-bit file) are left to llvm-install-name-tool
(splitter.binaries.relocate.set_macho_rpaths).
"""

from __future__ import annotations

import hashlib
import struct

from splitter.binaries.machoread import LC_CODE_SIGNATURE, LC_RPATH, read_macho

HEADER = 32  # mach_header_64
SUPERBLOB, CODEDIRECTORY = 0xFADE0CC0, 0xFADE0C02
ADHOC, LINKER_SIGNED = 0x2, 0x20000
SHA256, PAGE_SHIFT = 2, 12


def with_rpaths(path: str, data: bytes, rpaths: tuple[str, ...]) -> bytes | None:
    """`data` with exactly `rpaths` as its LC_RPATHs, in order (the other load commands kept
    in theirs, the new LC_RPATHs after them), re-signed; None when this file is not one this
    can edit (see the module)."""
    macho = read_macho(path, data)
    if macho.bits != 64:
        return None
    count, size = struct.unpack_from("<II", data, 16)
    kept, offset = [], HEADER
    for _ in range(count):
        command, length = struct.unpack_from("<II", data, offset)
        if command != LC_RPATH:
            kept.append(data[offset : offset + length])
        offset += length
    for entry in rpaths:
        text = entry.encode() + b"\x00"
        length = (12 + len(text) + 7) // 8 * 8
        kept.append(struct.pack("<III", LC_RPATH, length, 12) + text.ljust(length - 12, b"\x00"))
    commands = b"".join(kept)
    room = min((s.offset for s in macho.sections if s.offset), default=len(data))
    signature = _signature(data, _signature_span(data, offset=HEADER, count=count))
    if HEADER + len(commands) > room or signature is None:
        return None
    edited = bytearray(data)
    struct.pack_into("<II", edited, 16, len(kept), len(commands))
    end = HEADER + max(size, len(commands))
    edited[HEADER:end] = commands.ljust(end - HEADER, b"\x00")
    hashes, limit = signature
    for page in range((end + (1 << PAGE_SHIFT) - 1) >> PAGE_SHIFT):
        start = page << PAGE_SHIFT
        digest = hashlib.sha256(edited[start : min(start + (1 << PAGE_SHIFT), limit)]).digest()
        edited[hashes + 32 * page : hashes + 32 * (page + 1)] = digest
    return bytes(edited)


def _signature_span(data: bytes, offset: int, count: int) -> tuple[int, int] | None:
    for _ in range(count):
        command, length = struct.unpack_from("<II", data, offset)
        if command == LC_CODE_SIGNATURE:
            return struct.unpack_from("<II", data, offset + 8)
        offset += length
    return None


def _signature(data: bytes, span: tuple[int, int] | None) -> tuple[int, int] | None:
    """(offset of the page hashes, code limit) of a linker-made ad-hoc signature at `span`;
    None for any other signature, or none."""
    if span is None:
        return None
    start, size = span
    if start + size > len(data) or size < 12:
        return None
    magic, _, blobs = struct.unpack_from(">3I", data, start)
    if magic != SUPERBLOB or blobs != 1 or size < 20:
        return None
    kind, at = struct.unpack_from(">2I", data, start + 12)
    directory = start + at
    if kind != 0 or directory + 44 > start + size:
        return None
    magic, _, _, flags, hashes, _, special, slots, limit = struct.unpack_from(
        ">9I", data, directory
    )
    hash_size, hash_type, _, page_shift = struct.unpack_from(">4B", data, directory + 36)
    if (
        magic != CODEDIRECTORY
        or flags & (ADHOC | LINKER_SIGNED) != ADHOC | LINKER_SIGNED
        or (hash_size, hash_type, page_shift, special) != (32, SHA256, PAGE_SHIFT, 0)
        or limit != start
        or slots != (limit + (1 << PAGE_SHIFT) - 1) >> PAGE_SHIFT
        or directory + hashes + 32 * slots > start + size
    ):
        return None
    return directory + hashes, limit
