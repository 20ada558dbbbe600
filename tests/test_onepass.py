"""The conda build's single inflating pass: read_wheel writes exactly the verified files, and
a wheel that fails verification part-way through leaves no scratch and no output."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from builders import METADATA, WHEEL, make_wheel

from splitter.errors import InvalidWheel, OutputError
from splitter.targets.stage import move, subtree_moves
from splitter.wheel import read_verified, read_wheel, record_hash

DIST_INFO = "executorch-1.5.1.dist-info"


def test_unpack_writes_exactly_the_verified_files(tmp_path: Path) -> None:
    files = {
        "executorch/a.py": b"print(1)\n",
        "executorch/sub/b.bin": os.urandom(3 << 20),
        "executorch/sub/deeper/empty": b"",
    }
    wheel = make_wheel(tmp_path, files)
    asked: list[int] = []

    def unpack(size: int) -> Path:
        asked.append(size)
        return tmp_path / "unpacked"

    info = read_wheel(wheel, unpack=unpack)
    root = tmp_path / "unpacked"
    unpacked = {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}
    assert sorted(unpacked) == sorted(e.path for e in info.entries)
    for entry in info.entries:
        assert hashlib.sha256(unpacked[entry.path].read_bytes()).hexdigest() == entry.sha256
    assert asked == [sum(e.size for e in info.entries)]


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


def test_failed_verification_leaves_no_scratch_and_no_output(tmp_path: Path) -> None:
    wheel = corrupt_wheel(tmp_path)
    try:
        read_wheel(wheel, unpack=lambda size: tmp_path / "direct")
    except InvalidWheel as exc:
        assert "hash mismatch against RECORD" in str(exc) and "m049.py" in str(exc)
    else:
        raise AssertionError("the corrupt member was not caught")
    # streamed to disk before its digest is compared: why the CLI keeps it in scratch
    assert len(list((tmp_path / "direct").rglob("*.py"))) == 50

    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitter",
            "-q",
            "build",
            str(wheel),
            "--target",
            "conda",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "SPLITTER_SCRATCH": str(scratch)},
        check=False,
    )
    assert result.returncode == InvalidWheel.exit_code, result.stderr
    assert result.stderr.startswith("error: hash mismatch against RECORD")
    assert list(scratch.iterdir()) == []
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["direct", "scratch", wheel.name])


def test_a_full_scratch_is_an_output_error_not_a_broken_wheel(tmp_path: Path) -> None:
    """The kernel's own ENOSPC: the member's unpack path leads to /dev/full."""
    wheel = make_wheel(tmp_path, {"executorch/a.py": b"x = 1\n" * 1000})
    root = tmp_path / "unpacked"
    (root / "executorch").mkdir(parents=True)
    (root / "executorch" / "a.py").symlink_to("/dev/full")
    with pytest.raises(OutputError) as caught:
        read_wheel(wheel, unpack=lambda size: root)
    message = str(caught.value)
    assert "No space left on device" in message and str(root / "executorch" / "a.py") in message
    assert "SPLITTER_SCRATCH" in message


def test_a_full_output_disk_while_re_reading_names_the_file_not_scratch(tmp_path: Path) -> None:
    """The tree and wheel targets' second read (read_verified) writes into the output, not
    into scratch: its ENOSPC names the file, without read_wheel's scratch advice."""
    wheel = make_wheel(tmp_path, {"executorch/a.py": b"x = 1\n" * 1000})
    (entry,) = [e for e in read_wheel(wheel).entries if e.path == "executorch/a.py"]
    with zipfile.ZipFile(wheel) as archive, pytest.raises(OutputError) as caught:
        read_verified(archive, entry, "/dev/full")
    message = str(caught.value)
    assert "No space left on device" in message and message.endswith("/dev/full; free space there")
    assert "SPLITTER_SCRATCH" not in message


def test_two_directories_landing_in_one_target_are_moved_file_by_file(tmp_path: Path) -> None:
    """move() renames a directory whole only while its target does not exist: a second
    directory landing in the same target (two wheel directories merged into one library
    directory) is moved file by file into it, instead of failing on a non-empty target."""
    unpacked, target = tmp_path / "unpacked", tmp_path / "stage" / "lib"
    for path in ("a/x/f.so", "b/y/g.so"):
        (unpacked / path).parent.mkdir(parents=True, exist_ok=True)
        (unpacked / path).write_bytes(path.encode())
    jobs = [("a/x/f.so", f"{target}/f.so"), ("b/y/g.so", f"{target}/g.so")]
    whole, _ = subtree_moves(dict(jobs), {}, ["a/x/f.so", "b/y/g.so"])
    assert sorted((t.directory, t.target) for t in whole) == [
        ("a/x", str(target)),
        ("b/y", str(target)),
    ]
    move(str(unpacked), jobs, {}, ["a/x/f.so", "b/y/g.so"])
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {
        "f.so": b"a/x/f.so",
        "g.so": b"b/y/g.so",
    }


