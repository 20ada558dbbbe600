"""The digest of a binary with what the linker stamps per link set aside.

Two links of the same code differ in a few stamped bytes only: an ELF file's GNU build-id, a
Mach-O file's LC_UUID and its code signature (whose page hashes cover the UUID). A release
shares a package between wheels when its files are the same but for those bytes, so each
binary's plan records this digest once, while the wheel is read, and the release compares
digests rather than reading the files again. Where those digests differ, compare_strings
compares the two copies: a build path compiled into a string (`...-cpython-310/...`) is
the one other difference a Python-independent file may have between the wheels of a release.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildString:
    """A NUL-terminated string of a read-only string section at `offset` whose two copies
    differ, each naming its own wheel's Python build (a build path such as
    `.../temp.macosx-14.0-arm64-cpython-310/...`)."""

    offset: int
    mine: str
    theirs: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StringComparison:
    """Two copies of a file compared with their link stamps set aside: the strings that differ
    only where each names its own Python build, or why the difference is more than that."""

    strings: tuple[BuildString, ...] = ()
    refused: str = ""  # empty when every difference is a build string


def python_names(python: tuple[int, int]) -> re.Pattern[bytes]:
    """The ways a build path names CPython `python`'s build: `cpython-3XY` (setuptools' temp
    directory), `cp3XY` (the wheel tag), `python3.XY` (an include or lib directory); not
    followed by a digit, so `cp31` is not found inside `cp310`."""
    major, minor = python
    names = (f"cpython-{major}{minor}", f"python{major}.{minor}", f"cp{major}{minor}")
    return re.compile(b"(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")(?!\d)")


def compare_strings(
    mine: bytes,
    theirs: bytes,
    spans: tuple[Spans, Spans],
    sections: tuple[Spans, Spans],
    pythons: tuple[tuple[int, int], tuple[int, int]],
) -> StringComparison:
    """Compare two copies of one file built for two Pythons (`pythons`: mine's, theirs'),
    with each copy's link stamps (`spans`) set aside: accepted when every other differing byte
    lies in a NUL-terminated string of a read-only string section (`sections`, the same in
    both), and each such string names its copy's own Python build and is the same as the
    other copy's once that name is set aside. Anything else is refused, saying where."""
    if len(mine) != len(theirs):
        return StringComparison(refused=f"{len(mine)} and {len(theirs)} bytes")
    if spans[0] != spans[1]:
        return StringComparison(refused="their link stamps are in different places")
    if sections[0] != sections[1]:
        return StringComparison(refused="their string sections are in different places")
    names = (python_names(pythons[0]), python_names(pythons[1]))
    found: dict[int, BuildString] = {}
    for position in _differing(mine, theirs, spans[0]):
        if position in found or any(
            s.offset <= position < s.offset + len(s.mine) for s in found.values()
        ):
            continue
        section = next((s for s in sections[0] if s[0] <= position < s[0] + s[1]), None)
        if section is None:
            return StringComparison(
                refused=f"byte {position:#x} is outside its read-only string sections"
            )
        start = mine.rfind(b"\0", section[0], position) + 1 or section[0]
        end = mine.find(b"\0", position, section[0] + section[1])
        if end < 0 or b"\0" in (mine[position : position + 1], theirs[position : position + 1]):
            return StringComparison(
                refused=f"byte {position:#x} is not inside a NUL-terminated string"
            )
        ours, other = mine[start:end], theirs[start:end]
        if b"\0" in other or names[0].sub(b"\0", ours) != names[1].sub(b"\0", other):
            return StringComparison(
                refused=f"the string at {start:#x} differs beyond the Python build it names: "
                f"{_text(ours)!r} and {_text(other)!r}"
            )
        found[start] = BuildString(offset=start, mine=_text(ours), theirs=_text(other))
    return StringComparison(strings=tuple(found[k] for k in sorted(found)))


def _differing(mine: bytes, theirs: bytes, spans: Spans, block: int = 4096) -> Iterator[int]:
    """The offsets where the copies (of equal size) differ outside `spans`, in order; blocks
    that are equal are skipped whole, so a large file costs a few slice comparisons."""
    outside = []
    position = 0
    for start, size in spans:
        outside.append((position, start))
        position = max(position, start + size)
    outside.append((position, len(mine)))
    for low, high in outside:
        for base in range(low, high, block):
            top = min(base + block, high)
            if mine[base:top] == theirs[base:top]:
                continue
            yield from (i for i in range(base, top) if mine[i] != theirs[i])


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")
