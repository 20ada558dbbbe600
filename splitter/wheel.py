"""Read a wheel once and verify every file against its RECORD before anything trusts it."""

from __future__ import annotations

import base64
import calendar
import contextlib
import csv
import hashlib
import io
import itertools
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from email.parser import HeaderParser
from pathlib import Path
from typing import BinaryIO

from packaging.metadata import Metadata
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from splitter.errors import InvalidWheel, OutputError
from splitter.model import WheelEntry, WheelInfo

# Deflate cannot exceed ~1032:1; anything claiming more is lying about its size.
MAX_RATIO = 1100
# Beyond this ratio a large entry is treated as a bomb; the real 1.5.1 wheel peaks at 34:1.
SUSPECT_RATIO = 200
SUSPECT_SIZE = 1 << 20
MAX_TOTAL = 8 << 30
CHUNK = 1 << 20
BIG = 64 << 10  # members streamed by the helper thread (see _stream_all)
AHEAD = 64 << 20  # how far (bytes of members) the helper may run ahead of the caller
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip member's local file header
LOCAL_SIGNATURE = b"PK\x03\x04"
# Flag bits a member read whole (_read_small) must not carry: encryption (checked before),
# compressed patched data (bit 5) and strong encryption (bit 6), which zipfile refuses too.
UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40

Unpack = Callable[[int], Path]  # uncompressed size -> a fresh directory to unpack into
Visitor = Callable[[str, "bytes | None"], None]  # bytes only for members `wants` selects
Wants = Callable[[str, bytes], bool]  # (name, first chunk) -> keep the member's bytes?


def record_hash(data: bytes) -> str:
    """The RECORD form of the sha256 of `data`."""
    return record_digest(hashlib.sha256(data).digest())


def record_digest(digest: bytes) -> str:
    """The RECORD form of a sha256 digest: urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check_member_name(name: str) -> str:
    """Return `name` if it is a safe relative archive path, else raise naming it."""
    if not name or "\\" in name or "\x00" in name:
        raise InvalidWheel(f"unsafe path in wheel (empty, backslash or NUL): {name!r}")
    if name.startswith("/"):
        raise InvalidWheel(f"unsafe path in wheel (absolute): {name}")
    if ".." in name.split("/"):
        raise InvalidWheel(f"unsafe path in wheel (contains '..'): {name}")
    if len(name) > 1 and name[1] == ":":
        raise InvalidWheel(f"unsafe path in wheel (drive letter): {name}")
    return name


def safe_join(root: Path, relative: str) -> Path:
    """Join an archive path onto `root`, refusing anything that would land outside it."""
    check_member_name(relative)
    base = str(_real_dir(str(root)))
    target = os.path.normpath(os.path.join(base, relative))
    parent = os.path.dirname(target)
    while parent.startswith(base + os.sep) and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    real = str(_real_dir(parent))  # a symlink planted under root could still lead out
    inside = target.startswith(base + os.sep)
    if not inside or (real != base and not real.startswith(base + os.sep)):
        raise InvalidWheel(f"path escapes the destination {root}: {relative}")
    return Path(target)


def _real_dir(directory: str) -> Path:
    # Resolved afresh on every call: a cached answer would miss a directory that was replaced
    # by a link since. Hot paths (staging the wheel's own files) join checked names instead.
    return Path(directory).resolve()


def read_wheel(
    path: Path,
    visit: Visitor | None = None,
    wants: Wants | None = None,
    unpack: Unpack | None = None,
) -> WheelInfo:
    """Open `path`, verify it completely and describe it; `visit` sees each verified file,
    with its bytes when `wants(name, first chunk)` asked for them. With `unpack`, called with
    the uncompressed size once the wheel's listing checks out, every file is also written to
    `unpack(size)/<name>` as it streams past, so a build inflates the wheel once."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise InvalidWheel(f"not a wheel file name ({exc}): {path}") from exc
    if not path.is_file():
        raise InvalidWheel(f"wheel not found: {path}")
    try:
        with path.open("rb") as handle:
            file_sha = hashlib.file_digest(handle, "sha256").hexdigest()
        with _open_zip(path) as archive:
            return _read_archive(path, archive, file_sha, visit, wants, unpack)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise InvalidWheel(f"corrupt or truncated wheel ({exc}): {path}") from exc
    except OSError as exc:
        raise InvalidWheel(f"cannot read wheel ({exc.strerror or exc}): {path}") from exc


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except UnicodeDecodeError as exc:  # general purpose flag bit 11 promises UTF-8 names
        reason = f"an entry name flagged UTF-8 is not: {exc.reason}"
        raise InvalidWheel(f"corrupt or truncated wheel ({reason}): {path}") from exc


