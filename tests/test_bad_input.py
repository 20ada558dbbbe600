"""Broken wheels fed to the real CLI: each fails with one `error:` line naming what is wrong."""

from __future__ import annotations

import random
import stat
import struct
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from builders import METADATA, WHEEL, make_wheel, record_hash

from splitter.errors import InvalidWheel, UnsupportedWheel
from splitter.input.safepath import safe_join

TAG = "cp311-cp311-manylinux_2_28_x86_64"
DIST = "executorch-1.5.1.dist-info"
FILENAME = f"executorch-1.5.1-{TAG}.whl"
PAYLOAD = "executorch/__init__.py"
# Stands for the wheel's own path in `Case.value`, which is only known once it is built.
WHEEL_PATH = "<wheel>"

Members = list[tuple[zipfile.ZipInfo | str, bytes]]


def base_files(large: bool = False) -> dict[str, bytes]:
    """The smallest valid executorch wheel content, without RECORD; with `large`, PAYLOAD is
    larger than splitter.zipread.BIG, so it is read in chunks rather than whole."""
    rows = [f"v{i} = {random.Random(i).getrandbits(64)}\n".encode() for i in range(6000)]
    return {
        PAYLOAD: b"".join(rows) if large else b"__version__ = '1.5.1'\n" * 40,
        f"{DIST}/METADATA": METADATA.format(name="executorch", version="1.5.1").encode(),
        f"{DIST}/WHEEL": WHEEL.format(tag=TAG).encode(),
    }


def record_of(files: dict[str, bytes], *, sizes: dict[str, int] | None = None) -> bytes:
    """A RECORD for `files` (sizes overridable) that lists itself without a hash."""
    sizes = sizes or {}
    rows = [f"{p},{record_hash(d)},{sizes.get(p, len(d))}" for p, d in files.items()]
    rows.append(f"{DIST}/RECORD,,")
    return ("\n".join(rows) + "\n").encode()


def entry(
    name: str, *, mode: int = 0o100644, method: int = zipfile.ZIP_DEFLATED
) -> zipfile.ZipInfo:
    """A zip member header with a fixed date, `mode` and compression."""
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = mode << 16
    info.compress_type = method
    return info


def write_zip(path: Path, members: Members) -> Path:
    """Write `members` verbatim, duplicates included."""
    with warnings.catch_warnings():
        # zipfile warns on a duplicate name; writing one is the point of that case.
        warnings.filterwarnings("ignore", "Duplicate name", UserWarning)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in members:
                archive.writestr(
                    member if isinstance(member, zipfile.ZipInfo) else entry(member), data
                )
    return path


def write_wheel(
    directory: Path,
    files: dict[str, bytes],
    *,
    record: bytes | None = None,
    extra: Sequence[tuple[zipfile.ZipInfo | str, bytes]] = (),
    filename: str = FILENAME,
) -> Path:
    """`files` plus RECORD (computed over `files` unless given) plus `extra` members."""
    members: Members = [(p, d) for p, d in files.items()]
    members.append((f"{DIST}/RECORD", record_of(files) if record is None else record))
    members.extend(extra)
    return write_zip(directory / filename, members)


def member_offsets(data: bytes, name: str) -> tuple[int, int]:
    """(local header offset, central directory header offset) of member `name`."""
    raw = name.encode()
    central = data.find(b"PK\x01\x02")
    while central != -1:
        (name_len,) = struct.unpack_from("<H", data, central + 28)
        if data[central + 46 : central + 46 + name_len] == raw:
            (local,) = struct.unpack_from("<I", data, central + 42)
            return local, central
        central = data.find(b"PK\x01\x02", central + 4)
    raise AssertionError(f"{name} not in the central directory")


def data_offset(data: bytes, name: str) -> int:
    """Where the (compressed) bytes of member `name` start."""
    local, _ = member_offsets(data, name)
    name_len, extra_len = struct.unpack_from("<HH", data, local + 26)
    return int(local + 30 + name_len + extra_len)


# --- the corpus: each builds one broken wheel under `directory` ------------------------------


def unlisted_file(directory: Path) -> Path:
    return write_wheel(directory, base_files(), extra=[("executorch/extra.py", b"x = 1\n")])


def record_row_without_file(directory: Path) -> Path:
    files = base_files()
    listed = {**files, "executorch/gone.py": b"gone\n"}
    return write_wheel(directory, files, record=record_of(listed))


