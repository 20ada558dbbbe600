"""Read one zip member safely: its sha256, its size and, when asked, its bytes or a copy on
disk. The one member reader behind both the plan's verification of a wheel (splitter.input.wheel)
and the targets' verified re-reads (splitter.input.payload); each compares the result with what it
trusts (RECORD, or the plan's digests) itself.

Members are read with pread on a descriptor of the caller's, with zipfile's own checks (the
local header's signature and name, the CRC, the size) and inflated by ISA-L (python-isal),
whose inflate takes about half zlib's time (docs/performance.md): a release reads every byte
of ten wheels, and inflating them is most of planning. Small members are read and inflated in
one call (zipfile's stream objects cost more per member than inflating a small one); large
ones in chunks, so memory does not grow with the largest file. Members zipfile can read but
wheels do not use (other compression methods) stream through zipfile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import threading
import weakref
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple, cast

from isal import igzip_lib, isal_zlib

from splitter.errors import InvalidWheel, OutputError

CHUNK = 1 << 20
BIG = 64 << 10  # members from this size stream in chunks (and, in read_wheel, in a helper thread)
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip member's local file header
LOCAL_SIGNATURE = b"PK\x03\x04"
# Flag bits a member read whole must not carry: encryption, compressed patched data (bit 5)
# and strong encryption (bit 6), which zipfile refuses too.
UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40

# What ISA-L's inflate raises on corrupt data (its stub declares the class as an instance).
ISAL_ERROR = cast(type[Exception], igzip_lib.IsalError)

Wants = Callable[[str, bytes], bool]  # (name, first chunk) -> keep the member's bytes?


class MemberRead(NamedTuple):
    """What reading one member gave: its sha256 digest, its size, its bytes if kept, its SHA-1
    (what an SPDX file entry must state), and the sha256 of its stored (compressed) bytes if
    asked for."""

    digest: bytes
    size: int
    data: bytes | None
    sha1: bytes
    stored: bytes = b""


class Fingerprint(NamedTuple):
    """A verified member as its wheel stores it: its directory's method, sizes and CRC, the
    sha256 of its stored bytes, and the sha256 and SHA-1 of its content. Inflating is
    deterministic, so a member of another wheel stored with the same bytes holds the same
    content: `same_member` verifies it without inflating it again (the wheels of a release
    store most of their files byte for byte alike)."""

    method: int
    compressed: int
    size: int
    crc: int
    stored: bytes
    digest: bytes
    sha1: bytes


def open_archive(path: str | os.PathLike[str], keep: bool) -> zipfile.ZipFile:
    """The zip at `path`, its central directory (thousands of members, parsed in Python)
    parsed once for the plan and the staging of a wheel. With `keep` (the plan's
    verification, splitter.input.wheel, and a progress bar's count of members), it stays
    open when the caller is done, for the next caller to take; it is not the caller's to
    close. Without (splitter.input.payload, the staging's re-read), the one kept is
    handed over if it is still the file at `path` (the same inode, size and times), or
    another is opened: the caller closes it. Either way the reads go through descriptors
    of the callers' own (pread), which see the file as it is now: every byte is checked
    against its local header and the digests the caller trusts, whatever the directory."""
    stat = os.stat(path)
    key = (
        os.fspath(path),
        stat.st_dev,
        stat.st_ino,
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ctime_ns,
    )
    with _KEPT_LOCK:
        if _KEPT and _KEPT[0][0] == key:
            archive = _KEPT[0][1]
            if not keep:
                _KEPT.clear()  # handed over
            return archive
        archive = zipfile.ZipFile(path)
        if keep:
            # the one kept before is dropped, not closed: a caller may still be reading
            # it, and it closes itself when its last reference goes
            _KEPT[:] = [(key, archive)]
        return archive


_KEPT: list[tuple[tuple[object, ...], zipfile.ZipFile]] = []  # at most one, see open_archive
_KEPT_LOCK = threading.Lock()


def fingerprint(info: zipfile.ZipInfo, read: MemberRead) -> Fingerprint:
    """The fingerprint of `info`, read (with `stored`) as `read`."""
    assert read.stored, "read with stored=True"
    return Fingerprint(
        info.compress_type,
        info.compress_size,
        info.file_size,
        info.CRC,
        read.stored,
        read.digest,
        read.sha1,
    )


def same_member(
    archive: zipfile.ZipFile, descriptor: int, info: zipfile.ZipInfo, known: Fingerprint
) -> bool:
    """Whether `info` is stored exactly as the member `known` describes: the same directory
    fields, and stored bytes with the same sha256. False whenever it cannot tell (a header
    that does not check out, data cut short): reading the member then names the problem."""
    if (info.compress_type, info.compress_size, info.file_size, info.CRC) != known[:4]:
        return False
    if not _ours(info):
        return False
    try:
        end = member_end(archive, info)
        head, offset = _after_header(descriptor, info, min(info.compress_size, CHUNK), end)
    except (zipfile.BadZipFile, UnicodeDecodeError):
        return False
    digest = hashlib.sha256(head)
    done = len(head)
    while done < info.compress_size:
        raw = os.pread(descriptor, min(CHUNK, info.compress_size - done), offset + done)
        if not raw:
            return False
        digest.update(raw)
        done += len(raw)
    return digest.digest() == known.stored


def read_member(
    archive: zipfile.ZipFile,
    descriptor: int,
    info: zipfile.ZipInfo,
    wants: Wants | None = None,
    target: str | None = None,
    stored: bool = False,
) -> MemberRead:
    """Read `info` from `archive` (`descriptor`: the same file, opened by the caller for
    pread); keep its bytes when `wants(name, first chunk)` says so, with `target` also write
    them there, and with `stored` hash its stored bytes too (for a Fingerprint; members of a
    method read through zipfile get none). A corrupt member is an InvalidWheel naming it; a
    failed write an OutputError naming the file."""
    try:
        end = member_end(archive, info)
        if _whole(info):
            compressed, data = _inflate_small(descriptor, info, end)
            if target is not None:
                _write_whole(target, data)
            kept = data if wants is not None and wants(info.filename, data) else None
            stamp = hashlib.sha256(compressed).digest() if stored else b""
            return MemberRead(
                hashlib.sha256(data).digest(), len(data), kept, hashlib.sha1(data).digest(), stamp
            )
        if _ours(info):
            raw = hashlib.sha256() if stored else None
            read = _stream_member(_chunks(descriptor, info, end, raw), info, wants, target)
            return read if raw is None else read._replace(stored=raw.digest())
        with archive.open(info) as stream:
            return _stream_member(iter(lambda: stream.read(CHUNK), b""), info, wants, target)
    except (
        zipfile.BadZipFile,
        zlib.error,
        ISAL_ERROR,
        EOFError,
        UnicodeDecodeError,
    ) as exc:
        raise InvalidWheel(f"corrupt entry in the wheel ({exc}): {info.filename}") from exc


def _stream_member(
    chunks: Iterator[bytes], info: zipfile.ZipInfo, wants: Wants | None, target: str | None
) -> MemberRead:
    digest = hashlib.sha256()
    sha1 = hashlib.sha1()
    size = 0
    kept: list[bytes] | None = None
    with _sink(target) as sink:
        for chunk in chunks:
            if size == 0 and wants is not None and wants(info.filename, chunk):
                kept = []
            digest.update(chunk)
            sha1.update(chunk)
            size += len(chunk)
            if kept is not None:
                kept.append(chunk)
            if size > info.file_size:
                raise InvalidWheel(f"entry inflates past its declared size: {info.filename}")
            if sink is not None:
                sink.write(chunk)
    if size == 0 and wants is not None and wants(info.filename, b""):
        kept = []
    data = None if kept is None else b"".join(kept)
    return MemberRead(digest.digest(), size, data, sha1.digest())


def _ours(info: zipfile.ZipInfo) -> bool:
    """Whether `info` is read here rather than through zipfile: stored or deflated, with no
    flag zipfile would refuse."""
    return (
        info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
        and not info.flag_bits & UNREADABLE_FLAGS
    )


def _chunks(
    descriptor: int, info: zipfile.ZipInfo, end: int, stored: hashlib._Hash | None = None
) -> Iterator[bytes]:
    """The member's bytes in chunks of at most CHUNK, inflated as they are read, then checked
    as zipfile checks them: the stream ends where its compressed size does, and the CRC
    and size are the central directory's. `stored`, if given, hashes the stored bytes."""
    _, offset = _after_header(descriptor, info, 0, end)
    remaining = info.compress_size
    inflater = isal_zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    crc = size = 0
    while remaining:
        raw = os.pread(descriptor, min(CHUNK, remaining), offset)
        if not raw:
            raise EOFError("member data ends before its compressed size")
        offset += len(raw)
        remaining -= len(raw)
        if stored is not None:
            stored.update(raw)
        while raw:
            chunk = raw if inflater is None else inflater.decompress(raw, CHUNK)
            raw = b"" if inflater is None else inflater.unconsumed_tail
            crc = isal_zlib.crc32(chunk, crc)
            size += len(chunk)
            yield chunk
    if inflater is not None and not inflater.eof:
        raise EOFError("compressed data ended before the end-of-stream marker was reached")
    if size != info.file_size:
        raise zipfile.BadZipFile(f"{size} bytes where the directory says {info.file_size}")
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")


def _whole(info: zipfile.ZipInfo) -> bool:
    """Whether `info` may be read in one pread: stored or deflated, no flag zipfile would
    refuse, and small compressed (a central directory can claim any compressed size; this
    bounds what one read allocates)."""
    return (
        info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
        and not info.flag_bits & UNREADABLE_FLAGS
        and info.compress_size <= BIG + 1024
        and info.file_size < BIG
    )


def member_end(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Where `info`'s data must end: at the next member's local header, or at the central
    directory. Data running past it overlaps another member, which zipfile refuses as a
    possible zip bomb (in Python 3.12 and late 3.11 releases, not all): checked here whatever
    the Python, so that splitter refuses what pip would. Computed once per archive."""
    with _ENDS_LOCK:
        ends = _ENDS.get(archive)
        if ends is None:
            offsets = sorted({i.header_offset for i in archive.infolist()})
            ends = dict(zip(offsets, [*offsets[1:], archive.start_dir], strict=True))
            _ENDS[archive] = ends
    return ends[info.header_offset]


_ENDS: weakref.WeakKeyDictionary[zipfile.ZipFile, dict[int, int]] = weakref.WeakKeyDictionary()
_ENDS_LOCK = threading.Lock()  # members are read from several threads


def _after_header(
    descriptor: int, info: zipfile.ZipInfo, length: int, end: int
) -> tuple[bytes, int]:
    """The first `length` bytes of `info`'s data and where its data starts, its local header
    checked (the signature, and the name the central directory gives). The header, name,
    extra field and data are one pread when the local extra field is no longer than the
    central directory's, as writers make them; a longer one costs a second pread."""
    # An ASCII name is the same bytes in UTF-8 and cp437: compared as bytes, without the
    # cp437 codec (a Python-level charmap, twice per member of every read otherwise).
    ascii_name = info.orig_filename.isascii()
    encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
    expected = info.orig_filename.encode("ascii" if ascii_name else encoding)
    guess = LOCAL_HEADER.size + len(expected) + len(info.extra)
    raw = os.pread(descriptor, guess + length, info.header_offset)
    if len(raw) < LOCAL_HEADER.size:
        raise zipfile.BadZipFile("Truncated file header")
    fields = LOCAL_HEADER.unpack_from(raw)
    if fields[0] != LOCAL_SIGNATURE:
        raise zipfile.BadZipFile("Bad magic number for file header")
    name_size, extra_size = fields[10], fields[11]
    begin = LOCAL_HEADER.size + name_size + extra_size  # the data, from the header
    if len(raw) == guess + length < begin + length:  # read whole, but the header is longer
        raw += os.pread(descriptor, begin + length - len(raw), info.header_offset + len(raw))
    local = raw[LOCAL_HEADER.size : LOCAL_HEADER.size + name_size]
    if not (ascii_name and local == expected):
        name = local.decode("utf-8" if fields[3] & 0x800 else "cp437")
        if name != info.orig_filename:
            raise zipfile.BadZipFile(
                f"File name in directory {info.orig_filename!r} and header {name!r} differ."
            )
    if info.header_offset + begin + info.compress_size > end:  # see member_end
        raise zipfile.BadZipFile(f"Overlapped entries: {info.orig_filename!r}")
    return raw[begin : begin + length], info.header_offset + begin


def _inflate_small(descriptor: int, info: zipfile.ZipInfo, end: int) -> tuple[bytes, bytes]:
    """(stored bytes, content) of a small member, checked."""
    compressed, _ = _after_header(descriptor, info, info.compress_size, end)
    if len(compressed) != info.compress_size:
        raise EOFError("member data ends before its compressed size")
    data = compressed
    if info.compress_type == zipfile.ZIP_DEFLATED:
        inflater = isal_zlib.decompressobj(-15)
        data = inflater.decompress(compressed, info.file_size + 1)
        if len(data) > info.file_size:
            raise InvalidWheel(f"entry inflates past its declared size: {info.filename}")
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker was reached")
    if isal_zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return compressed, data


def _write_whole(target: str, data: bytes) -> None:
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)
    except OSError as exc:
        raise write_error(exc, target) from exc


@contextlib.contextmanager
def _sink(target: str | None) -> Iterator[_Checked | None]:
    """The file one member is written to; failing to write it (a full disk) is an
    OutputError naming the file, not a broken wheel."""
    if target is None:
        yield None
        return
    try:
        handle = open(target, "wb", buffering=0)  # noqa: SIM115 - unbuffered: close cannot fail
    except OSError as exc:
        raise write_error(exc, target) from exc
    with handle:
        yield _Checked(handle, target)


class _Checked:
    """A file whose write errors carry their path out of the callers' OSError handling."""

    def __init__(self, handle: BinaryIO, target: str) -> None:
        self._handle, self._target = handle, target

    def write(self, data: bytes) -> int:
        try:
            return self._handle.write(data)
        except OSError as exc:
            raise write_error(exc, self._target) from exc


def write_error(exc: OSError, target: str) -> OutputError:
    """The error for a file splitter could not write."""
    return OutputError(f"cannot write ({exc.strerror or exc}): {target}; free space there")
