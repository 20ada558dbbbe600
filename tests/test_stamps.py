"""The build-string stamp on small synthetic files: a release may share a file whose copies
differ, beyond their link stamps, only in read-only strings naming each wheel's own Python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from splitter.binaries.elf import stamp_layout as elf_stamp_layout
from splitter.binaries.stamps import BuildString, Spans, compare_strings, python_names

CP310, CP311, CP312 = (3, 10), (3, 11), (3, 12)
HEAD = b"\x00" * 16  # "code": 16 bytes before the string section
LINK = ((4, 4),)  # a 4-byte link stamp inside the code


def make(*strings: bytes, code: bytes = HEAD, stamp: bytes = b"") -> tuple[bytes, Spans]:
    """A file: code (its link stamp replaced by `stamp`), then a section of NUL-terminated
    strings; returns it with the section's span."""
    if stamp:
        code = code[:4] + stamp + code[8:]
    section = b"".join(s + b"\0" for s in strings)
    return code + section + b"\xff" * 8, ((len(code), len(section)),)


def compare(
    mine: bytes, theirs: bytes, section: Spans, pythons: tuple[tuple[int, int], ...]
) -> tuple[tuple[BuildString, ...], str]:
    found = compare_strings(
        mine,
        theirs,
        spans=(LINK, LINK),
        sections=(section, section),
        pythons=(pythons[0], pythons[1]),
    )
    return found.strings, found.refused


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (
            b"/tmp/temp.macosx-14.0-arm64-cpython-310/mlx.metallib",
            b"/tmp/temp.macosx-14.0-arm64-cpython-311/mlx.metallib",
        ),
        (b"/opt/cp310/lib", b"/opt/cp311/lib"),
        (b"/usr/include/python3.10/x.h", b"/usr/include/python3.11/x.h"),
        (b"cpython-310 and python3.10", b"cpython-311 and python3.11"),
    ],
    ids=["cpython-3XY", "cp3XY", "python3.XY", "twice"],
)
def test_a_string_naming_each_wheels_python_is_set_aside(mine: bytes, theirs: bytes) -> None:
    a, section = make(b"hello", mine, b"world", stamp=b"AAAA")
    b, _ = make(b"hello", theirs, b"world", stamp=b"BBBB")
    strings, refused = compare(a, b, section, (CP310, CP311))
    assert refused == ""
    assert strings == (
        BuildString(offset=len(HEAD) + 6, mine=mine.decode(), theirs=theirs.decode()),
    )


def test_the_link_stamp_alone_sets_nothing_aside() -> None:
    a, section = make(b"same", stamp=b"AAAA")
    b, _ = make(b"same", stamp=b"BBBB")
    assert compare(a, b, section, (CP310, CP311)) == ((), "")


@pytest.mark.parametrize(
    ("mine", "theirs", "why"),
    [
        (b"cpython-310/a", b"cpython-311/b", "differs beyond the Python build it names"),
        (b"/build/one", b"/build/two", "differs beyond the Python build it names"),
        (b"cpython-311/a", b"cpython-312/a", "differs beyond the Python build it names"),
        (b"cpython-310/a", b"cpython-312/a", "differs beyond the Python build it names"),
        (b"cp3100", b"cp3110", "differs beyond the Python build it names"),
    ],
    ids=["and-elsewhere", "no-python", "another-wheels-python", "a-third-python", "digit-after"],
)
def test_any_other_string_difference_is_refused(mine: bytes, theirs: bytes, why: str) -> None:
    a, section = make(b"x", mine)
    b, _ = make(b"x", theirs)
    strings, refused = compare(a, b, section, (CP310, CP311))
    assert strings == () and why in refused, refused


def test_a_byte_of_code_is_refused() -> None:
    a, section = make(b"cpython-310")
    b, _ = make(b"cpython-311", code=HEAD[:10] + b"\x01" + HEAD[11:])
    assert compare(a, b, section, (CP310, CP311)) == (
        (),
        "byte 0xa is outside its read-only string sections",
    )


def test_a_byte_after_the_section_is_refused() -> None:
    a, section = make(b"cpython-310")
    b = a[:-1] + b"\x00"
    assert "outside its read-only string sections" in compare(a, b, section, (CP310, CP311))[1]


def test_a_string_that_ends_elsewhere_is_refused() -> None:
    a, section = make(b"ab-cpython-310")
    b, _ = make(b"ab\0cpython-311")
    assert "not inside a NUL-terminated string" in compare(a, b, section, (CP310, CP311))[1]


def test_copies_of_different_sizes_or_layouts_are_refused() -> None:
    a, section = make(b"cpython-310")
    b, _ = make(b"cpython-3110")
    assert compare(a, b, section, (CP310, CP311))[1].endswith("bytes")
    moved = compare_strings(
        a, a, spans=(LINK, ((5, 4),)), sections=(section, section), pythons=(CP310, CP311)
    )
    assert moved.refused == "their link stamps are in different places"


def test_python_names_do_not_match_inside_a_longer_number() -> None:
    assert python_names((3, 1)).search(b"cp310") is None
    assert python_names((3, 10)).findall(b"cp310 cpython-310 python3.10 python3.100") == [
        b"cp310",
        b"cpython-310",
        b"python3.10",
    ]


SOURCE = 'const char *build_path(void) { return "/build/temp.linux-x86_64-%s/lib.a"; }\n'
SOURCE_2 = 'const char *other(void) { return "%s"; }\n'


def compile_library(directory: Path, source: str) -> bytes:
    """A shared library built by the system C compiler, with a GNU build-id (sha1 of its
    contents, so two builds that differ anywhere differ there too)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the ELF files")
    directory.mkdir()
    (directory / "lib.c").write_text(source)
    output = directory / "lib.so"
    command = [compiler, "-O2", "-fPIC", "-shared", "-Wl,--build-id=sha1", "-o", str(output)]
    subprocess.run([*command, str(directory / "lib.c")], check=True, capture_output=True)
    return output.read_bytes()


@pytest.mark.parametrize(
    ("mine", "theirs", "refused"),
    [
        (SOURCE % "cpython-310", SOURCE % "cpython-311", ""),
        (SOURCE % "cpython-310", SOURCE % "cpython-312", "differs beyond the Python build"),
        (SOURCE_2 % "a cpython-310 path", SOURCE_2 % "a cpython-311 patH", "differs beyond"),
    ],
    ids=["own-pythons", "a-third-python", "and-another-byte"],
)
def test_elf_rodata_strings(tmp_path: Path, mine: str, theirs: str, refused: str) -> None:
    """Real ELF files from the system compiler: the build-id and a .rodata string naming each
    build's Python set aside; the same string naming another Python, or a string changed
    elsewhere too, refused."""
    a = compile_library(tmp_path / "a", mine)
    b = compile_library(tmp_path / "b", theirs)
    layouts = (elf_stamp_layout("a", a), elf_stamp_layout("b", b))
    assert layouts[0][0] and layouts[0][1]  # a build-id and a .rodata section
    found = compare_strings(
        a,
        b,
        spans=(layouts[0][0], layouts[1][0]),
        sections=(layouts[0][1], layouts[1][1]),
        pythons=(CP310, CP311),
    )
    assert refused in found.refused and bool(found.refused) == bool(refused), found.refused
    if not refused:
        (string,) = found.strings
        assert string.mine == "/build/temp.linux-x86_64-cpython-310/lib.a"
        assert string.theirs == "/build/temp.linux-x86_64-cpython-311/lib.a"
