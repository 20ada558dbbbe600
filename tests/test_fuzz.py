"""Fuzzing: mutated wheels, ELF files and recipes fail with a SplitterError, never a crash."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import platform
import re
import shutil
import struct
import subprocess
import sys
import warnings
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from builders import METADATA, WHEEL, make_wheel, record_hash
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from splitter.binaries.elf import analyse_elf
from splitter.binaries.macho import analyse_macho
from splitter.errors import BinaryError, InvalidWheel, RecipeError, SplitterError
from splitter.model import BinaryInfo, Recipe
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe

SHIPPED = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"
TAG = "cp311-cp311-manylinux_2_28_x86_64"
DIST = "executorch-1.5.1.dist-info"
FILENAME = f"executorch-1.5.1-{TAG}.whl"
LIB = "executorch/lib/libexecutorch.so"
VERSION_PY = "executorch/version.py"
ENTRY_POINTS = f"{DIST}/entry_points.txt"
OPERATORS = ("quantized_decomposed::add.out", "quantized_decomposed::mul.out")

# Deterministic in CI: the same examples every run, nothing remembered between runs.
FUZZ = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A tiny library shaped like an ExecuTorch kernel library: a static Kernel table handed to
# register_kernels (imported), a torch schema string, a SONAME, a RUNPATH and NEEDED libc.
KERNEL_SOURCE = r"""
typedef struct { const char *name; const char *key; void (*fn)(void); } Kernel;
typedef struct { const Kernel *data; unsigned long size; } Span;
extern void register_kernels(Span)
    __asm__("_ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE");
extern void torch_def(const char *) __asm__("_ZNR5torch7Library4_defEPKc");
static void add_out(void) {}
static void mul_out(void) {}
static const Kernel kernels[] = {
  {"quantized_decomposed::add.out", 0, add_out},
  {"quantized_decomposed::mul.out", "v1/6;0,1,2,3", mul_out},
};
__attribute__((constructor)) static void init(void) {
  Span span = {kernels, 2};
  register_kernels(span);
  torch_def("add.out(Tensor a) -> Tensor");
}
"""

SMALL_RECIPE = """\
[recipe]
project = "executorch"
default_version = "1.5.1"
supported_versions = ">=1.5,<1.6"

[packages.executorch-runtime]
summary = "runtime"

[packages.executorch-export]
summary = "export"
python = true

[[rules]]
glob = "executorch/lib/*.so*"
package = "executorch-runtime"
reason = "runtime libraries"

[[rules]]
glob = "executorch/include/**"
package = "executorch-runtime"
reason = "headers"

[[rules]]
glob = ["executorch/share/cmake/*.cmake", "executorch/lib/cmake/executorch/*.cmake"]
package = "executorch-runtime"
reason = "CMake config"

[[rules]]
glob = ["executorch/**", "executorch-*.dist-info/**"]
exclude = ["executorch/lib/**", "executorch/include/**", "executorch/share/cmake/**"]
package = "executorch-export"
reason = "the Python side"

[components]
runtime = { library = "libexecutorch.so" }

[system]
sonames = ["libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"]
"""


def small_files(lib: bytes) -> dict[str, bytes]:
    """The payload of the small executorch-like wheel, with `lib` as libexecutorch.so."""
    return {
        LIB: lib,
        "executorch/include/x.h": b"#pragma once\nint x(void);\n",
        "executorch/exir/__init__.py": b"from executorch.version import __version__\n",
        "executorch/kernels/quantized/libquantized_ops_aot_lib.so": b"not an ELF file\n",
        "executorch/share/cmake/executorch-config.cmake": b"set(EXECUTORCH_FOUND TRUE)\n",
        "executorch/lib/cmake/executorch/executorch-config.cmake": b"include(x)\n",
        VERSION_PY: b"__version__ = '1.5.1+cpu'\n",
        ENTRY_POINTS: b"[console_scripts]\nflatc = executorch.data.bin:flatc\n",
        # A non-ASCII name: zip flags it as UTF-8 (bit 11), a promise mutations can break.
        "executorch/data/naïve.txt": b"data\n",
    }


def compile_kernel_elf(directory: Path) -> bytes:
    """The kernel-shaped library built by the system C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the kernel-shaped ELF")
    source = directory / "kernels.c"
    source.write_text(KERNEL_SOURCE)
    output = directory / "libkernels.so"
    command = [
        compiler,
        "-O2",
        "-fPIC",
        "-shared",
        "-s",
        "-o",
        str(output),
        str(source),
        "-Wl,-soname,libexecutorch.so",
        "-Wl,--build-id=none",
        "-Wl,-z,noseparate-code",  # no page padding: mutations land on structure, not zeros
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN",
        "-Wl,--no-as-needed",
        "-lc",
    ]
    subprocess.run(command, check=True, capture_output=True)
    return output.read_bytes()