def _read_archive(
    path: Path,
    archive: zipfile.ZipFile,
    file_sha: str,
    visit: Visitor | None,
    wants: Wants | None,
    unpack: Unpack | None,
) -> WheelInfo:
    infos: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        name = check_member_name(info.filename)
        if info.is_dir():
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            raise InvalidWheel(f"symlink entry in wheel (wheels cannot carry links): {name}")
        if name in infos:
            raise InvalidWheel(f"duplicate entry in wheel: {name}")
        if info.flag_bits & 0x1:
            raise InvalidWheel(f"encrypted entry in wheel (wheels cannot be encrypted): {name}")
        if not 1 <= info.date_time[1] <= 12:
            raise InvalidWheel(f"entry has an impossible date (month {info.date_time[1]}): {name}")
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > MAX_RATIO or (info.file_size > SUSPECT_SIZE and ratio > SUSPECT_RATIO):
            raise InvalidWheel(
                f"entry declares {info.file_size} bytes from {info.compress_size} compressed "
                f"(ratio {ratio:.0f}:1, a zip bomb): {name}"
            )
        total += info.file_size
        infos[name] = info
    if total > MAX_TOTAL:
        raise InvalidWheel(f"wheel declares {total} uncompressed bytes (over {MAX_TOTAL}): {path}")
    _check_no_overlap(archive.infolist())

    dist_info = _find_dist_info(path, infos)
    wheel_meta = HeaderParser().parsestr(_text(archive, infos, f"{dist_info}/WHEEL"))
    if not (wheel_meta.get("Wheel-Version") or "").startswith("1."):
        raise InvalidWheel(f"unsupported Wheel-Version {wheel_meta.get('Wheel-Version')!r}: {path}")
    metadata = _parse_metadata(archive, infos, f"{dist_info}/METADATA")
    record = _parse_record(archive, infos, f"{dist_info}/RECORD")

    missing = sorted(set(record) - set(infos))
    if missing:
        raise InvalidWheel(f"RECORD lists a file the wheel does not contain: {missing[0]}")
    unlisted = sorted(set(infos) - set(record))
    if unlisted:
        raise InvalidWheel(f"file not listed in RECORD: {unlisted[0]}")

    entries = []
    directory = unpack(total) if unpack is not None else None
    for name, (digest, size, data) in _stream_all(path, archive, infos, wants, directory):
        info = infos[name]
        expected_hash, expected_size = record[name]
        if expected_hash:
            actual = record_digest(digest)
            if actual != expected_hash:
                raise InvalidWheel(f"hash mismatch against RECORD ({actual}): {name}")
        if expected_size is not None and expected_size != size:
            raise InvalidWheel(f"size mismatch against RECORD ({size} bytes): {name}")
        mode = info.external_attr >> 16
        entries.append(
            WheelEntry(
                path=name,
                size=size,
                sha256=digest.hex(),
                executable=bool(mode & 0o111),
            )
        )
        if visit is not None:
            visit(name, data)

    fname, fversion, build, tags = parse_wheel_filename(path.name)
    if metadata.name.lower().replace("_", "-") != str(fname):
        raise InvalidWheel(f"METADATA names {metadata.name}, the file name {fname}: {path}")
    if str(metadata.version) != str(fversion):
        raise InvalidWheel(f"METADATA version {metadata.version} != file name {fversion}: {path}")
    tag = sorted(tags, key=str)[0]
    return WheelInfo(
        path=path.resolve(),
        filename=path.name,
        sha256=file_sha,
        name=str(fname),
        version=str(fversion),
        build_tag="".join(map(str, build)),
        python_tag=tag.interpreter,
        abi_tag=tag.abi,
        platform_tag=tag.platform,
        dist_info=dist_info,
        summary=metadata.summary or "",
        license=metadata.license_expression or metadata.license or "",
        home=(metadata.project_urls or {}).get("Homepage", "") or "",
        requires_python=str(metadata.requires_python or ""),
        requires_dist=tuple(str(r) for r in metadata.requires_dist or ()),
        provides_extra=tuple(str(e) for e in metadata.provides_extra or ()),
        console_scripts=_console_scripts(archive, infos, f"{dist_info}/entry_points.txt"),
        license_files=tuple(sorted(n for n in infos if n.startswith(f"{dist_info}/licenses/"))),
        timestamp=max(_epoch(i.date_time) for i in infos.values()),
        entries=tuple(entries),
    )