def hash_mismatch(directory: Path) -> Path:
    files = base_files()
    record = record_of(files)
    files[PAYLOAD] = files[PAYLOAD].replace(b"1.5.1", b"6.6.6")
    return write_wheel(directory, files, record=record)


def size_mismatch(directory: Path) -> Path:
    files = base_files()
    return write_wheel(directory, files, record=record_of(files, sizes={PAYLOAD: 7}))


def listed_member(name: str, data: bytes = b"x\n", mode: int = 0o100644) -> Callable[[Path], Path]:
    """A wheel with one extra member, listed in RECORD so only its name or type is wrong."""

    def build(directory: Path) -> Path:
        files = base_files()
        record = record_of({**files, name: data})
        return write_wheel(directory, files, record=record, extra=[(entry(name, mode=mode), data)])

    return build


def duplicate_member(directory: Path) -> Path:
    return write_wheel(directory, base_files(), extra=[(PAYLOAD, b"print('second copy')\n")])


def truncated(directory: Path) -> Path:
    wheel = write_wheel(directory, base_files())
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    return wheel


def not_a_zip(directory: Path) -> Path:
    wheel = directory / FILENAME
    wheel.write_bytes(random.Random(0).randbytes(4096))
    return wheel


def empty_file(directory: Path) -> Path:
    wheel = directory / FILENAME
    wheel.write_bytes(b"")
    return wheel


def zip_bomb(directory: Path) -> Path:
    # 2 MiB of zeros deflate ~1000:1, over SUSPECT_RATIO for an entry over SUSPECT_SIZE.
    return listed_member("executorch/zeros.bin", bytes(2 << 20))(directory)


def lying_size(directory: Path) -> Path:
    """A normal entry whose headers claim 3 GB uncompressed (kept under the zip64 limit)."""
    wheel = write_wheel(directory, base_files())
    data = bytearray(wheel.read_bytes())
    local, central = member_offsets(bytes(data), PAYLOAD)
    struct.pack_into("<I", data, local + 22, 3_000_000_000)
    struct.pack_into("<I", data, central + 24, 3_000_000_000)
    wheel.write_bytes(bytes(data))
    return wheel


def corrupt_deflate(directory: Path, large: bool = False) -> Path:
    wheel = write_wheel(directory, base_files(large))
    data = bytearray(wheel.read_bytes())
    # 0xFF opens a final block of the reserved type 3: inflate fails on the first byte.
    data[data_offset(bytes(data), PAYLOAD)] = 0xFF
    wheel.write_bytes(bytes(data))
    return wheel


def corrupt_stored(directory: Path, large: bool = False) -> Path:
    files = base_files(large)
    payload = files.pop(PAYLOAD)
    wheel = write_wheel(
        directory,
        files,
        record=record_of({PAYLOAD: payload, **files}),
        extra=[(entry(PAYLOAD, method=zipfile.ZIP_STORED), payload)],
    )
    data = bytearray(wheel.read_bytes())
    data[data_offset(bytes(data), PAYLOAD) + 3] ^= 0x01  # only the CRC can notice
    wheel.write_bytes(bytes(data))
    return wheel


def local_name_differs(directory: Path, large: bool = False) -> Path:
    """The member's local header names another file than the central directory does."""
    wheel = write_wheel(directory, base_files(large))
    data = bytearray(wheel.read_bytes())
    local, _ = member_offsets(bytes(data), PAYLOAD)
    data[local + 30] ^= 0x20  # "executorch/..." -> "Executorch/..." in the local header only
    wheel.write_bytes(bytes(data))
    return wheel


INNER = "executorch/inner.py"


def overlapping_entries(directory: Path) -> Path:
    """A zip bomb's primitive: a member (INNER) whose local header and data lie inside another
    stored member's data, so that one stretch of bytes is read for two members. Both are in
    RECORD with their right hashes; only the overlap is wrong."""
    inner = b"y = 2\n"
    alone = directory / "inner.zip"
    write_zip(alone, [(entry(INNER, method=zipfile.ZIP_STORED), inner)])
    raw = alone.read_bytes()
    quoted = raw[: data_offset(raw, INNER) + len(inner)]  # INNER's local header and data
    outer = "executorch/outer.bin"
    files = base_files()
    record = record_of({**files, outer: quoted, INNER: inner})
    extra = [(entry(outer, method=zipfile.ZIP_STORED), quoted)]
    wheel = bytearray(write_wheel(directory, files, record=record, extra=extra).read_bytes())
    _, inner_central = member_offsets(raw, INNER)
    central = bytearray(raw[inner_central : raw.index(b"PK\x05\x06")])
    struct.pack_into("<I", central, 42, data_offset(bytes(wheel), outer))  # into outer's data
    end = wheel.rindex(b"PK\x05\x06")
    count, size = struct.unpack_from("<HI", wheel, end + 10)
    struct.pack_into("<HHI", wheel, end + 8, count + 1, count + 1, size + len(central))
    wheel[end:end] = central
    path = directory / FILENAME
    path.write_bytes(bytes(wheel))
    return path


