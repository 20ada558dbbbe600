"""The targets' verified re-read of the wheel (splitter.input.payload) and the member reader behind
it and the plan's own read (splitter.input.zipread): exactly the verified bytes, or an error naming
the file; and planning writes nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from builders import METADATA, WHEEL, make_wheel, replace_member

from splitter.errors import InvalidWheel, OutputError
from splitter.input.payload import Payload, extract
from splitter.input.wheel import read_wheel, record_hash

DIST_INFO = "executorch-1.5.1.dist-info"


def test_extract_writes_exactly_the_verified_files(tmp_path: Path) -> None:
    files = {
        "executorch/a.py": b"print(1)\n",
        "executorch/sub/b.bin": os.urandom(3 << 20),
        "executorch/sub/deeper/empty": b"",
    }
    info = read_wheel(make_wheel(tmp_path, files))
    root = tmp_path / "out"
    jobs = [(e.path, str(root / e.path)) for e in info.entries]
    for _, target in jobs:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    extract(info, jobs)
    written = {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}
    assert sorted(written) == sorted(e.path for e in info.entries)
    for entry in info.entries:
        assert hashlib.sha256(written[entry.path].read_bytes()).hexdigest() == entry.sha256


def corrupt_wheel(directory: Path) -> Path:
    """A wheel whose last payload member (in name order) does not match its RECORD hash."""
    files = {f"executorch/m{i:03}.py": f"x = {i}\n".encode() for i in range(50)}
    files[f"{DIST_INFO}/METADATA"] = METADATA.format(name="executorch", version="1.5.1").encode()
    files[f"{DIST_INFO}/WHEEL"] = WHEEL.format(tag="cp311-cp311-manylinux_2_28_x86_64").encode()
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in files.items()]
    rows[49] = f"executorch/m049.py,{record_hash(b'something else')},7"
    rows.append(f"{DIST_INFO}/RECORD,,")
    files[f"{DIST_INFO}/RECORD"] = ("\n".join(rows) + "\n").encode()
    return make_wheel(directory, files, record=False)


def test_a_failed_verification_leaves_no_scratch_and_no_output(tmp_path: Path) -> None:
    """The plan reads the whole wheel before any target writes: a member failing its RECORD
    hash stops the build with nothing in scratch, no OUT and nothing beside it."""
    wheel = corrupt_wheel(tmp_path)
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    command = [sys.executable, "-m", "splitter", "-q", "build", str(wheel), "-t", "conda"]
    result = subprocess.run(
        [*command, "-o", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "SPLITTER_SCRATCH": str(scratch)},
        check=False,
    )
    assert result.returncode == InvalidWheel.exit_code, result.stderr
    assert result.stderr.startswith("error: hash mismatch against RECORD")
    assert "m049.py" in result.stderr
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["scratch", wheel.name])


def test_a_full_disk_names_the_file(tmp_path: Path) -> None:
    """ENOSPC while a target writes a member is an OutputError naming the file written."""
    wheel = read_wheel(make_wheel(tmp_path, {"executorch/a.py": b"x = 1\n" * 1000}))
    with Payload(wheel) as payload, pytest.raises(OutputError) as caught:
        payload.copy("executorch/a.py", "/dev/full")
    message = str(caught.value)
    assert "No space left on device" in message and message.endswith("/dev/full; free space there")


def test_a_wheel_rewritten_in_place_is_refused(tmp_path: Path) -> None:
    """Replaced by rename or rewritten in place (the same inode, as `cp` over it does), the
    wheel is re-read against the plan's digests, so the changed member is named."""
    path = make_wheel(tmp_path, {"executorch/a.py": b"x = 1\n", "executorch/b.py": b"y = 2\n"})
    wheel = read_wheel(path)
    copy = tmp_path / "copy.whl"
    copy.write_bytes(path.read_bytes())
    replace_member(copy, "executorch/b.py", b"y = 3\n")
    with path.open("r+b") as handle:  # in place: same inode, new bytes
        handle.truncate(0)
        handle.write(copy.read_bytes())
    with Payload(wheel) as payload:
        assert payload.read("executorch/a.py") == b"x = 1\n"
        with pytest.raises(InvalidWheel, match="the wheel changed after it was verified") as caught:
            payload.read("executorch/b.py")
    assert str(caught.value).endswith(": executorch/b.py")