def _check_no_overlap(members: list[zipfile.ZipInfo]) -> None:
    """Each member's data must end before the next member's local header: overlapping entries
    are how a zip bomb inflates one compressed kernel for many members. zipfile checks this
    only from CPython 3.11.8 and 3.12.2 (CVE-2024-0450), and _read_small bypasses zipfile."""
    ordered = sorted(members, key=lambda info: info.header_offset)
    for this, following in itertools.pairwise(ordered):
        name = this.orig_filename.encode("utf-8" if this.flag_bits & 0x800 else "cp437")
        end = this.header_offset + LOCAL_HEADER.size + len(name) + this.compress_size
        if end > following.header_offset:
            raise InvalidWheel(
                f"zip entries overlap (a zip bomb's trick: the data of {this.filename} "
                f"runs into the next entry): {following.filename}"
            )


def read_verified(archive: zipfile.ZipFile, entry: WheelEntry, target: str | None = None) -> bytes:
    """A member read again after read_wheel verified it (the tree and wheel targets re-read
    the wheel): its bytes, or with `target` written there, only if they still hash to the
    entry's digest; the file at the wheel's path may have been replaced meanwhile."""
    digest, size, kept = hashlib.sha256(), 0, []
    try:
        with archive.open(entry.path) as stream, _sink(target, _output_error) as sink:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                if sink is None:
                    kept.append(chunk)
                else:
                    sink.write(chunk)
    except (KeyError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise _changed(archive, entry, f"{type(exc).__name__}: {exc}") from exc
    if size != entry.size or digest.hexdigest() != entry.sha256:
        raise _changed(archive, entry, f"{size} bytes, sha256 {digest.hexdigest()}")
    return b"".join(kept)


def _changed(archive: zipfile.ZipFile, entry: WheelEntry, found: str) -> InvalidWheel:
    return InvalidWheel(
        f"the wheel changed after it was verified ({found}; {archive.filename} was replaced "
        f"while splitter ran?): {entry.path}"
    )


def _epoch(date_time: tuple[int, int, int, int, int, int]) -> int:
    return calendar.timegm((*date_time, 0, 0, 0))


def _find_dist_info(path: Path, infos: dict[str, zipfile.ZipInfo]) -> str:
    roots = {n.split("/", 1)[0] for n in infos if n.split("/", 1)[0].endswith(".dist-info")}
    if len(roots) != 1:
        raise InvalidWheel(
            f"expected exactly one .dist-info directory, found {sorted(roots) or 'none'}: {path}"
        )
    root = roots.pop()
    for required in ("WHEEL", "METADATA", "RECORD"):
        if f"{root}/{required}" not in infos:
            raise InvalidWheel(f"wheel has no {root}/{required}: {path}")
    return root


def _stream_all(
    path: Path,
    archive: zipfile.ZipFile,
    infos: dict[str, zipfile.ZipInfo],
    wants: Wants | None,
    unpack: Path | None,
) -> Iterator[tuple[str, tuple[bytes, int, bytes | None]]]:
    """(name, member result) in name order. Members of at least BIG bytes stream in a helper
    thread: inflating, hashing and writing them release the GIL, so they overlap the calling
    thread's small members and ELF analysis (the 62 members from 64 KiB are 54% of the real
    wheel's bytes; read_wheel went from 0.97 to 0.83 s, best of 6). Small members stay on the
    calling thread: a second reader for them was slower (GIL hand-offs on 4,543 members).
    Small members are read whole by _read_small, with pread on a descriptor of their own, not
    through zipfile's stream objects: their per-member overhead was most of the calling
    thread's time (read_wheel 0.97 -> 0.78 s, mean of 10 alternating runs). So the helper
    has `archive` nearly to itself (zipfile serialises reads of different members through its
    lock), and a second ZipFile, another copy of the central directory (31 MB for a wheel of
    46k files), is not needed.
    Member names were checked by check_member_name and `unpack` is a fresh directory only
    this build writes (a wheel cannot carry links), so targets are plain joins: safe_join's
    checks cost 0.66 s over the real wheel (profiled)."""
    names = sorted(infos)
    targets: dict[str, str | None] = dict.fromkeys(names)
    if unpack is not None:
        targets = {name: os.path.join(unpack, name) for name in names}
        for parent in sorted({os.path.dirname(t) for t in targets.values() if t}):
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as exc:
                raise _unpack_error(exc, parent) from exc
    big = [name for name in names if infos[name].file_size >= BIG]
    with (
        ThreadPoolExecutor(max_workers=1) as helper,
        path.open("rb", buffering=0) as whole,
    ):
        try:
            ahead: dict[str, Future[tuple[bytes, int, bytes | None]]] = {}
            submitted = 0
            pending = 0  # bytes of big members submitted and not yet taken
            for name in names:
                # The helper runs ahead by at most AHEAD bytes (at least one member): each
                # ELF it finished holds its bytes until taken, so a wheel of many large
                # libraries would otherwise sit in memory whole. 1.5.1's 62 (33 MB) fit.
                while submitted < len(big) and (
                    not ahead or pending + infos[big[submitted]].file_size <= AHEAD
                ):
                    member = infos[big[submitted]]
                    ahead[member.filename] = helper.submit(
                        _stream_member, archive, member, wants, targets[member.filename]
                    )
                    pending += member.file_size
                    submitted += 1
                future = ahead.pop(name, None)
                if future is not None:
                    pending -= infos[name].file_size
                    yield name, future.result()
                elif _whole(infos[name]):
                    yield name, _read_small(whole.fileno(), infos[name], wants, targets[name])
                else:
                    yield name, _stream_member(archive, infos[name], wants, targets[name])
        finally:
            helper.shutdown(wait=True, cancel_futures=True)  # before the zip closes


def _stream_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, wants: Wants | None, target: str | None
) -> tuple[bytes, int, bytes | None]:
    """sha256, size and, when `wants(name, first chunk)`, the bytes of one member; other
    members are hashed chunk by chunk, so memory does not grow with the largest file. With
    `target`, the bytes are also written there."""
    digest = hashlib.sha256()
    size = 0
    kept: list[bytes] | None = None
    try:
        with archive.open(info) as stream, _sink(target, _unpack_error) as sink:
            while chunk := stream.read(CHUNK):
                if size == 0 and wants is not None and wants(info.filename, chunk):
                    kept = []
                digest.update(chunk)
                size += len(chunk)
                if kept is not None:
                    kept.append(chunk)
                if size > info.file_size:
                    raise InvalidWheel(f"entry inflates past its declared size: {info.filename}")
                if sink is not None:
                    sink.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        raise InvalidWheel(f"corrupt entry in the wheel ({exc}): {info.filename}") from exc
    if size == 0 and wants is not None and wants(info.filename, b""):
        kept = []
    return digest.digest(), size, None if kept is None else b"".join(kept)


