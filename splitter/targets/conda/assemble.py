"""rattler-build's assembler, run by the build's worker processes, and the info additions
it cannot write.

`assemble_package` holds the GIL for its whole run, so threads cannot overlap it, and much
of its time is single-threaded file copying, hashing and writing; so packages are assembled
in worker processes (splitter.targets.conda.workers) while the build plans and stages the
next wheel. The build process then finishes each one (`finish`: its info additions and its
repodata record).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from splitter.targets.conda.placeholder import CONDA_PLACEHOLDER

ZIP64_LIMIT = 0xFFFFFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class InfoAdditions:
    """What the assembler cannot write into info/: extra files (run_exports),
    keys merged into about.json, entry points that carry the prefix placeholder, and how the
    rewritten info archive is compressed and stamped."""

    extra_files: tuple[tuple[str, bytes], ...]  # (path in info/, bytes), sorted
    about_update: str  # a JSON object whose keys replace about.json's
    text_prefix_paths: frozenset[str]
    level: int
    mtime: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AssembleJob:
    """One `assemble_package` call, in picklable form."""

    name: str
    version: str
    target_platform: str
    build_string: str
    output_dir: str
    files: tuple[tuple[str, str], ...]  # (file on disk, path in the package)
    depends: tuple[str, ...]
    license_files: tuple[str, ...]
    homepage: str | None
    license: str | None
    summary: str
    description: str
    compression_level: int
    compression_threads: int
    timestamp: datetime
    tmpdir: str  # rattler-build copies the files here before archiving
    additions: InfoAdditions


@dataclass(frozen=True, slots=True, kw_only=True)
class Assembled:
    """What a worker returns: the .conda as rattler-build wrote it, or rattler-build's error
    (as text: exceptions do not cross processes intact)."""

    path: str = ""
    error: str = ""


def assemble(job: AssembleJob) -> Assembled:
    """In a worker: assemble one package (see `finish` for the rest)."""
    import rattler_build

    entries = [rattler_build.FileEntry.from_paths(real, dest) for real, dest in job.files]
    try:
        with _tmpdir(job.tmpdir):
            output = rattler_build.assemble_package(
                name=job.name,
                version=job.version,
                target_platform=job.target_platform,
                build_string=job.build_string,
                output_dir=job.output_dir,
                files=entries,
                homepage=job.homepage,
                license=job.license,
                summary=job.summary,
                description=job.description,
                depends=list(job.depends),
                license_files=list(job.license_files),
                compression_level=job.compression_level,
                compression_threads=job.compression_threads,
                timestamp=job.timestamp,
                detect_prefix=False,
            )
    except rattler_build.RattlerBuildError as exc:
        return Assembled(error=str(exc))
    release_freed_memory()  # the assembler's compression buffers, before the next job
    return Assembled(path=str(output.path))


def finish(job: AssembleJob, assembled: Assembled) -> dict[str, object]:
    """In the build: add the info files to an assembled package and return its repodata
    record, so the channel index of each package is made as soon as it is done. Done here
    rather than in the worker that assembled it: in a release the workers are the bottleneck
    and the build process has time to spare (docs/performance.md)."""
    package = Path(assembled.path)
    rewrite_info(package, job.additions)
    return channel_record(package)


@contextlib.contextmanager
def _tmpdir(directory: str) -> Iterator[None]:
    """TMPDIR for rattler-build's copies, restored after: whatever the process runs later
    must not inherit a scratch directory that is gone."""
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = directory
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = previous


def channel_record(package: Path) -> dict[str, object]:
    """The package's repodata.json record, made as rattler's index_fs makes it (its
    PackageRecord.from_index_json with the file's size and hashes, plus info/run_exports.json)
    but without its cost: index_fs reads a .conda a byte at a time; here two helper threads
    hash it, md5 and sha256 at once (hashlib releases the GIL while it hashes), while this
    thread unpacks only the info archive and makes the record. `indexed_timestamp` is the
    package's own timestamp, not the wall clock, so the channel is reproducible. Nothing but
    the package's directory is used: the build's scratch may be going while the last package
    is finished."""
    from rattler import PackageRecord, RunExportsJson

    with ThreadPoolExecutor(max_workers=2) as helpers:
        md5 = helpers.submit(_file_digest, package, "md5")
        sha256 = helpers.submit(_file_digest, package, "sha256")
        with zipfile.ZipFile(package) as archive:
            info = next(n for n in archive.namelist() if n.startswith("info-"))
            files = _info_files(archive.read(info))
        index_json = package.with_name(f".{package.name}.index.json")  # the record's reader's
        index_json.write_bytes(files["info/index.json"])
        try:
            record = PackageRecord.from_index_json(
                index_json,
                size=package.stat().st_size,
                sha256=sha256.result(),
                md5=md5.result(),
            )
        finally:
            index_json.unlink()
    data: dict[str, object] = json.loads(record.to_json())
    if "info/run_exports.json" in files:
        exports = RunExportsJson.from_str(files["info/run_exports.json"].decode())
        kinds = ("weak", "strong", "noarch", "weak_constrains", "strong_constrains")
        data["run_exports"] = {k: list(v) for k in kinds if (v := getattr(exports, k))}
    data["indexed_timestamp"] = data.get("timestamp", 0)
    return data


def _file_digest(path: Path, algorithm: str) -> str:
    """The hex digest of the file at `path` (hashlib.file_digest: read in blocks)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def release_freed_memory() -> None:
    """Hand freed heap back to the system: glibc keeps it (in the build: read_wheel's chunks,
    its helper thread's arena, staged ELF reads; in a worker: the assembler's compression
    buffers), and a process that then waits or idles would hold it through the build's
    peak."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)  # glibc only; elsewhere there is nothing to call


def rewrite_info(package: Path, additions: InfoAdditions) -> None:
    """Add info/ files the assembler cannot write (run_exports, sidecar, about extra, prefix
    placeholders of entry points) by rewriting only the info archive of the .conda; the payload
    archive is streamed across unchanged, so memory does not grow with the package."""
    rewritten = package.with_name(package.name + ".part")
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(rewritten, "w") as target:
        for info in source.infolist():
            if info.filename.startswith("info-") and info.filename.endswith(".tar.zst"):
                target.writestr(info, _new_info(source.read(info), additions))
                continue
            with (
                source.open(info) as reader,
                target.open(info, "w", force_zip64=info.file_size >= ZIP64_LIMIT) as writer,
            ):
                shutil.copyfileobj(reader, writer, 1 << 20)
    os.replace(rewritten, package)


def json_bytes(data: object) -> bytes:
    """Sorted, indented JSON with a final newline, as every info/ file here is written."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _info_files(data: bytes) -> dict[str, bytes]:
    """The members of a .conda's info-*.tar.zst."""
    import zstandard

    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member)
            files[member.name] = extracted.read() if extracted else b""
    return files