def tree_listing(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under `root`: its mode, and the sha256 of a file (directories: "")."""
    found = {}
    for path in sorted(root.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (path.stat().st_mode & 0o7777, digest)
    return found


@pytest.mark.integration
def test_staging_from_the_unpacked_tree_equals_staging_from_the_zip(
    real_wheel: Path, tmp_path: Path
) -> None:
    """Whole directories are renamed out of the unpacked tree (made under umask 077 here);
    the result must be the tree that extracting file by file gives, modes included."""
    from splitter.layout import install_path
    from splitter.plan import make_plan
    from splitter.recipe import load_recipe
    from splitter.targets.conda import conda_layout
    from splitter.targets.stage import stage

    previous = os.umask(0o077)
    try:
        plan = make_plan(real_wheel, load_recipe(), unpack=lambda size: tmp_path / "unpacked")
        layout = conda_layout(plan)
        moved = stage(
            plan, layout, lambda name: tmp_path / "moved" / name, unpacked=tmp_path / "unpacked"
        )
        extracted = stage(plan, layout, lambda name: tmp_path / "extracted" / name)
    finally:
        os.umask(previous)
    assert moved.packages.keys() == extracted.packages.keys()
    for name in moved.packages:
        assert [f.path for f in moved.packages[name]] == [f.path for f in extracted.packages[name]]
    moved_tree, extracted_tree = (
        tree_listing(tmp_path / "moved"),
        tree_listing(tmp_path / "extracted"),
    )
    assert moved_tree == extracted_tree
    assert {mode for mode, digest in moved_tree.values() if not digest} == {0o755}
    assert len(moved_tree) > len(plan.wheel.entries)  # files and their directories
    unpacked = tmp_path / "unpacked"
    left = sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file())
    regenerated = [
        e.path
        for e in plan.wheel.entries
        if install_path(e.path, layout, plan.wheel.dist_info) is None
    ]
    assert left == sorted(regenerated)  # RECORD, the upstream CMake files: nothing else stays


def test_a_narrow_read_ahead_window_gives_the_same_verified_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper thread runs at most AHEAD bytes ahead; with a window smaller than any
    member (one at a time), every member is still read, verified and written once, in order."""
    import splitter.wheel

    files = {f"executorch/lib{i}.so": b"\x7fELF" + os.urandom(200 << 10) for i in range(6)}
    files["executorch/small.py"] = b"x = 1\n"
    wheel = make_wheel(tmp_path, files)
    wide = read_wheel(wheel, unpack=lambda size: tmp_path / "wide")
    monkeypatch.setattr(splitter.wheel, "AHEAD", 1)
    narrow = read_wheel(wheel, unpack=lambda size: tmp_path / "narrow")
    assert narrow.entries == wide.entries
    for entry in narrow.entries:
        assert (tmp_path / "narrow" / entry.path).read_bytes() == (
            tmp_path / "wide" / entry.path
        ).read_bytes()


def test_small_members_read_whole_match_zipfile_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members under BIG are read in one piece (_read_small), not through zipfile's streams;
    stored or deflated, empty or not, ELF (kept for analysis) or not, they give the same
    hashes, kept bytes and unpacked files as zipfile streaming every member (BIG = 0)."""
    import splitter.wheel

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

    def read(wheel: Path, unpacked: Path) -> tuple[object, dict[str, bytes | None]]:
        kept: dict[str, bytes | None] = {}
        info = read_wheel(
            wheel,
            lambda name, data: kept.__setitem__(name, data),
            lambda name, head: head.startswith(b"\x7fELF"),
            lambda size: unpacked,
        )
        return info.entries, kept

    for wheel in (deflated, stored):
        whole = read(wheel, tmp_path / wheel.parent.name / "whole")
        monkeypatch.setattr(splitter.wheel, "BIG", 0)
        streamed = read(wheel, tmp_path / wheel.parent.name / "streamed")
        monkeypatch.undo()
        assert whole == streamed
        assert whole[1]["executorch/lib/libsmall.so"] == files["executorch/lib/libsmall.so"]
        for name, data in files.items():
            for how in ("whole", "streamed"):
                assert (tmp_path / wheel.parent.name / how / name).read_bytes() == data
