"""ExecuTorch kernel tables, read the same way from any object format.

A `Kernel` is 24 bytes on LP64: name pointer, kernel-key pointer, function pointer. In a shared
library a static table shows as pointer fixups (ELF relocations, Mach-O rebases and binds): +0
to an op-name string, +8 null or to a `v1/...` key string, +16 into code. Op-name strings alone
prove nothing (kernels also embed them in error messages), so only table entries count.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Set
from dataclasses import dataclass

OP_NAME = re.compile(rb"[a-z_][a-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass(frozen=True, slots=True)
class Image:
    """Virtual-address view of the loadable segments, for reading pointed-to bytes."""

    data: bytes
    starts: tuple[int, ...]
    segments: tuple[tuple[int, int, int, bool], ...]  # vaddr, filesz, offset, executable

    def offset(self, vaddr: int) -> int | None:
        index = bisect_right(self.starts, vaddr) - 1
        if index < 0:
            return None
        start, size, offset, _ = self.segments[index]
        return offset + vaddr - start if vaddr < start + size else None

    def executable(self, vaddr: int) -> bool:
        index = bisect_right(self.starts, vaddr) - 1
        if index < 0:
            return False
        start, size, _, execute = self.segments[index]
        return execute and vaddr < start + size

    def cstring(self, vaddr: int, limit: int = 256) -> bytes | None:
        offset = self.offset(vaddr)
        if offset is None:
            return None
        end = self.data.find(b"\x00", offset, offset + limit)
        return None if end < 0 else self.data[offset:end]

    def word(self, vaddr: int) -> int | None:
        offset = self.offset(vaddr)
        if offset is None or offset + 8 > len(self.data):
            return None
        return int.from_bytes(self.data[offset : offset + 8], "little")


def make_image(data: bytes, segments: list[tuple[int, int, int, bool]]) -> Image:
    """An Image over `segments` (vaddr, filesz, offset, executable), in any order."""
    loads = sorted(segments)
    return Image(data=data, starts=tuple(s[0] for s in loads), segments=tuple(loads))


def table_operators(image: Image, targets: Mapping[int, int], symbolic: Set[int]) -> set[str]:
    """Operator names of every Kernel record: `targets` maps a pointer's address to the
    address it points at (a rebase), `symbolic` holds addresses bound to imported symbols."""
    found: set[str] = set()
    for offset, address in targets.items():
        name = image.cstring(address)
        if name is None or OP_NAME.fullmatch(name) is None:
            continue
        function = offset + 16
        if function in targets:
            if not image.executable(targets[function]):
                continue
        elif function not in symbolic:
            continue
        key = offset + 8
        if key in targets:
            text = image.cstring(targets[key])
            if text is None or not text.startswith(b"v1/"):
                continue
        elif key in symbolic or image.word(key) != 0:
            continue
        found.add(name.decode())
    return found