def _new_info(data: bytes, additions: InfoAdditions) -> bytes:
    import zstandard

    files = _info_files(data)
    about = json.loads(files["info/about.json"])
    about.update(json.loads(additions.about_update))
    files["info/about.json"] = json_bytes(about)
    files["info/paths.json"] = paths_json(files["info/paths.json"], additions.text_prefix_paths)
    files.update(dict(additions.extra_files))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            member = tarfile.TarInfo(name)
            member.size, member.mtime, member.mode = len(files[name]), additions.mtime, 0o644
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            tar.addfile(member, io.BytesIO(files[name]))
    return zstandard.ZstdCompressor(level=additions.level).compress(buffer.getvalue())


_PATHS_HEAD = b'{\n  "paths": [\n    {\n      "_path": '  # json_bytes's layout of paths.json


def paths_json(raw: bytes, text_prefix: frozenset[str]) -> bytes:
    """info/paths.json (`raw`, as the assembler wrote it) in json_bytes's form, with each file
    of `text_prefix` marked as a text file carrying the prefix placeholder.

    The assembler writes it in that form already but for the final newline (test_conda
    checks every package's), one block per file, so only the blocks of those files are
    decoded and written again: the bytes are those of the whole document decoded, marked and
    re-encoded, without running json's pure-Python indenting encoder over the whole list
    (42 ms for the export package's 4,500 files, on the build's critical path: the largest
    package finishes last). A document with non-ASCII bytes (json_bytes escapes them), one
    that does not begin as json_bytes lays it out, or a file whose block is not found as
    json_bytes would lay it out is re-encoded whole."""
    # the assembler writes UTF-8 where json_bytes writes escapes
    if not raw.isascii() or not raw.startswith(_PATHS_HEAD):
        return _reencoded(raw, text_prefix)
    text = raw.decode().removesuffix("\n") + "\n"  # the assembler ends without a newline
    for path in sorted(text_prefix):
        key = f'\n      "_path": {json.dumps(path)},\n'
        at = text.find(key)
        start = text.rfind("\n    {", 0, at)  # the block: "    {" to "    }", one level in
        end = text.find("\n    }", at)
        if at < 0 or start < 0 or end < 0 or text.find(key, at + 1) >= 0:
            return _reencoded(raw, text_prefix)
        entry = json.loads(text[start : end + 6])
        _mark_text_prefix(entry)
        block = json.dumps(entry, indent=2, sort_keys=True).replace("\n", "\n    ")
        text = f"{text[:start]}\n    {block}{text[end + 6 :]}"
    return text.encode()


def _reencoded(raw: bytes, text_prefix: frozenset[str]) -> bytes:
    paths = json.loads(raw)
    for entry in paths["paths"]:
        if entry["_path"] in text_prefix:
            _mark_text_prefix(entry)
    return json_bytes(paths)


def _mark_text_prefix(entry: dict[str, object]) -> None:
    entry["prefix_placeholder"] = CONDA_PLACEHOLDER
    entry["file_mode"] = "text"