def find_system_elf() -> bytes:
    """A small shared library of the running system."""
    arch = f"{platform.machine()}-linux-gnu"
    for name in ("libdl.so.2", "libutil.so.1", "librt.so.1", "libm.so.6"):
        for directory in (f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64"):
            path = Path(directory) / name
            if path.is_file():
                return path.read_bytes()
    pytest.skip("no system shared library found")


@dataclass(frozen=True, slots=True)
class Env:
    """Everything the fuzz tests share: inputs built once, a scratch dir and an empty CWD."""

    kernel_elf: bytes
    system_elf: bytes
    wheel: Path
    recipe: Recipe
    recipe_path: Path
    scratch: Path
    cwd: Path

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints the arguments of a failing example; the ELF bytes would drown it.
        printer.text(f"Env({self.wheel})")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    """Build the ELF, the small wheel and its recipe once."""
    root = tmp_path_factory.mktemp("fuzz")
    kernel_elf = compile_kernel_elf(root)
    (root / "valid").mkdir()
    wheel = make_wheel(root / "valid", small_files(kernel_elf), tag=TAG)
    recipe_path = root / "small.toml"
    recipe_path.write_text(SMALL_RECIPE)
    for name in ("scratch", "cwd"):
        (root / name).mkdir()
    return Env(
        kernel_elf=kernel_elf,
        system_elf=find_system_elf(),
        wheel=wheel,
        recipe=load_recipe(recipe_path),
        recipe_path=recipe_path,
        scratch=root / "scratch",
        cwd=root / "cwd",
    )


# --- byte mutation, shared by zip archives and ELF files -------------------------------------

INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**63, 2**64 - 1)


Edit = tuple[str, int, int | bytes]


@dataclass(frozen=True, slots=True)
class Edits:
    """Byte edits as a short, replayable list: a failing example prints as its reproducer."""

    edits: tuple[Edit, ...]

    def apply(self, data: bytes) -> bytes:
        out = bytearray(data)
        for kind, offset, arg in self.edits:
            if kind == "xor":
                assert isinstance(arg, int)
                out[offset] ^= arg
            elif kind in ("set", "insert"):
                assert isinstance(arg, bytes)
                out[offset : offset + (len(arg) if kind == "set" else 0)] = arg
            elif kind == "delete":
                assert isinstance(arg, int)
                del out[offset : offset + arg]
            else:
                del out[offset:]
        return bytes(out)


