"""check_structure against LLVM, the independent judge: the real Mach-O files pass, one
hand-made breach of each rule family is refused by both, and a mutant splitter accepts is one
llvm-objdump and llvm-otool read as splitter does."""

from __future__ import annotations

import re
import struct
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from machotools import check_signature
from test_fuzz import MACHO, byte_edits, macho_regions

from splitter.binaries.macho import analyse_macho, is_macho
from splitter.binaries.machocheck import check_structure
from splitter.binaries.machoedit import with_rpaths
from splitter.errors import BinaryError

pytestmark = pytest.mark.integration

DYLIB = "executorch/lib/libexecutorch_etdump.dylib"
TIMEOUT = 20  # seconds, for each LLVM tool run
RPATH = "@loader_path/../lib"


@pytest.fixture(scope="module")
def machos(real_wheel_macos: Path) -> dict[str, bytes]:
    """Every Mach-O file of the macOS wheel (dylibs, extension modules, flatc), read once."""
    with zipfile.ZipFile(real_wheel_macos) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    return {name: data for name, data in members.items() if is_macho(data)}


def llvm(tmp: Path, data: bytes, *args: str) -> tuple[int, str, str]:
    """An LLVM 14 tool run on `data`, written to a file in `tmp`: exit code, stdout, stderr
    (decoded as splitter decodes names, newlines untranslated)."""
    path = tmp / "mutant.dylib"
    path.write_bytes(data)
    run = subprocess.run([*args, str(path)], capture_output=True, timeout=TIMEOUT)
    return (
        run.returncode,
        run.stdout.decode("utf-8", "replace"),
        run.stderr.decode("utf-8", "replace"),
    )


def test_real_files_pass(machos: dict[str, bytes]) -> None:
    assert len(machos) > 10 and any(name.endswith(".so") for name in machos)
    for name, data in machos.items():
        check_structure(name, data)


def commands(data: bytes | bytearray) -> list[tuple[int, int]]:
    """(cmd, offset) of each load command of a thin 64-bit Mach-O, read with struct alone."""
    found, offset = [], 32
    for _ in range(struct.unpack_from("<I", data, 16)[0]):
        command, size = struct.unpack_from("<II", data, offset)
        found.append((command, offset))
        offset += size
    return found


def at(data: bytes | bytearray, command: int, nth: int = 0) -> int:
    """The offset of the `nth` load command `command`."""
    return [offset for cmd, offset in commands(data) if cmd == command][nth]


def put(data: bytearray, offset: int, form: str, *values: int) -> None:
    struct.pack_into(form, data, offset, *values)


def _section_past_end(d: bytearray) -> None:
    put(d, at(d, 0x19) + 72 + 48, "<I", len(d) + 16)  # section 0's offset


def _filesize_over_vmsize(d: bytearray) -> None:
    put(d, at(d, 0x19, 2) + 32, "<Q", 1)  # __LINKEDIT's vmsize


def _dysymtab_alone(d: bytearray) -> None:
    put(d, at(d, 0x2), "<I", 0x7F)  # LC_SYMTAB becomes a command nobody reads


def _two_ids(d: bytearray) -> None:
    put(d, at(d, 0xC), "<I", 0xD)  # the first LC_LOAD_DYLIB becomes an LC_ID_DYLIB


def _obsolete(d: bytearray) -> None:
    put(d, at(d, 0x2A), "<I", 0x3)  # LC_SOURCE_VERSION becomes LC_SYMSEG


def _linkedit_past_end(d: bytearray) -> None:
    put(d, at(d, 0x26) + 12, "<I", len(d))  # LC_FUNCTION_STARTS' datasize


def _symbols_over_headers(d: bytearray) -> None:
    put(d, at(d, 0x2) + 8, "<I", 0)  # LC_SYMTAB's symoff


