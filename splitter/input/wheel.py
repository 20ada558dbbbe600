"""Read a wheel once and verify every file against its RECORD before anything trusts it."""

from __future__ import annotations

import base64
import calendar
import csv
import hashlib
import io
import itertools
import stat
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from email.parser import HeaderParser
from pathlib import Path

from packaging.metadata import Metadata
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from splitter.errors import InvalidWheel
from splitter.input.safepath import check_member_name
from splitter.input.zipread import (
    BIG,
    LOCAL_HEADER,
    Fingerprint,
    MemberRead,
    Wants,
    fingerprint,
    open_archive,
    read_member,
    same_member,
)
from splitter.model import WheelEntry, WheelInfo

# Deflate cannot exceed ~1032:1; anything claiming more is lying about its size.
MAX_RATIO = 1100
# Beyond this ratio a large entry is treated as a bomb; real wheels' members stay far below.
SUSPECT_RATIO = 200
SUSPECT_SIZE = 1 << 20
MAX_TOTAL = 8 << 30
AHEAD = 64 << 20  # how far (bytes of members) the helper thread may run ahead of the caller

Visitor = Callable[[str, "bytes | None"], None]  # bytes only for members `wants` selects
# Members verified in the wheels read before, by path (see read_wheel's `known`)
Known = dict[str, Fingerprint]


def record_hash(data: bytes) -> str:
    """The RECORD form of the sha256 of `data`."""
    return record_digest(hashlib.sha256(data).digest())


def record_digest(digest: bytes) -> str:
    """The RECORD form of a sha256 digest: urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def read_wheel(
    path: Path,
    visit: Visitor | None = None,
    wants: Wants | None = None,
    known: Known | None = None,
) -> WheelInfo:
    """Open `path`, verify it completely and describe it; `visit` sees each verified file,
    with its bytes when `wants(name, first chunk)` asked for them. Nothing is written.

    `known` (a release: the wheels read before this one, with the same `wants`) holds the
    fingerprints of members those reads verified and did not keep; a member here stored with
    the same bytes is not inflated again (its content is the one verified there, and `wants`
    would not keep it either), and this wheel's other members are added to it."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise InvalidWheel(f"not a wheel file name ({exc}): {path}") from exc
    if not path.is_file():
        raise InvalidWheel(f"wheel not found: {path}")
    try:
        # The whole file's sha256 (the manifest's, the recipes') is hashed by a helper thread
        # while the members are read: hashlib releases the GIL.
        with ThreadPoolExecutor(max_workers=1) as hasher:
            file_sha = hasher.submit(_file_sha256, path)
            archive = _open_zip(path)  # kept open for the staging that follows: not closed
            return _read_archive(path, archive, file_sha, visit, wants, known)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise InvalidWheel(f"corrupt or truncated wheel ({exc}): {path}") from exc
    except OSError as exc:
        raise InvalidWheel(f"cannot read wheel ({exc.strerror or exc}): {path}") from exc


def _file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return open_archive(path, keep=True)
    except UnicodeDecodeError as exc:  # general purpose flag bit 11 promises UTF-8 names
        reason = f"an entry name flagged UTF-8 is not: {exc.reason}"
        raise InvalidWheel(f"corrupt or truncated wheel ({reason}): {path}") from exc


def _read_archive(
    path: Path,
    archive: zipfile.ZipFile,
    file_sha: Future[str],
    visit: Visitor | None,
    wants: Wants | None,
    known: Known | None,
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
    for name, read in _stream_all(path, archive, infos, wants, known):
        digest, size, data, sha1, _ = read
        info = infos[name]
        expected_hash, expected_size = record[name]
        if expected_hash:
            actual = record_digest(digest)
            if actual != expected_hash:
                raise InvalidWheel(f"hash mismatch against RECORD ({actual}): {name}")
        if expected_size is not None and expected_size != size:
            raise InvalidWheel(f"size mismatch against RECORD ({size} bytes): {name}")
        if known is not None and read.stored and data is None and name not in known:
            known[name] = fingerprint(info, read)
        mode = info.external_attr >> 16
        entries.append(
            WheelEntry(
                # Interned: the wheels of a release share most paths and digests, and a
                # release holds every wheel's plan at once (docs/performance.md).
                path=sys.intern(name),
                size=size,
                sha256=sys.intern(digest.hex()),
                sha1=sys.intern(sha1.hex()),
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
    licences = tuple(sorted(n for n in infos if n.startswith(f"{dist_info}/licenses/")))
    return WheelInfo(
        path=path.resolve(),
        filename=path.name,
        sha256=file_sha.result(),
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
        license_files=licences,
        license_texts=tuple(archive.read(infos[n]) for n in licences),
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
    known: Known | None,
) -> Iterator[tuple[str, MemberRead]]:
    """(name, member read) in name order. Members of at least BIG bytes are read by a helper
    thread: inflating and hashing release the GIL, so they overlap the calling thread's small
    members and ELF analysis. Small members stay on the calling thread (a second reader for
    them costs more in GIL hand-offs than it saves). Both read with pread on one descriptor,
    which needs no lock (splitter.input.zipread). With `known`, a member stored as a known one is
    only hashed as stored; the others are read with their stored bytes hashed too."""
    stored = known is not None

    def read(descriptor: int, info: zipfile.ZipInfo) -> MemberRead:
        same = known.get(info.filename) if known is not None else None
        if same is not None and same_member(archive, descriptor, info, same):
            return MemberRead(same.digest, same.size, None, same.sha1)
        return read_member(archive, descriptor, info, wants, stored=stored)

    names = sorted(infos)
    big = [name for name in names if infos[name].file_size >= BIG]
    with (
        ThreadPoolExecutor(max_workers=1) as helper,
        path.open("rb", buffering=0) as whole,
    ):
        descriptor = whole.fileno()
        try:
            ahead: dict[str, Future[MemberRead]] = {}
            submitted = 0
            pending = 0  # bytes of big members submitted and not yet taken
            for name in names:
                # The helper runs ahead by at most AHEAD bytes (at least one member): each
                # ELF it finished holds its bytes until taken, so a wheel of many large
                # libraries would otherwise sit in memory whole.
                while submitted < len(big) and (
                    not ahead or pending + infos[big[submitted]].file_size <= AHEAD
                ):
                    member = infos[big[submitted]]
                    ahead[member.filename] = helper.submit(read, descriptor, member)
                    pending += member.file_size
                    submitted += 1
                future = ahead.pop(name, None)
                if future is not None:
                    pending -= infos[name].file_size
                    yield name, future.result()
                else:
                    yield name, read(descriptor, infos[name])
        finally:
            helper.shutdown(wait=True, cancel_futures=True)  # before the zip closes


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    assert archive.fp is not None  # open: read_wheel holds it
    data = read_member(archive, archive.fp.fileno(), info, lambda _name, _head: True).data
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
    for number, row in _csv_rows(reader, name):  # row by row: memory does not grow with RECORD
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