@st.composite
def byte_edits(draw: st.DrawFn, size: int, regions: tuple[tuple[int, int], ...]) -> Edits:
    """1-4 edits in `regions`: xor, an aligned field set to an edge value, insert, delete, cut."""
    edits: list[Edit] = []
    for _ in range(draw(st.integers(1, 4))):
        if size == 0:
            break
        start, end = draw(st.sampled_from(((0, size), *regions)))
        start = min(start, size - 1)
        end = max(min(end, size), start + 1)
        kind = draw(st.sampled_from(("xor", "set", "insert", "delete", "truncate")))
        if kind == "set":
            # Headers are arrays of aligned little-endian fields: hit whole fields.
            width = draw(st.sampled_from((1, 2, 4, 8)))
            offset = start + width * draw(st.integers(0, (end - start - 1) // width))
            value = draw(st.sampled_from(INTERESTING) | st.integers(0, 2 ** (8 * width) - 1))
            edits.append((kind, offset, (value % 2 ** (8 * width)).to_bytes(width, "little")))
            size = max(size, offset + width)
            continue
        offset = draw(st.integers(start, end - 1))
        if kind == "xor":
            edits.append((kind, offset, draw(st.integers(1, 255))))
        elif kind == "insert":
            inserted = draw(st.binary(min_size=1, max_size=16))
            edits.append((kind, offset, inserted))
            size += len(inserted)
        elif kind == "delete":
            length = draw(st.integers(1, 64))
            edits.append((kind, offset, length))
            size -= min(length, size - offset)
        else:
            edits.append((kind, offset, 0))
            size = offset
    return Edits(tuple(edits))


def zip_regions(data: bytes) -> tuple[tuple[int, int], ...]:
    """The end record, and the fixed fields and the name of each central and local header."""
    end = data.rfind(b"PK\x05\x06")
    count, _, central = struct.unpack_from("<HII", data, end + 10)
    regions = [(end, end + 22)]
    for _ in range(count):
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, central + 28)
        (local,) = struct.unpack_from("<I", data, central + 42)
        (local_name_len,) = struct.unpack_from("<H", data, local + 26)
        regions += [
            (central, central + 46),
            (central + 46, central + 46 + name_len),
            (local, local + 30),
            (local + 30, local + 30 + local_name_len),
        ]
        central += 46 + name_len + extra_len + comment_len
    return tuple(regions)


SECTIONS = (".dynamic", ".dynstr", ".dynsym", ".gnu.hash", ".rela.dyn", ".rodata")


def elf_regions(data: bytes) -> tuple[tuple[int, int], ...]:
    """ELF header, each program header, and the headers and bytes of the sections read."""
    elf = ELFFile(io.BytesIO(data))
    header = elf.header
    regions = [(0, header["e_ehsize"])]
    for index in range(header["e_phnum"]):
        start = header["e_phoff"] + index * header["e_phentsize"]
        regions.append((start, start + header["e_phentsize"]))
    for index, section in enumerate(elf.iter_sections()):
        if section.name in SECTIONS:
            start = header["e_shoff"] + index * header["e_shentsize"]
            regions.append((start, start + header["e_shentsize"]))
            regions.append((section["sh_offset"], section["sh_offset"] + section["sh_size"]))
    return tuple(r for r in regions if r[0] < r[1] <= len(data))


# --- member mutation: a wheel described as members, written with zipfile ----------------------


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    data: bytes
    mode: int = 0o100644

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        data = self.data if len(self.data) <= 80 else f"<{len(self.data)} bytes {sha(self.data)}>"
        printer.text(f"Member({self.name!r}, {data!r}, {self.mode:#o})")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Archive:
    """Wheel members plus RECORD rows (or raw RECORD bytes, which win)."""

    members: tuple[Member, ...]
    rows: tuple[tuple[str, ...], ...]
    raw_record: bytes | None = None

    def record(self) -> bytes:
        if self.raw_record is not None:
            return self.raw_record
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(self.rows)
        return buffer.getvalue().encode("utf-8", "surrogateescape")


def base_archive(lib: bytes) -> Archive:
    """The members and RECORD of the small valid wheel."""
    files = {
        **small_files(lib),
        f"{DIST}/METADATA": METADATA.format(name="executorch", version="1.5.1").encode(),
        f"{DIST}/WHEEL": WHEEL.format(tag=TAG).encode(),
    }
    members = tuple(Member(name, data) for name, data in files.items())
    rows = tuple((n, record_hash(d), str(len(d))) for n, d in files.items())
    return Archive(members, (*rows, (f"{DIST}/RECORD", "", "")))


def write_archive(archive: Archive, path: Path) -> Path:
    """Write the members and RECORD verbatim, duplicates and odd names included."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Duplicate name", UserWarning)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
            for member in (*archive.members, Member(f"{DIST}/RECORD", archive.record())):
                info = zipfile.ZipInfo(member.name, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = member.mode << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(info, member.data)
    return path


NAME_PARTS = (
    "executorch",
    "lib",
    "include",
    "..",
    ".",
    "",
    "libexecutorch.so",
    "C:",
    "c:\\x",
    "a\\b",
    "\\",
    "x\x00y",
    "é",
    "\u202e",
    "[/x]",
    "*",
    "?",
    DIST,
    "RECORD",
    "x.dist-info",
    " ",
    "x,y",
    '"',
    "\n",
)
weird_names = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(("", "", "/", "//", "../", "C:/", "\\")),
    st.lists(st.sampled_from(NAME_PARTS) | st.text(max_size=6), min_size=1, max_size=4),
)
weird_fields = st.sampled_from(
    (
        "",
        "sha256=",
        "md5=abc",
        "sha256=" + "A" * 43,
        "-1",
        "0",
        "1e3",
        "1_0",
        "99999999999999999999",
        "\u0661",
        '"',
        ",",
        "\n",
        "\r",
        "\x00",
    )
) | st.text(max_size=12)
weird_lines = st.sampled_from(
    (
        "",
        ":",
        "Name: six",
        "Name: executorch\x00",
        "Name: " + "é" * 3,
        "Version: 1.5.1+cpu",
        "Version: 6.6.6",
        "Version: not a version",
        "Metadata-Version: 9.9",
        "Metadata-Version: 2.4",
        "Requires-Dist: torch (>=",
        "Requires-Dist: numpy; extra == 'x'",
        "Provides-Extra: ---",
        "License-Expression: MIT AND (",
        "Project-URL: Homepage",
        "Wheel-Version: 2.0",
        "Wheel-Version: 1.0",
        "Wheel-Version:",
        "Tag: py3-none-any",
        "[console_scripts]",
        "[console_scripts",
        "flatc",
        "= x",
        " continued",
    )
) | st.text(max_size=24)
# RECORD lines joined by hand, so nothing quotes a comma, quote, CR or NUL inside a field.
record_lines = st.lists(weird_fields | weird_names, min_size=1, max_size=4).map(",".join)


@st.composite
def edited_text(draw: st.DrawFn, data: bytes, new_lines: st.SearchStrategy[str]) -> bytes:
    """`data` (UTF-8 text) with lines dropped, replaced or added, or raw bytes appended."""
    lines = data.decode("utf-8", "surrogateescape").splitlines()
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines)))
        kind = draw(st.sampled_from(("drop", "replace", "insert", "duplicate")))
        if kind == "insert" or index == len(lines):
            lines.insert(index, draw(new_lines))
        elif kind == "drop":
            del lines[index]
        elif kind == "replace":
            lines[index] = draw(new_lines)
        else:
            lines.insert(index, lines[index])
    text = "\n".join(lines).encode("utf-8", "surrogateescape")
    return text + draw(st.sampled_from((b"", b"\n", b"\xff\xfe", b"\r\n\x00")))


def find(archive: Archive, name: str, default: int) -> int:
    """Index of member `name`, or `default` once an earlier edit renamed it."""
    return next((i for i, m in enumerate(archive.members) if m.name == name), default)


def with_member(archive: Archive, index: int, member: Member, relist: bool) -> Archive:
    """Replace member `index`; with `relist`, its RECORD row follows its new name and bytes."""
    old = archive.members[index]
    members = (*archive.members[:index], member, *archive.members[index + 1 :])
    if not relist:
        return replace(archive, members=members)
    row = (member.name, record_hash(member.data), str(len(member.data)))
    rows = tuple(row if r and r[0] == old.name else r for r in archive.rows)
    return replace(archive, members=members, rows=rows)


MEMBER_EDITS = (
    "record",
    "raw-record",
    "text",
    "rename",
    "add",
    "content",
    "version",
    "elf",
    "mode",
)


@st.composite
def mutated_archive(draw: st.DrawFn, base: Archive, elf: bytes) -> Archive:
    """`base` with 1-3 member-level edits: RECORD, METADATA, WHEEL, names, contents, modes."""
    archive = base
    texts = (f"{DIST}/METADATA", f"{DIST}/WHEEL", ENTRY_POINTS)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(MEMBER_EDITS))
        index = draw(st.integers(0, len(archive.members) - 1))
        member = archive.members[index]
        relist = draw(st.booleans())
        if kind == "record" and archive.rows:
            rows = list(archive.rows)
            at = draw(st.integers(0, len(rows) - 1))
            edit = draw(st.sampled_from(("drop", "duplicate", "field", "extra", "short")))
            if edit == "drop":
                del rows[at]
            elif edit == "duplicate":
                rows.insert(at, rows[at])
            elif edit == "field" and rows[at]:
                field = draw(st.integers(0, len(rows[at]) - 1))
                value = draw(weird_fields | weird_names)
                rows[at] = (*rows[at][:field], value, *rows[at][field + 1 :])
            elif edit == "extra":
                rows[at] = (*rows[at], draw(weird_fields))
            else:
                rows[at] = rows[at][:-1]
            archive = replace(archive, rows=tuple(rows))
        elif kind == "raw-record":
            archive = replace(archive, raw_record=draw(edited_text(archive.record(), record_lines)))
        elif kind == "text":
            index = find(archive, draw(st.sampled_from(texts)), index)
            member = archive.members[index]
            data = draw(edited_text(member.data, weird_lines))
            archive = with_member(archive, index, Member(member.name, data), relist)
        elif kind == "rename":
            name = draw(weird_names)
            archive = with_member(archive, index, Member(name, member.data), relist)
        elif kind == "add":
            added = Member(draw(weird_names), draw(st.binary(max_size=32)))
            archive = replace(archive, members=(*archive.members, added))
            if relist:
                row = (added.name, record_hash(added.data), str(len(added.data)))
                archive = replace(archive, rows=(*archive.rows, row))
        elif kind == "content":
            data = draw(st.binary(max_size=64) | st.just(b"\x7fELF" + bytes(60)))
            archive = with_member(archive, index, Member(member.name, data), relist)
        elif kind == "version":
            value = draw(st.binary(max_size=12) | st.text(max_size=12).map(str.encode))
            quote = draw(st.sampled_from((b"'", b'"')))
            data = b"__version__ = " + quote + value + quote + b"\n"
            index = find(archive, VERSION_PY, index)
            archive = with_member(archive, index, Member(VERSION_PY, data), True)
        elif kind == "elf":
            data = draw(byte_edits(len(elf), elf_regions(elf))).apply(elf)
            archive = with_member(archive, find(archive, LIB, index), Member(LIB, data), True)
        else:
            mode = draw(st.sampled_from((0o120777, 0o100755, 0o040755, 0o010644, 0, 0o177777)))
            archive = with_member(archive, index, Member(member.name, member.data, mode), False)
    return archive


# --- the oracles --------------------------------------------------------------------------------


# The "what is wrong" head of a message, without the values that make every message unique.
WHAT = re.compile(r" \(|:| [0-9]|, found")


def record(outcome: str) -> None:
    """Count `outcome` for --hypothesis-show-statistics: how far the mutants get."""
    if currently_in_test_context():
        event(outcome)


def plan_outcome(
    wheel: Path, recipe: Recipe, same_files_as: Path | None = None, record_holds: bool = False
) -> int:
    """Plan in-process: 0 on success, else the SplitterError's exit code; anything else raises.
    With `same_files_as` (the wheel a byte mutant was made from): a mutant that plans must
    hold the same files with the same bytes, since RECORD's digests are checked; one that
    changed any is what must be refused. With `record_holds` (a member mutant): a mutant that
    plans must have a RECORD that lists exactly its files with their digests and sizes, read
    independently (zipfile and csv); one whose RECORD does not is what must be refused."""
    try:
        plan = make_plan(wheel, recipe)
    except SplitterError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        what = WHAT.split(str(exc), maxsplit=1)[0]
        record(f"{type(exc).__name__}: {what}")
        return exc.exit_code
    record("planned")
    # build_version is written into CMake comments and conda/wheel metadata verbatim.
    assert plan.build_version.isprintable() and plan.build_version.strip() == plan.build_version
    if same_files_as is not None:
        assert _contents(wheel) == _contents(same_files_as), "a mutant changed a file and planned"
    if record_holds:
        _assert_record_holds(wheel)
    return 0


def _assert_record_holds(wheel: Path) -> None:
    """RECORD names every file once with its sha256 and size (RECORD itself without them)."""
    with zipfile.ZipFile(wheel) as archive:
        files = {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
    (name,) = [n for n in files if n.endswith(".dist-info/RECORD")]
    rows = list(csv.reader(io.StringIO(files[name].decode("utf-8"))))
    listed = {row[0]: row[1:] for row in rows if row}
    assert set(listed) == set(files), "a mutant planned with RECORD not listing its files"
    for path, data in files.items():
        if path == name:
            continue
        digest, size = listed[path][0], listed[path][1]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}", f"a mutant planned with a wrong digest for {path}"
        assert size in ("", str(len(data))), f"a mutant planned with a wrong size for {path}"


def _contents(wheel: Path) -> dict[str, str]:
    """Each member's name and sha256, read by zipfile (an independent reader)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            info.filename: hashlib.sha256(archive.read(info)).hexdigest()
            for info in archive.infolist()
            if not info.is_dir()
        }