def _main_of_wrong_size(d: bytearray) -> None:
    put(d, at(d, 0x2A), "<I", 0x80000028)  # LC_SOURCE_VERSION (16 bytes) becomes LC_MAIN (24)


def _name_inside_struct(d: bytearray) -> None:
    put(d, at(d, 0xC) + 8, "<I", 20)  # LC_LOAD_DYLIB's name.offset


BREACHES: dict[str, tuple[Callable[[bytearray], None], str]] = {
    "section-past-end": (_section_past_end, "offset field of section 0 in LC_SEGMENT_64"),
    "filesize-over-vmsize": (_filesize_over_vmsize, "greater than vmsize field"),
    "dysymtab-alone": (_dysymtab_alone, "LC_DYSYMTAB load command without a LC_SYMTAB"),
    "two-ids": (_two_ids, "more than one LC_ID_DYLIB command"),
    "obsolete": (_obsolete, "for cmd value of: 3 is obsolete"),
    "linkedit-past-end": (_linkedit_past_end, "datasize field of LC_FUNCTION_STARTS command"),
    "symbols-over-headers": (_symbols_over_headers, "symbol table at offset 0 with a size"),
    "main-cmdsize": (_main_of_wrong_size, "LC_MAIN command 10 has incorrect cmdsize"),
    "name-inside-struct": (_name_inside_struct, "LC_LOAD_DYLIB name.offset field too small"),
}


@pytest.mark.parametrize("breach", BREACHES)
def test_breaches_are_refused_like_llvm(
    machos: dict[str, bytes], breach: str, tmp_path: Path
) -> None:
    """One breach of a rule family: splitter names the rule and the file, LLVM refuses too."""
    mutate, reason = BREACHES[breach]
    data = bytearray(machos[DYLIB])
    mutate(data)
    with pytest.raises(BinaryError) as refused:
        analyse_macho(DYLIB, bytes(data))
    assert reason in str(refused.value) and str(refused.value).endswith(f": {DYLIB}")
    code, out, err = llvm(tmp_path, bytes(data), "llvm-objdump-14", "--macho", "--private-headers")
    assert code != 0, out[:500]
    assert "truncated or malformed object" in err, err


def test_an_ident_command_is_refused_as_llvm_misreads_what_follows(
    machos: dict[str, bytes], tmp_path: Path
) -> None:
    """LC_IDENT (0x8, obsolete; ld64 never writes it) in place of the first LC_LOAD_DYLIB:
    llvm-objdump-14 accepts the file but reads every later load command as another LC_IDENT,
    and llvm-otool-14 lists none of the later libraries, though the bytes hold them; splitter
    refuses it, naming the file, rather than read it otherwise than LLVM's tools."""
    data = bytearray(machos[DYLIB])
    first_load = at(data, 0xC)
    put(data, first_load, "<I", 0x8)
    later = [offset for command, offset in commands(data) if offset > first_load]
    assert any(struct.unpack_from("<I", data, offset)[0] == 0xC for offset in later)
    code, out, err = llvm(tmp_path, bytes(data), "llvm-objdump-14", "--macho", "--private-headers")
    assert code == 0 and "malformed" not in err, err
    shown = re.findall(r"Load command \d+\n\s+cmd (\S+)", out)
    assert shown[len(commands(data)) - len(later) :] == ["?(0x00000008)"] * len(later)
    code, out, _ = llvm(tmp_path, bytes(data), "llvm-otool-14", "-L")
    assert code == 0 and len(listed(out)) == 1, out  # the install name alone
    with pytest.raises(BinaryError, match=r"cmd value of: 8 is obsolete") as refused:
        analyse_macho(DYLIB, bytes(data))
    assert str(refused.value).endswith(f": {DYLIB}")


