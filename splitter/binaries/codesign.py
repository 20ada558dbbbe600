"""Check a Mach-O file's ad-hoc code signature against its bytes, as arm64 macOS does.

LC_CODE_SIGNATURE points at a SuperBlob (big-endian) whose CodeDirectory holds a SHA-256 hash
of every page of the file up to codeLimit. `splitter verify` runs this on Linux, where there is
no `codesign`, for every Mach-O file it installs.
"""

from __future__ import annotations

import hashlib
import struct

LC_CODE_SIGNATURE = 0x1D
MH_MAGIC_64 = 0xFEEDFACF
SUPERBLOB = 0xFADE0CC0
CODEDIRECTORY = 0xFADE0C02
SHA256 = 2


def signature_problems(data: bytes) -> list[str]:
    """How the signature of the thin 64-bit Mach-O `data` fails to match it; [] when it holds."""
    try:
        return _problems(data)
    except struct.error as exc:
        return [f"truncated load commands or signature ({exc})"]


def _problems(data: bytes) -> list[str]:
    magic, _, _, _, count, _, _, _ = struct.unpack_from("<8I", data, 0)
    if magic != MH_MAGIC_64:
        return [f"not a thin 64-bit Mach-O (magic {magic:#x})"]
    offset, found = 32, []
    for _ in range(count):
        cmd, size = struct.unpack_from("<2I", data, offset)
        if cmd == LC_CODE_SIGNATURE:
            found.append(struct.unpack_from("<2I", data, offset + 8))
        offset += size
    if len(found) != 1:
        return [f"{len(found)} LC_CODE_SIGNATURE load commands (unsigned code does not load)"]
    start, _ = found[0]
    magic, _, blobs = struct.unpack_from(">3I", data, start)
    if magic != SUPERBLOB:
        return [f"no signature SuperBlob at {start:#x}"]
    index = [struct.unpack_from(">2I", data, start + 12 + 8 * i) for i in range(blobs)]
    directories = [start + at for slot, at in index if slot == 0]
    if len(directories) != 1:
        return [f"{len(directories)} CodeDirectories"]
    cd = directories[0]
    fields = struct.unpack_from(">9I4B", data, cd)
    magic, version, hash_offset, slots, limit = (
        fields[0],
        fields[2],
        fields[4],
        fields[7],
        fields[8],
    )
    hash_size, hash_type, page_log2 = fields[9], fields[10], fields[12]
    if magic != CODEDIRECTORY or hash_type != SHA256 or hash_size != 32:
        return ["the CodeDirectory is not a SHA-256 one"]
    if version >= 0x20300:
        limit = struct.unpack_from(">Q", data, cd + 56)[0] or limit
    problems = []
    if limit != start:
        problems.append(f"codeLimit {limit:#x} is not where the signature starts ({start:#x})")
    page = 1 << page_log2
    for slot in range(slots):
        stored = data[cd + hash_offset + 32 * slot : cd + hash_offset + 32 * (slot + 1)]
        if hashlib.sha256(data[slot * page : min((slot + 1) * page, limit)]).digest() != stored:
            problems.append(f"page {slot} does not match its hash")
    return problems