def cli_outcome(env: Env, wheel: Path) -> int:
    """`splitter plan --recipe R WHEEL` run in an empty CWD: one `error:` line or success."""
    result = subprocess.run(
        [sys.executable, "-m", "splitter", "plan", "--recipe", str(env.recipe_path), str(wheel)],
        cwd=env.cwd,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert list(env.cwd.iterdir()) == [], "the CLI wrote into its working directory"
    if result.returncode == 0:
        assert result.stderr == ""
        assert FILENAME in result.stdout
        return 0
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), result.stderr
    assert sum(line.startswith("error:") for line in lines) == 1, result.stderr
    assert result.stdout == "", result.stdout
    return result.returncode


def scratch_wheel(env: Env, data: bytes) -> Path:
    path = env.scratch / FILENAME
    path.write_bytes(data)
    return path


# --- 1. wheels --------------------------------------------------------------------------------


def test_small_wheel_plans(env: Env) -> None:
    """The unmutated wheel splits cleanly: without this baseline the fuzzing proves nothing."""
    plan = make_plan(env.wheel, env.recipe)
    assert plan.build_version == "1.5.1+cpu"
    assert [p.name for p in plan.packages] == ["executorch-runtime", "executorch-export"]
    assert plan.owners[LIB] == ("executorch-runtime", 0)
    assert plan.package("executorch-runtime").cmake_components == ("runtime",)
    (binary,) = plan.binaries
    assert binary.path == LIB and binary.soname == "libexecutorch.so"
    assert binary.et_operators == OPERATORS and binary.needed == ("libc.so.6",)
    assert plan.package("executorch-runtime").system_sonames == ("libc.so.6",)
    assert cli_outcome(env, env.wheel) == 0