def no_dist_info(directory: Path) -> Path:
    return write_zip(directory / FILENAME, [(PAYLOAD, b"x = 1\n")])


def no_metadata(directory: Path) -> Path:
    files = base_files()
    del files[f"{DIST}/METADATA"]
    return write_wheel(directory, files)


def two_dist_infos(directory: Path) -> Path:
    files = base_files()
    files["six-1.16.0.dist-info/METADATA"] = METADATA.format(name="six", version="1.16.0").encode()
    return write_wheel(directory, files)


def bad_filename(directory: Path) -> Path:
    return write_wheel(directory, base_files(), filename="foo.whl")


def six_wheel(directory: Path) -> Path:
    return make_wheel(
        directory, {"six.py": b"# six\n"}, name="six", version="1.16.0", tag="py2.py3-none-any"
    )


def nonexistent(directory: Path) -> Path:
    return directory / FILENAME


def bracketed_name(directory: Path) -> Path:
    # Legal in a wheel; printed as rich markup, "[/x]" would be a closing tag and crash.
    return write_wheel(directory, base_files(), extra=[("executorch/data[/x].bin", b"x")])


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One broken wheel and how the CLI must refuse it."""

    build: Callable[[Path], Path]
    code: int
    what: str  # part of the "what is wrong" text
    value: str  # the path the message ends its first line with, or WHEEL_PATH
    mentions: tuple[str, ...] = ()
    lines: int = 1


BAD = InvalidWheel.exit_code


def corrupt_entry(build: Callable[[Path], Path], name: str, *mentions: str) -> object:
    """A case whose PAYLOAD member fails a zip check: refused as a corrupt entry naming it."""
    what = "corrupt entry in the wheel"
    case = Case(build=build, code=BAD, what=what, value=PAYLOAD, mentions=mentions)
    return pytest.param(case, id=name)


CASES = [
    pytest.param(
        Case(
            build=unlisted_file,
            code=BAD,
            what="file not listed in RECORD",
            value="executorch/extra.py",
        ),
        id="unlisted-in-record",
    ),
    pytest.param(
        Case(
            build=record_row_without_file,
            code=BAD,
            what="RECORD lists a file the wheel does not contain",
            value="executorch/gone.py",
        ),
        id="record-row-without-file",
    ),
    pytest.param(
        Case(build=hash_mismatch, code=BAD, what="hash mismatch against RECORD", value=PAYLOAD),
        id="hash-mismatch",
    ),
    pytest.param(
        Case(build=size_mismatch, code=BAD, what="size mismatch against RECORD", value=PAYLOAD),
        id="size-mismatch",
    ),
    pytest.param(
        Case(
            build=listed_member("/etc/passwd"),
            code=BAD,
            what="unsafe path in wheel (absolute)",
            value="/etc/passwd",
        ),
        id="absolute-path",
    ),
    pytest.param(
        Case(
            build=listed_member("executorch/../../evil"),
            code=BAD,
            what="unsafe path in wheel (contains '..')",
            value="executorch/../../evil",
        ),
        id="dotdot-path",
    ),
    pytest.param(
        Case(
            build=listed_member("executorch/link", b"/etc/passwd", stat.S_IFLNK | 0o777),
            code=BAD,
            what="symlink entry in wheel",
            value="executorch/link",
        ),
        id="symlink",
    ),
    pytest.param(
        Case(build=duplicate_member, code=BAD, what="duplicate entry in wheel", value=PAYLOAD),
        id="duplicate-member",
    ),
    pytest.param(
        Case(build=truncated, code=BAD, what="corrupt or truncated wheel", value=WHEEL_PATH),
        id="truncated",
    ),
    pytest.param(
        Case(build=not_a_zip, code=BAD, what="corrupt or truncated wheel", value=WHEEL_PATH),
        id="not-a-zip",
    ),
    pytest.param(
        Case(build=empty_file, code=BAD, what="corrupt or truncated wheel", value=WHEEL_PATH),
        id="empty-file",
    ),
    pytest.param(
        Case(build=zip_bomb, code=BAD, what="a zip bomb", value="executorch/zeros.bin"),
        id="zip-bomb",
    ),
    pytest.param(
        Case(build=lying_size, code=BAD, what="entry declares 3000000000 bytes", value=PAYLOAD),
        id="zip-bomb-declared-size",
    ),
    corrupt_entry(corrupt_deflate, "corrupt-deflate"),
    corrupt_entry(corrupt_stored, "corrupt-crc", "Bad CRC-32"),
    pytest.param(
        Case(build=overlapping_entries, code=BAD, what="zip entries overlap", value=INNER),
        id="overlapping-entries",
    ),
    corrupt_entry(local_name_differs, "local-header-name", "and header", "differ"),
    corrupt_entry(partial(corrupt_deflate, large=True), "corrupt-deflate-large"),
    corrupt_entry(partial(corrupt_stored, large=True), "corrupt-crc-large", "Bad CRC-32"),
    corrupt_entry(
        partial(local_name_differs, large=True), "local-header-name-large", "and header", "differ"
    ),
    pytest.param(
        Case(
            build=no_dist_info,
            code=BAD,
            what="expected exactly one .dist-info directory, found none",
            value=WHEEL_PATH,
        ),
        id="no-dist-info",
    ),
    pytest.param(
        Case(build=no_metadata, code=BAD, what=f"wheel has no {DIST}/METADATA", value=WHEEL_PATH),
        id="no-metadata",
    ),
    pytest.param(
        Case(
            build=two_dist_infos,
            code=BAD,
            what="expected exactly one .dist-info directory",
            value=WHEEL_PATH,
            mentions=(DIST, "six-1.16.0.dist-info"),
        ),
        id="two-dist-infos",
    ),
    pytest.param(
        Case(build=bad_filename, code=BAD, what="not a wheel file name", value=WHEEL_PATH),
        id="not-a-wheel-name",
    ),
    pytest.param(
        Case(
            build=six_wheel,
            code=UnsupportedWheel.exit_code,
            what="wheel is not executorch (it is six 1.16.0",
            value=WHEEL_PATH,
            mentions=(">=1.5,<1.6",),
        ),
        id="not-executorch",
    ),
    pytest.param(
        Case(build=nonexistent, code=BAD, what="wheel not found", value=WHEEL_PATH),
        id="nonexistent",
    ),
    pytest.param(
        Case(
            build=bracketed_name,
            code=BAD,
            what="file not listed in RECORD",
            value="executorch/data[/x].bin",
        ),
        id="bracketed-entry-name",
    ),
]


def run_plan(wheel: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m splitter plan WHEEL` in `cwd`."""
    return subprocess.run(
        [sys.executable, "-m", "splitter", "plan", str(wheel)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def check_refusal(case: Case, wheel: Path, tmp_path: Path) -> None:
    """Run the CLI on `wheel` and hold its failure to `case`."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = run_plan(wheel, cwd)
    stderr = result.stderr
    assert "Traceback" not in stderr, stderr
    assert result.returncode == case.code, stderr
    lines = stderr.splitlines()
    assert len(lines) == case.lines, stderr
    assert lines[0].startswith("error: "), stderr
    assert case.what in lines[0], stderr
    value = str(wheel) if case.value == WHEEL_PATH else case.value
    assert f": {value}" in lines[0], stderr
    for mention in case.mentions:
        assert mention in stderr, stderr
    assert result.stdout == ""
    assert sorted(cwd.iterdir()) == []


@pytest.mark.parametrize("case", CASES)
def test_cli_refuses_broken_wheel(case: Case, tmp_path: Path) -> None:
    """Every broken wheel: exit code, one `error:` line naming the entry or file, no output."""
    built = tmp_path / "built"
    built.mkdir()
    check_refusal(case, case.build(built), tmp_path)


@pytest.mark.integration
def test_cli_refuses_old_real_wheel(old_wheel: Path, tmp_path: Path) -> None:
    """executorch 1.4.1 is valid but unsupported: the message names the supported versions."""
    case = Case(
        build=lambda _: old_wheel,
        code=UnsupportedWheel.exit_code,
        what="executorch 1.4.1 is not supported (this recipe splits >=1.5,<1.6",
        value=WHEEL_PATH,
        mentions=("executorch==1.5.1", "no C++ runtime"),
    )
    check_refusal(case, old_wheel, tmp_path)


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        pytest.param("../x", "unsafe path in wheel (contains '..'): ../x", id="parent"),
        pytest.param(
            "executorch/../../x",
            "unsafe path in wheel (contains '..'): executorch/../../x",
            id="nested-parent",
        ),
        pytest.param("/etc/passwd", "unsafe path in wheel (absolute): /etc/passwd", id="absolute"),
        pytest.param("C:/x", "unsafe path in wheel (drive letter): C:/x", id="drive-letter"),
        pytest.param(
            "a\\..\\x",
            "unsafe path in wheel (empty, backslash or NUL): 'a\\\\..\\\\x'",
            id="backslash",
        ),
        pytest.param("", "unsafe path in wheel (empty, backslash or NUL): ''", id="empty"),
    ],
)
def test_safe_join_refuses_escaping_paths(relative: str, message: str, tmp_path: Path) -> None:
    """safe_join raises InvalidWheel naming the path for anything outside the root."""
    with pytest.raises(InvalidWheel) as info:
        safe_join(tmp_path, relative)
    assert str(info.value) == message


def test_safe_join_refuses_symlink_escape(tmp_path: Path) -> None:
    """A symlink already under the root cannot carry a join outside it."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(InvalidWheel, match="path escapes the destination") as info:
        safe_join(root, "link/x")
    assert str(info.value).endswith(": link/x")


def test_safe_join_accepts_inner_path(tmp_path: Path) -> None:
    """A plain relative path lands under the root."""
    assert safe_join(tmp_path, "executorch/lib/x.so") == tmp_path.resolve() / "executorch/lib/x.so"


def with_requirement(real_wheel: Path, directory: Path) -> Path:
    """The real wheel whose METADATA also requires a project the recipe has no conda name for."""
    from builders import replace_member

    wheel = directory / real_wheel.name
    wheel.write_bytes(real_wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"{DIST}/METADATA")
    head, _, body = metadata.partition(b"\n\n")
    replace_member(
        wheel, f"{DIST}/METADATA", head + b"\nRequires-Dist: no-such-conda-name>=1\n\n" + body
    )
    return wheel


def on_windows(real_wheel: Path, directory: Path) -> Path:
    """The real wheel under a platform tag no conda subdir is known for."""
    wheel = directory / real_wheel.name.replace("manylinux_2_28_x86_64", "win_amd64")
    wheel.write_bytes(real_wheel.read_bytes())
    return wheel


@pytest.mark.integration
@pytest.mark.parametrize(
    ("make", "what"),
    [
        pytest.param(
            with_requirement, "Requires-Dist names without a conda name", id="no-conda-name"
        ),
        pytest.param(on_windows, "no conda subdir for platform tag", id="unsupported-platform"),
    ],
)
def test_plan_refuses_what_build_refuses(
    real_wheel: Path, tmp_path: Path, make: Callable[[Path, Path], Path], what: str
) -> None:
    """`splitter plan` fails where `splitter build` does, whatever the target: same exit code,
    same message, and no output directory."""
    wheel = make(real_wheel, tmp_path)
    planned = run_plan(wheel, tmp_path)
    assert planned.returncode != 0 and what in planned.stderr, planned.stderr
    assert "Traceback" not in planned.stderr
    for target in ("conda", "wheel", "tree"):
        out = tmp_path / target
        built = subprocess.run(
            [sys.executable, "-m", "splitter", "build", str(wheel), "-t", target, "-o", str(out)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert (built.returncode, built.stderr) == (planned.returncode, planned.stderr), target
        assert not out.exists(), target


@pytest.mark.parametrize(
    "option",
    [
        pytest.param(("--backend", "nope"), id="backend"),
        pytest.param(("--rpath", "nope"), id="rpath"),
        pytest.param(("--compression-level", "23"), id="compression-level"),
        pytest.param(("--jobs", "0"), id="jobs"),
        pytest.param(("--target", "nope"), id="target"),
    ],
)
def test_build_options_are_checked_first(tmp_path: Path, option: tuple[str, str]) -> None:
    """An option value outside its choices is a usage error (exit 2) naming the option, before
    any wheel is looked for (the wheel named here does not exist) or anything is written."""
    command = [sys.executable, "-m", "splitter", "build", str(tmp_path / FILENAME)]
    result = subprocess.run(
        [*command, *option, "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2, result.stderr
    assert option[0] in result.stderr and "wheel not found" not in result.stderr
    assert sorted(tmp_path.iterdir()) == []