def _whole(info: zipfile.ZipInfo) -> bool:
    """Whether _read_small may read `info`: stored or deflated, no flag zipfile would refuse,
    and small compressed (a central directory can claim any compressed size; this bounds what
    one read allocates)."""
    return (
        info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
        and not info.flag_bits & UNREADABLE_FLAGS
        and info.compress_size <= BIG + 1024
        and info.file_size < BIG
    )


def _read_small(
    descriptor: int, info: zipfile.ZipInfo, wants: Wants | None, target: str | None
) -> tuple[bytes, int, bytes | None]:
    """_stream_member for a small member (see _whole), in one read and one inflate, with
    zipfile's checks: the local header's signature and name, the CRC, and the size."""
    try:
        data = _inflate_small(descriptor, info)
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as exc:
        raise InvalidWheel(f"corrupt entry in the wheel ({exc}): {info.filename}") from exc
    if target is not None:
        _write_whole(target, data)
    kept = data if wants is not None and wants(info.filename, data) else None
    return hashlib.sha256(data).digest(), len(data), kept


def _inflate_small(descriptor: int, info: zipfile.ZipInfo) -> bytes:
    header = os.pread(descriptor, LOCAL_HEADER.size, info.header_offset)
    if len(header) != LOCAL_HEADER.size:
        raise zipfile.BadZipFile("Truncated file header")
    fields = LOCAL_HEADER.unpack(header)
    if fields[0] != LOCAL_SIGNATURE:
        raise zipfile.BadZipFile("Bad magic number for file header")
    name_size, extra_size = fields[10], fields[11]
    start = info.header_offset + LOCAL_HEADER.size
    raw = os.pread(descriptor, name_size + extra_size + info.compress_size, start)
    name = raw[:name_size].decode("utf-8" if fields[3] & 0x800 else "cp437")
    if name != info.orig_filename:
        raise zipfile.BadZipFile(
            f"File name in directory {info.orig_filename!r} and header {name!r} differ."
        )
    compressed = raw[name_size + extra_size :]
    if len(compressed) != info.compress_size:
        raise EOFError("member data ends before its compressed size")
    data = compressed
    if info.compress_type == zipfile.ZIP_DEFLATED:
        inflater = zlib.decompressobj(-15)
        data = inflater.decompress(compressed, info.file_size + 1)
        if len(data) > info.file_size:
            raise InvalidWheel(f"entry inflates past its declared size: {info.filename}")
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker was reached")
    if zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return data


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
        raise _unpack_error(exc, target) from exc