def test_unmutated_archive_is_the_valid_wheel(env: Env) -> None:
    """The member-level writer reproduces a wheel that plans, so every failure is the edit's."""
    wheel = write_archive(base_archive(env.kernel_elf), env.scratch / FILENAME)
    assert plan_outcome(wheel, env.recipe) == 0


@settings(FUZZ, max_examples=1500)
@given(data=st.data())
def test_mutated_zip_bytes(env: Env, data: st.DataObject) -> None:
    """Flipped, overwritten, inserted, deleted or truncated bytes of the wheel file: refused
    with a SplitterError, or, if planned, holding exactly the original's files."""
    raw = env.wheel.read_bytes()
    wheel = scratch_wheel(env, data.draw(byte_edits(len(raw), zip_regions(raw))).apply(raw))
    plan_outcome(wheel, env.recipe, same_files_as=env.wheel)


@settings(FUZZ, max_examples=1200)
@given(data=st.data())
def test_mutated_wheel_members(env: Env, data: st.DataObject) -> None:
    """Edited RECORD, METADATA, WHEEL and entry points, odd member names, contents and modes:
    refused with a SplitterError, or, if planned, with a RECORD that holds for every file."""
    archive = data.draw(mutated_archive(base_archive(env.kernel_elf), env.kernel_elf))
    plan_outcome(write_archive(archive, env.scratch / FILENAME), env.recipe, record_holds=True)


@settings(FUZZ, max_examples=15)
@given(data=st.data())
def test_cli_on_mutated_zip_bytes(env: Env, data: st.DataObject) -> None:
    """The CLI reports a mutated wheel file as the in-process plan does, in one `error:` line."""
    raw = env.wheel.read_bytes()
    wheel = scratch_wheel(env, data.draw(byte_edits(len(raw), zip_regions(raw))).apply(raw))
    assert cli_outcome(env, wheel) == plan_outcome(wheel, env.recipe)


@settings(FUZZ, max_examples=20)
@given(data=st.data())
def test_cli_on_mutated_wheel_members(env: Env, data: st.DataObject) -> None:
    """The CLI reports a member-mutated wheel as the in-process plan does."""
    archive = data.draw(mutated_archive(base_archive(env.kernel_elf), env.kernel_elf))
    wheel = write_archive(archive, env.scratch / FILENAME)
    assert cli_outcome(env, wheel) == plan_outcome(wheel, env.recipe)


# --- 2. ELF files ---------------------------------------------------------------------------------


def test_kernel_elf_is_analysed(env: Env) -> None:
    """The unmutated kernel library yields its operators, so mutations start from a full parse."""
    info = analyse_elf(LIB, env.kernel_elf)
    assert info.registry == "uses" and info.et_operators == OPERATORS
    assert info.torch_schemas == ("add.out",) and info.runpath == ("$ORIGIN",)


@pytest.mark.parametrize("source", ["kernel", "system"])
@settings(FUZZ, max_examples=1200)
@given(data=st.data())
def test_mutated_elf(env: Env, source: str, data: st.DataObject) -> None:
    """analyse_elf returns a BinaryInfo or raises BinaryError, whatever the bytes."""
    original = env.kernel_elf if source == "kernel" else env.system_elf
    elf = data.draw(byte_edits(len(original), elf_regions(original))).apply(original)
    try:
        info = analyse_elf(LIB, elf)
    except BinaryError as exc:
        assert str(exc).endswith(f": {LIB}"), str(exc)
        record("BinaryError")
        return
    record("analysed" + (" with operators" if info.et_operators else ""))
    assert isinstance(info, BinaryInfo)