def test_the_plan_and_the_staging_parse_the_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's reading of a wheel and the staging's re-reading take one parse of its
    central directory (open_archive keeps the last open); a wheel changed in between is
    opened again, and its changed member is named."""
    path = make_wheel(tmp_path, {"executorch/a.py": b"x = 1\n", "executorch/b.py": b"y = 2\n"})
    opened: list[str] = []

    class Counted(zipfile.ZipFile):
        def __init__(self, file: Any, *args: Any, **kwargs: Any) -> None:
            opened.append(os.fspath(file))
            super().__init__(file, *args, **kwargs)

    monkeypatch.setattr(zipfile, "ZipFile", Counted)
    wheel = read_wheel(path)
    root = tmp_path / "out"
    root.mkdir()
    extract(wheel, [(e.path, str(root / e.path.replace("/", "_"))) for e in wheel.entries])
    assert opened == [str(path)]
    replace_member(path, "executorch/b.py", b"y = 3\n")
    opened.clear()  # the rewrite's own zip files
    with Payload(wheel) as payload:
        assert payload.read("executorch/a.py") == b"x = 1\n"
        with pytest.raises(
            InvalidWheel, match=r"changed after it was verified.*: executorch/b\.py"
        ):
            payload.read("executorch/b.py")
    assert opened == [str(path)]  # changed since: parsed again


def test_a_narrow_read_ahead_window_gives_the_same_verified_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper thread runs at most AHEAD bytes ahead; with a window smaller than any
    member (one at a time), every member is still read and verified once, in order."""
    import splitter.input.wheel

    files = {f"executorch/lib{i}.so": b"\x7fELF" + os.urandom(200 << 10) for i in range(6)}
    files["executorch/small.py"] = b"x = 1\n"
    wheel = make_wheel(tmp_path, files)

    def read() -> tuple[object, list[tuple[str, bytes | None]]]:
        seen: list[tuple[str, bytes | None]] = []
        info = read_wheel(wheel, lambda n, d: seen.append((n, d)), lambda n, h: True)
        return info.entries, seen

    wide = read()
    monkeypatch.setattr(splitter.input.wheel, "AHEAD", 1)
    narrow = read()
    assert narrow == wide
    assert [name for name, _ in narrow[1]] == sorted(name for name, _ in narrow[1])


def test_small_members_read_whole_match_zipfile_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members under BIG are read in one pread and inflate, larger ones in chunks; stored or
    deflated, empty or not, ELF (kept for analysis) or not, both ways give the same hashes,
    kept bytes and copies (every member streamed in chunks: BIG = 0), and the copies are the
    bytes zipfile writes into the wheel."""
    import splitter.input.wheel
    import splitter.input.zipread

    files = {
        "executorch/empty.py": b"",
        "executorch/small.py": b"x = 1\n" * 100,
        "executorch/lib/libsmall.so": b"\x7fELF" + os.urandom(3000),
        "executorch/random.bin": os.urandom(40 << 10),
        "executorch/large.bin": os.urandom(200 << 10),
    }
    deflated = make_wheel(tmp_path, files)
    stored = tmp_path / "stored" / deflated.name
    stored.parent.mkdir()
    with zipfile.ZipFile(deflated) as source, zipfile.ZipFile(stored, "w") as target:
        for info in source.infolist():  # every other member stored, the rest deflated
            data = source.read(info)
            info.compress_type = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)[len(info.filename) % 2]
            target.writestr(info, data)

    def read(wheel: Path, copies: Path) -> tuple[object, dict[str, bytes | None]]:
        kept: dict[str, bytes | None] = {}
        info = read_wheel(
            wheel,
            lambda name, data: kept.__setitem__(name, data),
            lambda name, head: head.startswith(b"\x7fELF"),
        )
        copies.mkdir(parents=True)
        with Payload(info) as payload:
            for name in files:
                payload.copy(name, str(copies / name.replace("/", "_")))
        return info.entries, kept

    for wheel in (deflated, stored):
        whole = read(wheel, tmp_path / wheel.parent.name / "whole")
        monkeypatch.setattr(splitter.input.zipread, "BIG", 0)
        monkeypatch.setattr(splitter.input.wheel, "BIG", 0)
        streamed = read(wheel, tmp_path / wheel.parent.name / "streamed")
        monkeypatch.undo()
        assert whole == streamed
        assert whole[1]["executorch/lib/libsmall.so"] == files["executorch/lib/libsmall.so"]
        for name, data in files.items():
            for how in ("whole", "streamed"):
                copy = tmp_path / wheel.parent.name / how / name.replace("/", "_")
                assert copy.read_bytes() == data


def test_an_entry_whose_data_runs_into_the_next_is_refused(tmp_path: Path) -> None:
    """A member whose local header claims a longer extra field than it has, so that its data
    (as the local header places it) runs into the next member: the overlap that zipfile (in
    Python 3.12 and late 3.11 releases) and so pip refuse as a possible zip bomb. The
    directory's sizes alone do not show it (splitter's first check); reading the member does,
    whatever this Python's zipfile does. Found by test_fuzz under CI's Python."""
    wheel = make_wheel(tmp_path, {"executorch/a.py": b"a = 1\n", "executorch/b.py": b"b = 2\n"})
    raw = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        first = min(archive.infolist(), key=lambda i: i.header_offset)
    assert raw[first.header_offset : first.header_offset + 4] == b"PK\x03\x04"
    extra = first.header_offset + 28  # the local header's extra field length
    raw[extra : extra + 2] = (int.from_bytes(raw[extra : extra + 2], "little") + 16).to_bytes(
        2, "little"
    )
    wheel.write_bytes(raw)
    with pytest.raises(InvalidWheel, match=rf"Overlapped entries.*\n?.*{first.filename}"):
        read_wheel(wheel)