WriteError = Callable[[OSError, str], OutputError]


@contextlib.contextmanager
def _sink(target: str | None, error: WriteError) -> Iterator[_Checked | None]:
    """The file one member is written to; failing to write it (a full disk) is the
    OutputError `error` makes, naming the file, not a broken wheel."""
    if target is None:
        yield None
        return
    try:
        handle = open(target, "wb", buffering=0)  # noqa: SIM115 - unbuffered: close cannot fail
    except OSError as exc:
        raise error(exc, target) from exc
    with handle:
        yield _Checked(handle, target, error)


class _Checked:
    """A file whose write errors carry their path out of read_wheel's OSError handling."""

    def __init__(self, handle: BinaryIO, target: str, error: WriteError) -> None:
        self._handle, self._target, self._error = handle, target, error

    def write(self, data: bytes) -> int:
        try:
            return self._handle.write(data)
        except OSError as exc:
            raise self._error(exc, self._target) from exc


def _output_error(exc: OSError, target: str) -> OutputError:
    return OutputError(f"cannot write ({exc.strerror or exc}): {target}; free space there")


def _unpack_error(exc: OSError, target: str) -> OutputError:
    return OutputError(
        f"cannot write the unpacked wheel into scratch ({exc.strerror or exc}): {target}; "
        "free space there, or point SPLITTER_SCRATCH at a directory with room"
    )


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    data = _stream_member(archive, info, lambda _name, _head: True, None)[2]
    assert data is not None  # kept: `wants` said yes
    return data


def _text(archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str) -> str:
    try:
        return _read_member(archive, infos[name]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidWheel(f"not UTF-8 ({exc.reason}): {name}") from exc


def _parse_metadata(
    archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str
) -> Metadata:
    try:
        return Metadata.from_email(_text(archive, infos, name), validate=True)
    except Exception as exc:  # packaging raises an ExceptionGroup of InvalidMetadata
        problems = getattr(exc, "exceptions", [exc])
        raise InvalidWheel(f"invalid METADATA ({problems[0]}): {name}") from exc


def _parse_record(
    archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str
) -> dict[str, tuple[str, int | None]]:
    rows: dict[str, tuple[str, int | None]] = {}
    # newline="" as the csv module requires: a bare CR then ends a row instead of raising.
    reader = csv.reader(io.StringIO(_text(archive, infos, name), newline=""))
    for number, row in _csv_rows(reader, name):  # row by row: 46k rows held at once cost 8 MB
        if not row:
            continue
        if len(row) != 3:
            raise InvalidWheel(f"RECORD row {number} has {len(row)} fields, not 3: {name}")
        path, digest, size = row
        check_member_name(path)
        if path in rows:
            raise InvalidWheel(f"RECORD lists a file twice (row {number}): {path}")
        if digest and not digest.startswith("sha256="):
            raise InvalidWheel(
                f"RECORD row {number} uses {digest.split('=')[0]}, not sha256: {path}"
            )
        try:
            rows[path] = (digest, int(size) if size else None)
        except ValueError as exc:
            raise InvalidWheel(f"RECORD row {number} has a bad size {size!r}: {path}") from exc
        if not digest and path != name and not path.endswith((".jws", ".p7s")):
            raise InvalidWheel(f"RECORD row {number} has no hash: {path}")
    return rows


def _csv_rows(reader: Iterator[list[str]], name: str) -> Iterator[tuple[int, list[str]]]:
    try:
        yield from enumerate(reader, start=1)
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit()
        raise InvalidWheel(f"RECORD is not valid CSV ({exc}): {name}") from exc


def _console_scripts(
    archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str
) -> tuple[tuple[str, str], ...]:
    if name not in infos:
        return ()
    import configparser

    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(_text(archive, infos, name))
    except configparser.Error as exc:
        raise InvalidWheel(f"invalid entry_points.txt ({exc.message}): {name}") from exc
    if not parser.has_section("console_scripts"):
        return ()
    return tuple(sorted((k.strip(), v.strip()) for k, v in parser.items("console_scripts")))