# --- 3. recipes ----------------------------------------------------------------------------------

WRONG_VALUES = (
    "1",
    "-1",
    "true",
    "1.5",
    "inf",
    "nan",
    "1979-05-27",
    "[]",
    "{}",
    "[[]]",
    "[1, 2]",
    '["a", 1]',
    "{ a = 1 }",
    "{ library = 1 }",
    '{ library = "libexecutorch.so", platforms = "manylinux_*" }',
    '""',
    '"x"',
    '"**"',
    '"*"',
    '"[/x]"',
    '"(?"',
    '"manylinux_*"',
    '">=1.5,<1.6"',
    '"==9"',
    '"1.5.1"',
    '"not a version"',
    '"executorch-runtime"',
    '"executorch/lib/libexecutorch.so"',
    "'''multi\nline'''",
)
HEADERS = (
    "[recipe]",
    "[packages]",
    "[packages.x]",
    "[[packages]]",
    "[rules]",
    "[[rules]]",
    "[components]",
    "[components.x]",
    "[[components]]",
    "[externals]",
    "[externals.x]",
    "[[externals]]",
    "[system]",
    "[system.conda]",
    "[conda]",
    "[conda.names]",
    "[process_exclusive]",
    "[[process_exclusive]]",
    "[unknown]",
)
KEYS = (
    "project",
    "default_version",
    "supported_versions",
    "summary",
    "python",
    "glob",
    "exclude",
    "package",
    "reason",
    "library",
    "platforms",
    "sonames",
    "site_dirs",
    "conda",
    "pip",
    "first",
    "second",
    "recipe",
    "rules",
    "components",
    "externals",
    "process_exclusive",
)


@st.composite
def mutated_recipe(draw: st.DrawFn, text: str) -> bytes:
    """`text` with lines dropped or duplicated, values retyped, keys and headers swapped."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        line = lines[index]
        kind = draw(
            st.sampled_from(("drop", "duplicate", "value", "key", "header", "insert", "char"))
        )
        if kind == "drop":
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, line)
        elif kind == "value" and "=" in line:
            lines[index] = f"{line.split('=', 1)[0]}= {draw(st.sampled_from(WRONG_VALUES))}"
        elif kind == "key" and "=" in line:
            lines[index] = f"{draw(st.sampled_from(KEYS))} ={line.split('=', 1)[1]}"
        elif kind == "header":
            lines[index] = draw(st.sampled_from(HEADERS))
        elif kind == "insert":
            key = draw(st.sampled_from(KEYS) | st.text(max_size=8))
            value = draw(st.sampled_from(WRONG_VALUES) | st.text(max_size=8))
            lines.insert(index, f"{key} = {value}")
        elif line:
            at = draw(st.integers(0, len(line)))
            char = draw(st.sampled_from("[]{}\"=,#.\\'") | st.characters())
            lines[index] = line[:at] + char + line[at + 1 :]
        if not lines:
            lines = [""]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    return data + draw(st.sampled_from((b"\n", b"", b"\xff")))


def check_recipe(env: Env, data: bytes) -> None:
    """load_recipe gives a Recipe or RecipeError; a loaded one plans or fails with SplitterError."""
    path = env.scratch / "recipe.toml"
    path.write_bytes(data)
    try:
        recipe = load_recipe(path)
    except RecipeError as exc:
        assert str(path) in str(exc), str(exc)
        record("RecipeError")
        return
    assert isinstance(recipe, Recipe)
    plan_outcome(env.wheel, recipe)


@settings(FUZZ, max_examples=500)
@given(data=st.data())
def test_mutated_shipped_recipe(env: Env, data: st.DataObject) -> None:
    """Edits of recipes/executorch.toml."""
    check_recipe(env, data.draw(mutated_recipe(SHIPPED.read_text(encoding="utf-8"))))


@settings(FUZZ, max_examples=500)
@given(data=st.data())
def test_mutated_small_recipe(env: Env, data: st.DataObject) -> None:
    """Edits of the small recipe, which the small wheel satisfies, so plans get far."""
    check_recipe(env, data.draw(mutated_recipe(SMALL_RECIPE)))


def test_rule_matching_nothing_is_named(env: Env) -> None:
    """A rule whose glob matches no file of the wheel is reported by its index."""
    env.recipe_path.with_name("nothing.toml").write_text(
        SMALL_RECIPE.replace(
            "[components]",
            '[[rules]]\nglob = "executorch/nothing/**"\npackage = "executorch-export"\n'
            'reason = "stale"\n\n[components]',
        )
    )
    recipe = load_recipe(env.recipe_path.with_name("nothing.toml"))
    with pytest.raises(RecipeError, match=r"rule matches no file of .*\(rules\[4\], glob"):
        make_plan(env.wheel, recipe)


@pytest.mark.parametrize(
    ("platforms", "required"),
    [
        pytest.param('["manylinux_*"]', True, id="required-here"),
        pytest.param('["macosx_*"]', False, id="required-elsewhere"),
        pytest.param("[]", False, id="optional"),
    ],
)
def test_missing_component_library(env: Env, platforms: str, required: bool) -> None:
    """A component's library must ship on the platforms it names, and only there."""
    path = env.recipe_path.with_name(f"component-{required}-{len(platforms)}.toml")
    path.write_text(
        SMALL_RECIPE.replace(
            "[system]",
            f'missing = {{ library = "libexecutorch_missing.so", platforms = {platforms} }}\n\n'
            "[system]",
        )
    )
    recipe = load_recipe(path)
    if not required:
        assert make_plan(env.wheel, recipe).package("executorch-runtime").cmake_components == (
            "runtime",
        )
        return
    with pytest.raises(RecipeError) as info:
        make_plan(env.wheel, recipe)
    message = str(info.value)
    assert "component missing needs libexecutorch_missing.so" in message
    assert f"(components.missing): {path}:" in message