def test_an_empty_install_name_is_refused(machos: dict[str, bytes], tmp_path: Path) -> None:
    """LC_ID_DYLIB's name cut to "": llvm-otool-14 lists "" as the install name; splitter
    refuses the file, naming it, rather than read it as a dylib without an LC_ID_DYLIB."""
    data = bytearray(machos[DYLIB])
    identity = at(data, 0xD)
    data[identity + struct.unpack_from("<I", data, identity + 8)[0]] = 0
    code, out, _ = llvm(tmp_path, bytes(data), "llvm-otool-14", "-L")
    assert code == 0 and listed(out)[0] == "", out
    with pytest.raises(BinaryError, match=r"LC_ID_DYLIB .* is empty") as refused:
        analyse_macho(DYLIB, bytes(data))
    assert str(refused.value).endswith(f": {DYLIB}")


def test_a_lazy_load_is_a_dependency_as_llvm_lists_it(
    machos: dict[str, bytes], tmp_path: Path
) -> None:
    """The first LC_LOAD_DYLIB turned into LC_LAZY_LOAD_DYLIB (0x20): llvm-otool-14 lists it
    among the libraries ("lazy"), and splitter's NEEDED keeps it in its place."""
    data = bytearray(machos[DYLIB])
    put(data, at(data, 0xC), "<I", 0x20)
    info = analyse_macho(DYLIB, bytes(data))
    code, out, _ = llvm(tmp_path, bytes(data), "llvm-otool-14", "-L")
    assert code == 0 and ", lazy)" in out, out
    assert listed(out) == [info.soname, *info.needed]
    assert info.needed == analyse_macho(DYLIB, machos[DYLIB]).needed


def listed(out: str) -> list[str]:
    """The names llvm-otool -L lists after the file's line, each as "\t<name> (compatibility
    version ...)": read by that shape, as a mutated name may hold a newline."""
    return re.findall(r"\t(.*?) \(compatibility version [^\n]*\)\n", out.partition("\n")[2], re.S)


@pytest.mark.parametrize("name", MACHO, ids=lambda n: Path(n).stem)
@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),  # an edit list is its own reproducer: no shrinking
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_accepted_mutants_read_alike_in_llvm(
    machos: dict[str, bytes], name: str, data: st.DataObject, tmp_path: Path
) -> None:
    """A mutant splitter accepts, LLVM accepts: its install name, loads and rpaths alike; and
    splitter's rpath editor rewrites it into a file LLVM reads with the new rpath, whose
    signature is as sound as the mutant's was."""
    original = machos[name]
    mutant = data.draw(byte_edits(len(original), macho_regions(original))).apply(original)
    try:
        info = analyse_macho(name, mutant)
    except BinaryError as refused:
        assert str(refused).endswith(f": {name}")
        return
    code, _, err = llvm(tmp_path, mutant, "llvm-objdump-14", "--macho", "--private-headers")
    assert code == 0 and "malformed" not in err, err
    code, out, err = llvm(tmp_path, mutant, "llvm-otool-14", "-L")
    assert code == 0 and not err, err
    # otool lists LC_ID_DYLIB where it stands among the loads (first, as ld64 writes it)
    names = listed(out)
    if info.soname:
        assert info.soname in names, out
        names.remove(info.soname)
    assert names == list(info.needed)
    code, out, err = llvm(tmp_path, mutant, "llvm-objdump-14", "--macho", "--rpaths")
    assert code == 0 and not err, err
    assert out.partition("\n")[2] == "".join(f"{path}\n" for path in info.runpath)
    # splitter's own rpath editor on the mutant: a file it edits has exactly the rpath asked
    # for in LLVM's reading, and no page the mutant signed right is signed wrong after it
    # (tests/machotools.check_signature, the test's own reader of the signature)
    edited = with_rpaths(name, mutant, (RPATH,))
    if edited is None:
        return
    code, out, err = llvm(tmp_path, edited, "llvm-objdump-14", "--macho", "--rpaths")
    assert code == 0 and not err, err
    assert out.partition("\n")[2] == f"{RPATH}\n"
    assert set(check_signature(edited)) <= set(check_signature(mutant))
