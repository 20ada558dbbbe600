"""The digest of a binary with what the linker stamps per link set aside.

Two links of the same code differ in a few stamped bytes only: an ELF file's GNU build-id, a
Mach-O file's LC_UUID and its code signature (whose page hashes cover the UUID). A release
shares a package between wheels when its files are the same but for those bytes, so each
binary's plan records this digest once, while the wheel is read, and the release compares
digests rather than reading the files again.
"""

from __future__ import annotations

import hashlib

Spans = tuple[tuple[int, int], ...]  # (offset, length), sorted, not overlapping


def unstamped_digest(data: bytes, spans: Spans) -> str:
    """sha256 (hex) over the file's size, the stamped spans' offsets and lengths, and every
    byte outside them: equal for two files exactly when they have the same size, the same
    spans, and the same bytes outside the spans. The bytes are hashed through a memoryview,
    so no part of the file is copied."""
    digest = hashlib.sha256(f"{len(data)} {spans!r}\n".encode())
    view = memoryview(data)
    position = 0
    for start, size in spans:
        digest.update(view[position:start])
        position = max(position, start + size)
    digest.update(view[position:])
    return digest.hexdigest()