# --- 4. what the fuzzing found, pinned as plain cases ---------------------------------------------

SECTION_FIELDS = {"sh_offset": (24, 8), "sh_size": (32, 8), "sh_link": (40, 4)}
HUGE = 2**64 - 1


def set_section_field(data: bytes, section: str, field: str, value: int) -> bytes:
    """`data` with one field of the header of `section` overwritten."""
    elf = ELFFile(io.BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == section)
    at = elf.header["e_shoff"] + index * elf.header["e_shentsize"] + SECTION_FIELDS[field][0]
    out = bytearray(data)
    out[at : at + SECTION_FIELDS[field][1]] = value.to_bytes(SECTION_FIELDS[field][1], "little")
    return bytes(out)


def set_in_section(data: bytes, section: str, offset: int, value: bytes) -> bytes:
    """`data` with bytes at `offset` inside the contents of `section` overwritten."""
    at = ELFFile(io.BytesIO(data)).get_section_by_name(section)["sh_offset"] + offset
    return data[:at] + value + data[at + len(value) :]


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(
            lambda d: set_section_field(d, ".dynstr", "sh_offset", HUGE), id="seek-overflow"
        ),
        pytest.param(
            lambda d: set_section_field(d, ".dynstr", "sh_size", HUGE), id="read-overflow"
        ),
        pytest.param(lambda d: d[:32] + HUGE.to_bytes(8, "little") + d[40:], id="e_phoff-overflow"),
        pytest.param(
            lambda d: set_section_field(d, ".dynamic", "sh_link", 0), id="dynamic-links-null"
        ),
        # GNU hash header: nbuckets, symoffset, bloom_size, bloom_shift (u32 each).
        pytest.param(lambda d: set_in_section(d, ".gnu.hash", 8, bytes(4)), id="empty-bloom"),
    ],
)
def test_corrupt_elf_is_a_binary_error(env: Env, corrupt: Any) -> None:
    """OverflowError, AssertionError and ZeroDivisionError from pyelftools become BinaryError."""
    with pytest.raises(BinaryError, match=r"^cannot read ELF \(.+\): executorch/lib/libx\.so$"):
        analyse_elf("executorch/lib/libx.so", corrupt(env.kernel_elf))


def central_header(data: bytes, name: str) -> int:
    """Offset of the central directory header of member `name`."""
    at = data.find(b"PK\x01\x02")
    while at != -1:
        (name_len,) = struct.unpack_from("<H", data, at + 28)
        if data[at + 46 : at + 46 + name_len] == name.encode():
            return at
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} not in the central directory")


NAIVE = "executorch/data/naïve.txt"


def set_central(field: int, value: bytes, member: str = NAIVE) -> Any:
    """An edit of one field of `member`'s central directory header."""

    def edit(data: bytes) -> bytes:
        at = central_header(data, member) + field
        return data[:at] + value + data[at + len(value) :]

    return edit


def break_local_name(data: bytes) -> bytes:
    """The local header's copy of the non-ASCII name made invalid UTF-8."""
    local = struct.unpack_from("<I", data, central_header(data, NAIVE) + 42)[0]
    at = data.index("ï".encode(), local)
    return data[:at] + b"\xff" + data[at + 1 :]


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        pytest.param(
            set_central(14, (0x5C01).to_bytes(2, "little")),  # 2026-00-01
            f"entry has an impossible date (month 0): {NAIVE}",
            id="month-0",
        ),
        pytest.param(
            set_central(46 + len("executorch/data/na"), b"\xff"),
            "corrupt or truncated wheel (an entry name flagged UTF-8 is not: invalid start byte)",
            id="central-name-not-utf8",
        ),
        pytest.param(
            break_local_name,
            "corrupt entry in the wheel ('utf-8' codec can't decode byte 0xff",
            id="local-name-not-utf8",
        ),
        pytest.param(
            set_central(8, b"\x01\x08"),  # general purpose flags: encrypted | UTF-8
            f"encrypted entry in wheel (wheels cannot be encrypted): {NAIVE}",
            id="encrypted",
        ),
    ],
)
def test_corrupt_zip_is_invalid(env: Env, corrupt: Any, message: str) -> None:
    """Zip-level damage zipfile reports as ValueError, UnicodeDecodeError or RuntimeError."""
    wheel = scratch_wheel(env, corrupt(env.wheel.read_bytes()))
    with pytest.raises(InvalidWheel) as info:
        make_plan(wheel, env.recipe)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param(
            "executorch/x\r.py,sha256=,1", "RECORD row 13 has 1 fields, not 3", id="bare-CR"
        ),
        pytest.param(
            "x" * 200_000 + ",,", "RECORD is not valid CSV (field larger", id="huge-field"
        ),
    ],
)
def test_record_that_csv_refuses(env: Env, line: str, message: str) -> None:
    """RECORD text the csv module raises csv.Error on is an invalid wheel."""
    archive = base_archive(env.kernel_elf)
    archive = replace(archive, raw_record=archive.record() + line.encode() + b"\n")
    with pytest.raises(InvalidWheel, match=re.escape(message)):
        make_plan(write_archive(archive, env.scratch / FILENAME), env.recipe)


@pytest.mark.parametrize(
    "assignment",
    [
        pytest.param(b"__version__ = '\x80'", id="not-utf8"),
        pytest.param(b"__version__ = '1.5.1\nset(X 1)'", id="newline"),
    ],
)
def test_odd_version_py_falls_back(env: Env, assignment: bytes) -> None:
    """A __version__ that is not a plain version is ignored, not decoded or copied into CMake."""
    archive = base_archive(env.kernel_elf)
    index = find(archive, VERSION_PY, -1)
    archive = with_member(archive, index, Member(VERSION_PY, assignment + b"\n"), True)
    plan = make_plan(write_archive(archive, env.scratch / FILENAME), env.recipe)
    assert plan.build_version == "1.5.1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            ('summary = "runtime"', 'summary = "runtime"\nsummary = "again"'),
            'key "summary" is set twice in [packages.executorch-runtime]): {path}:8',
            id="key-repeated-in-table",
        ),
        pytest.param(
            ("[system]", '[[externals]]\nconda = "x"\n\n[system]'),
            "expected dict, got list (recipe key externals)",
            id="externals-array",
        ),
        pytest.param(
            ("[recipe]", "process_exclusive = 1\n\n[recipe]"),
            "expected list, got int (recipe key process_exclusive)",
            id="process-exclusive-int",
        ),
    ],
)
def test_recipe_shapes_refused_by_key(env: Env, change: tuple[str, str], message: str) -> None:
    """A key repeated in a table (tomllib names neither: the message names the key and
    the line of its second assignment) and tables of the wrong kind are RecipeErrors."""
    assert SMALL_RECIPE.count(change[0]) == 1
    path = env.scratch / "recipe.toml"
    path.write_text(SMALL_RECIPE.replace(*change), encoding="utf-8")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert message.format(path=path) in str(info.value) and str(path) in str(info.value)


# --- 4. Mach-O files --------------------------------------------------------------------------

MACHO = (
    "executorch/lib/libexecutorch_etdump.dylib",
    "executorch/lib/libexecutorch_kernels_quantized.dylib",  # kernel tables, chained fixups
)


@pytest.fixture(scope="module")
def dylibs(real_wheel_macos: Path) -> dict[str, bytes]:
    """Two real arm64 dylibs of the macOS wheel, read once."""
    with zipfile.ZipFile(real_wheel_macos) as archive:
        return {name: archive.read(name) for name in MACHO}


def macho_regions(data: bytes) -> tuple[tuple[int, int], ...]:
    """The Mach-O header and each load command (sizes, counts, offsets, names, fixups and the
    signature's linkedit_data all live there), read with struct alone."""
    count, size = struct.unpack_from("<II", data, 16)
    regions, offset = [(0, 32)], 32
    for _ in range(count):
        _, length = struct.unpack_from("<II", data, offset)
        regions.append((offset, offset + length))
        offset += length
    assert offset == 32 + size
    return tuple(regions)


@pytest.mark.integration
@pytest.mark.parametrize("name", MACHO, ids=lambda n: Path(n).stem)
@settings(FUZZ, max_examples=1000)
@given(data=st.data())
def test_mutated_macho(dylibs: dict[str, bytes], name: str, data: st.DataObject) -> None:
    """analyse_macho of a mutated real dylib (its header and load commands hit, or any byte)
    gives a BinaryInfo, equal to the original's when the edit left what it reads alone, or a
    BinaryError naming the file: never another exception."""
    original = dylibs[name]
    mutated = data.draw(byte_edits(len(original), macho_regions(original))).apply(original)
    try:
        info = analyse_macho(name, mutated)
    except BinaryError as exc:
        assert str(exc).endswith(f": {name}"), str(exc)
        record("BinaryError")
        return
    assert isinstance(info, BinaryInfo)
    record("analysed" + (" as the original" if info == analyse_macho(name, original) else ""))


def _load_command(data: bytes, wanted: int) -> int:
    """The offset of the first load command `wanted` of a thin 64-bit Mach-O (struct alone)."""
    count = struct.unpack_from("<I", data, 16)[0]
    offset = 32
    for _ in range(count):
        command, size = struct.unpack_from("<II", data, offset)
        if command == wanted:
            return offset
        offset += size
    raise AssertionError(f"no load command {wanted:#x}")


@pytest.mark.integration
def test_chained_fixups_pointing_past_their_data(dylibs: dict[str, bytes]) -> None:
    """A random search found it: the chained fixups header's starts_offset pointing past the
    LC_DYLD_CHAINED_FIXUPS data made the reader raise struct.error; it is refused by name."""
    name = "executorch/lib/libexecutorch_kernels_quantized.dylib"
    data = bytearray(dylibs[name])
    dataoff = struct.unpack_from("<I", data, _load_command(bytes(data), 0x80000034) + 8)[0]
    struct.pack_into("<I", data, dataoff + 4, 0x00FFFFF0)  # starts_offset: far past the file
    with pytest.raises(BinaryError, match=r"chained fixups offset .* points past their data"):
        analyse_macho(name, bytes(data))
