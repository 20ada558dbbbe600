"""The macOS arm64 wheel (Mach-O): analysis checked against LLVM's otool and an independent
chained-fixup walk (tests/machotools.py), and the plan of the whole wheel."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from builders import rewrite_wheel
from machotools import check_signature, kernel_table_entries

from splitter.binaries.macho import analyse_macho, is_macho
from splitter.binaries.machoedit import with_rpaths
from splitter.binaries.machoread import fixups, read_macho, symbols
from splitter.binaries.relocate import set_macho_rpaths
from splitter.binaries.resolve import find_unresolved
from splitter.errors import BinaryError, MissingToolError
from splitter.model import BinaryInfo, Plan
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.conda.meta import conda_depends

pytestmark = pytest.mark.integration

RUNTIME, QUANTIZED, EXPORT = (
    "executorch-runtime",
    "executorch-kernels-quantized",
    "executorch-export",
)
LIB = "executorch/lib/"
PLUGIN = "executorch/kernels/quantized/libquantized_ops_aot_lib.dylib"
CUSTOM_OPS = "executorch/extension/llm/custom_ops/libcustom_ops_aot_lib.dylib"
QLIB = f"{LIB}libexecutorch_kernels_quantized.dylib"
TORCHAO = f"{LIB}libexecutorch_kernels_torchao.dylib"
# Kernels in static tables, measured (FACTS.md): the Linux counts.
TABLES = {
    f"{LIB}libexecutorch.dylib": 28,
    f"{LIB}libexecutorch_kernels_optimized.dylib": 212,
    QLIB: 19,
    PLUGIN: 0,
}
REGISTER_KERNELS = "__ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian: llvm-14)")
    return found


@pytest.fixture(scope="module")
def machos(real_wheel_macos: Path) -> dict[str, bytes]:
    """Every Mach-O file of the wheel, by wheel path."""
    out = {}
    with zipfile.ZipFile(real_wheel_macos) as archive:
        for name in archive.namelist():
            with archive.open(name) as handle:
                if is_macho(handle.read(4)):
                    out[name] = archive.read(name)
    return out


@pytest.fixture(scope="module")
def infos(machos: dict[str, bytes]) -> dict[str, BinaryInfo]:
    return {path: analyse_macho(path, data) for path, data in machos.items()}


@pytest.fixture(scope="module")
def macos_plan(real_wheel_macos: Path) -> Plan:
    return make_plan(real_wheel_macos, load_recipe())


def otool_load_commands(path: Path) -> dict[str, list[str]]:
    """`llvm-otool -l`: each LC_ID_DYLIB / LC_LOAD*_DYLIB name and LC_RPATH path, in order."""
    text = subprocess.run(
        [tool("llvm-otool-14"), "-l", str(path)], capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, list[str]] = {}
    command = ""
    for line in text.splitlines():
        field = line.split()
        if field[:1] == ["cmd"]:
            command = field[1]
        elif field[:1] in (["name"], ["path"]) and "(offset" in line:
            value = re.match(r"\s*(?:name|path) (.*) \(offset \d+\)", line)
            assert value is not None, line
            out.setdefault(command, []).append(value.group(1))
    return out


def test_wheel_has_the_measured_machos(machos: dict[str, bytes]) -> None:
    libs = sorted(p.removeprefix(LIB) for p in machos if p.startswith(LIB))
    assert len(machos) == 19
    assert libs == [
        "libexecutorch.dylib",
        "libexecutorch_backend_coreml.dylib",
        "libexecutorch_backend_mlx.dylib",
        "libexecutorch_backend_xnnpack.dylib",
        "libexecutorch_etdump.dylib",
        "libexecutorch_kernels_optimized.dylib",
        "libexecutorch_kernels_quantized.dylib",
        "libexecutorch_kernels_torchao.dylib",
        "libexecutorch_threadpool.dylib",
    ]


def test_load_commands_match_llvm_otool(
    machos: dict[str, bytes], infos: dict[str, BinaryInfo], tmp_path: Path
) -> None:
    for path, data in sorted(machos.items()):
        copy = tmp_path / Path(path).name
        copy.write_bytes(data)
        seen = otool_load_commands(copy)
        info = infos[path]
        assert info.soname == "".join(seen.get("LC_ID_DYLIB", [])), path
        loads = [
            name
            for command, names in seen.items()
            if command in ("LC_LOAD_DYLIB", "LC_LOAD_WEAK_DYLIB", "LC_REEXPORT_DYLIB")
            for name in names
        ]
        assert sorted(info.needed) == sorted(loads), path
        assert list(info.weak) == seen.get("LC_LOAD_WEAK_DYLIB", []), path
        assert list(info.runpath) == seen.get("LC_RPATH", []), path
        assert info.machine == "CPU_TYPE_ARM64"


def test_reader_matches_lief_on_every_macho(machos: dict[str, bytes]) -> None:
    """splitter's own Mach-O reader (splitter.binaries.machoread) against lief, on every
    Mach-O file of the wheel: load commands, stamps, the string section, exported and
    imported symbols, and every fixup (rebase targets and bind addresses). The wheel has
    both fixup forms: chained fixups and LC_DYLD_INFO opcode streams."""
    import lief

    lief.logging.disable()
    forms = set()
    for path, data in sorted(machos.items()):
        ours = read_macho(path, data)
        theirs = lief.MachO.parse(data).at(0)
        dylibs = [c for c in theirs.commands if isinstance(c, lief.MachO.DylibCommand)]
        identity = lief.MachO.LoadCommand.TYPE.ID_DYLIB
        assert ours.install_name == "".join(c.name for c in dylibs if c.command == identity)
        assert [n for _, n in ours.loads] == [c.name for c in dylibs if c.command != identity]
        assert ours.rpaths == [
            c.path for c in theirs.commands if isinstance(c, lief.MachO.RPathCommand)
        ]
        uuid = next(c for c in theirs.commands if isinstance(c, lief.MachO.UUIDCommand))
        signature = next(c for c in theirs.commands if isinstance(c, lief.MachO.CodeSignature))
        assert sorted(ours.stamps) == sorted(
            [(uuid.command_offset + 8, 16), (signature.data_offset, signature.data_size)]
        ), path
        strings = theirs.get_section("__TEXT", "__cstring")
        mine = ours.section("__TEXT", "__cstring")
        assert mine is not None and (mine.offset, mine.size) == (strings.offset, strings.size)
        exported, imported = symbols(ours, path, data)
        assert exported == {s.name for s in theirs.exported_symbols}, path
        assert imported == {s.name for s in theirs.imported_symbols}, path
        targets, binds = fixups(ours, path, data)
        expected = {}
        for relocation in theirs.relocations:
            if isinstance(relocation, lief.MachO.RelocationFixup):
                expected[relocation.address] = relocation.target
            else:  # an opcode rebase: the target is the word in place
                expected[relocation.address] = targets.get(relocation.address)
        assert targets == expected, path
        assert binds == {b.address for b in theirs.bindings}, path
        forms.add("chained" if ours.chained else "opcodes" if ours.dyld_info else "none")
    assert forms == {"chained", "opcodes"}


def test_broken_fixups_are_a_binary_error(machos: dict[str, bytes]) -> None:
    """A file cut inside its fixups (load commands whole) is refused naming the file, not
    read as a library without kernels."""
    data = machos[QLIB]
    macho = read_macho(QLIB, data)
    start = macho.chained[0] if macho.chained else macho.dyld_info[0] if macho.dyld_info else 0
    assert start, "the library has fixups"
    with pytest.raises(BinaryError, match=rf"cannot read Mach-O .*: {QLIB}$"):
        analyse_macho(QLIB, data[: start + 16])


def test_runtime_dylibs_are_linked_like_upstream_says(infos: dict[str, BinaryInfo]) -> None:
    plugin = infos[PLUGIN]
    assert "@rpath/libexecutorch_kernels_quantized.dylib" in plugin.needed
    assert infos[QLIB].soname == "@rpath/libexecutorch_kernels_quantized.dylib"
    assert infos[QLIB].runpath[0] == "@loader_path"
    # no conda $PREFIX/lib among the plugin's rpaths: relocation is needed, as on Linux
    assert "@loader_path/../../../../lib" not in plugin.runpath


@pytest.mark.parametrize("path", [pytest.param(p, id=Path(p).stem) for p in TABLES])
def test_kernel_tables_match_an_independent_fixup_walk(
    machos: dict[str, bytes], infos: dict[str, BinaryInfo], path: str
) -> None:
    independent = kernel_table_entries(machos[path])
    assert len(independent) == len(set(independent)) == TABLES[path]
    assert infos[path].et_operators == tuple(sorted(independent))
    assert infos[path].operators_known


@pytest.mark.parametrize("path", [pytest.param(p, id=Path(p).stem) for p in (TORCHAO, CUSTOM_OPS)])
def test_initializer_registrations_are_unknown_not_zero(
    machos: dict[str, bytes], infos: dict[str, BinaryInfo], path: str, tmp_path: Path
) -> None:
    copy = tmp_path / Path(path).name
    copy.write_bytes(machos[path])
    undefined = subprocess.run(
        [tool("llvm-nm-14"), "--undefined-only", str(copy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert REGISTER_KERNELS in undefined  # it registers kernels ...
    assert kernel_table_entries(machos[path]) == []  # ... from no static table
    assert infos[path].registry == "uses"
    assert infos[path].operators_known is False


def test_export_plugin_registers_the_linux_torch_schemas(
    infos: dict[str, BinaryInfo], real_plan: Plan
) -> None:
    plugin = infos[PLUGIN]
    assert plugin.et_operators == () and plugin.operators_known
    linux = real_plan.binary(PLUGIN.replace(".dylib", ".so"))
    assert linux is not None
    assert plugin.torch_schemas == linux.torch_schemas and len(plugin.torch_schemas) == 13


def test_upstream_signatures_check_and_a_changed_byte_fails(machos: dict[str, bytes]) -> None:
    for path, data in machos.items():
        assert check_signature(data) == [], path
    changed = bytearray(machos[QLIB])
    changed[0x5000] ^= 1
    assert check_signature(bytes(changed)) == ["page 5 (offset 0x5000) hash differs"]


def test_every_file_owned_exactly_once(macos_plan: Plan) -> None:
    owned = [f for p in macos_plan.packages for f in p.files]
    assert len(macos_plan.wheel.entries) == 4762
    assert len(owned) == len(set(owned)) == 4762 - len(macos_plan.excluded)


def test_packages_hold_what_the_issue_says(macos_plan: Plan) -> None:
    assert macos_plan.package(QUANTIZED).files == (QLIB,)
    runtime = macos_plan.package(RUNTIME).files
    dylibs = [f for f in runtime if f.startswith(LIB) and f.endswith(".dylib")]
    assert len(dylibs) == 8 and QLIB not in dylibs
    assert f"{LIB}mlx.metallib" in runtime
    assert set(macos_plan.package(RUNTIME).cmake_components) == {
        "runtime",
        "threadpool",
        "kernels_optimized",
        "etdump",
        "backend_xnnpack",
        "backend_coreml",
        "backend_mlx",
        "kernels_torchao",
    }
    export = macos_plan.package(EXPORT)
    assert PLUGIN in export.files
    assert {d.name for d in export.depends} == {RUNTIME, QUANTIZED}
    evidence = next(d for d in export.depends if d.name == QUANTIZED).evidence
    assert f"{PLUGIN} NEEDS @rpath/libexecutorch_kernels_quantized.dylib" in evidence
    assert [d.pip for d in export.externals] == ["torch>=2.13,<2.14"]
    assert "/usr/lib/libc++.1.dylib" in macos_plan.package(RUNTIME).system_sonames


def test_platform_and_conda_metadata(macos_plan: Plan) -> None:
    assert macos_plan.platform.conda_subdir == "osx-arm64"
    assert macos_plan.platform.macos == "14.0"
    runtime = macos_plan.package(RUNTIME)
    depends = conda_depends(macos_plan, runtime, {})
    assert "__osx >=14.0" in depends and "libcxx" in depends
    assert not any(d.startswith("__glibc") for d in depends)
    export = conda_depends(
        macos_plan, macos_plan.package(EXPORT), {RUNTIME: "h0_0", QUANTIZED: "h1_0"}
    )
    # coremltools applies on Darwin (its marker), as pip on a Mac would decide
    assert any(d.startswith("coremltools") for d in export)


def test_exclusivity_verdict_says_what_it_could_not_see(macos_plan: Plan) -> None:
    (verdict,) = macos_plan.exclusive
    assert (verdict.first, verdict.second) == (PLUGIN, QLIB)
    assert verdict.in_effect is False and verdict.operators == ()
    assert f"{QLIB} registers 19 ExecuTorch kernels (uses registry)" in verdict.evidence
    assert any("NEEDS @rpath/libexecutorch_kernels_quantized.dylib" in e for e in verdict.evidence)
    unseen = [e for e in verdict.evidence if "cannot be counted statically" in e]
    assert [e.split()[0] for e in unseen] == [CUSTOM_OPS, TORCHAO]


PREFIX = "usr/local"


@pytest.fixture(scope="module")
def macos_tree(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`splitter build --target tree` of the macOS wheel (prefix /usr/local)."""
    out = tmp_path_factory.mktemp("macos-tree") / "tree"
    command = [sys.executable, "-m", "splitter", "-q", "build", "--target", "tree"]
    result = subprocess.run(
        [*command, str(real_wheel_macos), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out


def tree_union(tree: Path) -> dict[str, Path]:
    """Prefix-relative path -> staged file, over the three packages' trees."""
    union = {}
    for package in (RUNTIME, QUANTIZED, EXPORT):
        root = tree / package / PREFIX
        for path in root.rglob("*"):
            if path.is_file():
                union[path.relative_to(root).as_posix()] = path
    return union


def staged_machos(union: dict[str, Path]) -> dict[str, bytes]:
    out = {}
    for relative, path in union.items():
        data = path.read_bytes()
        if is_macho(data):
            out[relative] = data
    return out


def test_staged_machos_keep_valid_signatures_and_install_names(
    macos_tree: Path, machos: dict[str, bytes], infos: dict[str, BinaryInfo]
) -> None:
    staged = staged_machos(tree_union(macos_tree))
    assert len(staged) == len(machos) == 19
    by_name = {Path(p).name: p for p in machos}
    edited = 0
    for relative, data in sorted(staged.items()):
        assert check_signature(data) == [], relative
        original = by_name[Path(relative).name]
        after = analyse_macho(relative, data, registrations=False)
        assert after.soname == infos[original].soname, relative  # install names unchanged
        assert after.needed == infos[original].needed, relative
        if after.runpath == infos[original].runpath:
            assert data == machos[original], f"{relative} needed no change but was rewritten"
        else:
            edited += 1
    # flatc loads only system libraries and has no LC_RPATH: the one file left as it was
    assert edited == 18
    flatc = next(data for path, data in staged.items() if path.endswith("/data/bin/flatc"))
    assert flatc == machos["executorch/data/bin/flatc"]


def test_every_rpath_dependency_resolves_per_llvm_otool(macos_tree: Path) -> None:
    """dyld's search, from `llvm-otool -l` of the staged files (not from splitter's reader)."""
    union = tree_union(macos_tree)
    recipe = load_recipe()
    externals = {s for e in recipe.externals for s in e.sonames}
    unresolved = []
    for relative, path in sorted(union.items()):
        if relative not in staged_machos({relative: path}):
            continue
        seen = otool_load_commands(path)
        here = Path(relative).parent
        search = [
            (here / e.removeprefix("@loader_path").lstrip("/")).as_posix()
            for e in seen.get("LC_RPATH", [])
        ]
        for name in seen.get("LC_LOAD_DYLIB", []):
            if name in externals or name.startswith(("/usr/lib/", "/System/Library/")):
                continue
            leaf = name.removeprefix("@rpath/")
            if not any(os.path.normpath(f"{d}/{leaf}") in union for d in search):
                unresolved.append(f"{relative} -> {name} via {search}")
    assert unresolved == []


def test_resolver_reports_a_broken_rpath(macos_tree: Path, tmp_path: Path) -> None:
    union = {k: Path(v) for k, v in tree_union(macos_tree).items()}
    allowed = frozenset(s for e in load_recipe().externals for s in e.sonames) | frozenset(
        load_recipe().system_sonames
    )
    paths = load_recipe().system_paths
    assert find_unresolved(union, allowed, system_paths=paths) == []
    broken = tmp_path / "libexecutorch_kernels_quantized.dylib"
    shutil.copy(union["lib/libexecutorch_kernels_quantized.dylib"], broken)
    set_macho_rpaths(broken, ("@loader_path",), ("@loader_path/../nowhere",))
    assert check_signature(broken.read_bytes()) == []
    union["lib/libexecutorch_kernels_quantized.dylib"] = broken
    problems = find_unresolved(union, allowed, system_paths=paths)
    assert problems == [
        "lib/libexecutorch_kernels_quantized.dylib NEEDS @rpath/libexecutorch_threadpool.dylib "
        "(searched: nowhere)",
        "lib/libexecutorch_kernels_quantized.dylib NEEDS @rpath/libexecutorch.dylib "
        "(searched: nowhere)",
    ]


@pytest.mark.parametrize(
    "wanted",
    [
        ("@loader_path",),  # keeps its first entry: one run
        ("@loader_path", "@loader_path/../../lib"),  # keeps one, adds one: one run
        ("@loader_path/../../lib", "@loader_path"),  # adds before a kept one: two runs
        (),
    ],
)
def test_rpath_edits_give_exactly_the_rpaths_in_order(
    tmp_path: Path, machos: dict[str, bytes], infos: dict[str, BinaryInfo], wanted: tuple[str, ...]
) -> None:
    """Whatever runs of llvm-install-name-tool an edit takes, llvm-otool reads back exactly
    the LC_RPATHs asked for, in order, and the signature still checks."""
    target = tmp_path / "libexecutorch_kernels_quantized.dylib"
    target.write_bytes(machos[QLIB])
    current = infos[QLIB].runpath
    assert current[0] == "@loader_path" and len(current) > 2, current  # the cases assume it
    assert set_macho_rpaths(target, current, wanted)
    assert otool_load_commands(target).get("LC_RPATH", []) == list(wanted)
    assert check_signature(target.read_bytes()) == []


def not_linker_signed(data: bytes) -> bytes:
    """`data` with its CodeDirectory's linker-signed flag cleared (as `codesign -s -` leaves
    an ad-hoc signature): a signature splitter's own editor does not re-hash."""
    macho = read_macho("x", data)
    start = next(offset for offset, size in macho.stamps if size != 16)
    (at,) = struct.unpack_from(">I", data, start + 16)
    flags = start + at + 12
    (value,) = struct.unpack_from(">I", data, flags)
    return data[:flags] + struct.pack(">I", value & ~0x20000) + data[flags + 4 :]


def test_other_signatures_go_through_llvm(
    tmp_path: Path, machos: dict[str, bytes], infos: dict[str, BinaryInfo]
) -> None:
    """A file whose signature the linker did not make is edited by llvm-install-name-tool,
    which re-signs it: llvm-otool reads the rpaths asked for, and the signature checks."""
    target = tmp_path / "libexecutorch_kernels_quantized.dylib"
    target.write_bytes(not_linker_signed(machos[QLIB]))
    assert with_rpaths(str(target), target.read_bytes(), ("@loader_path/x",)) is None
    assert set_macho_rpaths(target, infos[QLIB].runpath, ("@loader_path/x",))
    assert otool_load_commands(target).get("LC_RPATH") == ["@loader_path/x"]
    assert check_signature(target.read_bytes()) == []


def test_missing_install_name_tool_names_the_package(
    tmp_path: Path, machos: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without LLVM, a linker-signed file is still edited; one that needs LLVM is refused
    naming the package to install, and left as it was."""
    target = tmp_path / "libexecutorch_kernels_quantized.dylib"
    target.write_bytes(machos[QLIB])
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without LLVM
    assert set_macho_rpaths(target, ("@loader_path",), ())
    assert check_signature(target.read_bytes()) == []
    other = not_linker_signed(machos[QLIB])
    target.write_bytes(other)
    with pytest.raises(MissingToolError, match=r"apt-get install llvm-14"):
        set_macho_rpaths(target, ("@loader_path",), ())
    assert target.read_bytes() == other


def run_build(wheel: Path, target: str, out: Path) -> None:
    command = [sys.executable, "-m", "splitter", "-q", "build", "--target", target]
    result = subprocess.run(
        [*command, str(wheel), "-o", str(out)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def macos_channel(real_wheel_macos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("macos-conda") / "channel"
    run_build(real_wheel_macos, "conda", out)
    return out


@pytest.fixture(scope="module")
def macos_prefix(macos_channel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One conda prefix holding all three osx-arm64 packages (py-rattler, no solver)."""
    from conda_tools import install

    prefix = tmp_path_factory.mktemp("macos-prefix") / "env"
    install(prefix, sorted((macos_channel / "osx-arm64").glob("*.conda")))
    return prefix


def conda_index(package: Path) -> dict[str, object]:
    with zipfile.ZipFile(package) as archive:
        info = next(n for n in archive.namelist() if n.startswith("info-"))
        raw = zstandard.ZstdDecompressor().stream_reader(archive.open(info))
        with tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                if member.name == "info/index.json":
                    handle = tar.extractfile(member)
                    assert handle is not None
                    data: dict[str, object] = json.load(handle)
                    return data
    raise AssertionError(f"no info/index.json in {package}")


def test_conda_writes_three_osx_arm64_packages(macos_channel: Path) -> None:
    built = sorted(p.name.split("-1.5.1-")[0] for p in (macos_channel / "osx-arm64").glob("*"))
    assert built == [EXPORT, QUANTIZED, RUNTIME, "repodata.json"]
    runtime = conda_index(next((macos_channel / "osx-arm64").glob(f"{RUNTIME}-*.conda")))
    assert runtime["subdir"] == "osx-arm64"
    assert runtime["depends"] == ["__osx >=14.0", "libcxx"]
    export = conda_index(next((macos_channel / "osx-arm64").glob(f"{EXPORT}-*.conda")))
    depends = export["depends"]
    assert isinstance(depends, list)
    assert any(str(d).startswith(f"{QUANTIZED} ==1.5.1 ") for d in depends)
    assert "python_abi 3.11.* *_cp311" in depends


def test_conda_prefix_signatures_resolution_and_install_names(
    macos_prefix: Path, machos: dict[str, bytes], infos: dict[str, BinaryInfo]
) -> None:
    union = {
        p.relative_to(macos_prefix).as_posix(): p
        for p in macos_prefix.rglob("*")
        if p.is_file() and "conda-meta" not in p.parts
    }
    staged = staged_machos(union)
    assert len(staged) == 19
    by_name = {Path(p).name: p for p in machos}
    for relative, data in staged.items():
        assert check_signature(data) == [], relative
        after = analyse_macho(relative, data, registrations=False)
        assert after.soname == infos[by_name[Path(relative).name]].soname, relative
    recipe = load_recipe()
    allowed = frozenset(s for e in recipe.externals for s in e.sonames)
    assert find_unresolved(union, allowed, system_paths=recipe.system_paths) == []
    plugin = analyse_macho("p", staged[f"lib/python3.11/site-packages/{PLUGIN}"], False)
    assert "@loader_path/../../../../.." in plugin.runpath  # the prefix's lib/


def test_wheels_unpack_to_upstream_layout(real_wheel_macos: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheels"
    run_build(real_wheel_macos, "wheel", out)
    names = sorted(p.name for p in out.glob("*.whl"))
    assert names == [
        "executorch_export-1.5.1-cp311-cp311-macosx_14_0_arm64.whl",
        "executorch_kernels_quantized-1.5.1-py3-none-macosx_14_0_arm64.whl",
        "executorch_runtime-1.5.1-py3-none-macosx_14_0_arm64.whl",
    ]
    unpacked: dict[str, bytes] = {}
    for wheel in out.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if ".dist-info/" not in name:
                    assert name not in unpacked, name
                    unpacked[name] = archive.read(name)
    excluded = {e.path for e in make_plan(real_wheel_macos, load_recipe()).excluded}
    with zipfile.ZipFile(real_wheel_macos) as archive:
        upstream = {
            n: archive.read(n)
            for n in archive.namelist()
            if ".dist-info/" not in n and n not in excluded
        }
    assert not excluded & set(unpacked)
    # the CMake config is regenerated per package, as for Linux; everything else is upstream's
    cmake = ("executorch/share/cmake/", "executorch/lib/cmake/")
    assert set(upstream) <= set(unpacked)
    assert all(p.startswith(cmake) for p in set(unpacked) - set(upstream))
    changed = [p for p in upstream if unpacked[p] != upstream[p]]
    assert changed and all(p.startswith(cmake) for p in changed)
    signed = [data for data in unpacked.values() if is_macho(data)]
    assert len(signed) == 19 and all(check_signature(data) == [] for data in signed)


PROBE = """cmake_minimum_required(VERSION 3.19)
project(probe NONE)
find_package(executorch REQUIRED CONFIG COMPONENTS kernels_quantized)
message(STATUS "APPLE=${APPLE}")
message(STATUS "LIBRARIES=${EXECUTORCH_LIBRARIES}")
message(STATUS "QUANTIZED=${EXECUTORCH_QUANTIZED_KERNELS_LIBRARY}")
if(TARGET executorch::kernels_quantized)
  get_target_property(_location executorch::kernels_quantized IMPORTED_LOCATION)
  get_target_property(_options executorch::kernels_quantized INTERFACE_LINK_OPTIONS)
  message(STATUS "LOCATION=${_location}")
  message(STATUS "OPTIONS=${_options}")
endif()
"""


@pytest.mark.parametrize("label", ["3.24", "4.x"])
def test_cmake_config_evaluates_for_darwin(macos_prefix: Path, label: str, tmp_path: Path) -> None:
    """The config as a Darwin consumer sees it (CMAKE_SYSTEM_NAME=Darwin, no compiler): dylib
    paths, @loader_path rpaths and no GNU --no-as-needed, as upstream's macOS config."""
    from consumer_tools import cmake_executable

    (tmp_path / "CMakeLists.txt").write_text(PROBE)
    darwin = ["-DCMAKE_SYSTEM_NAME=Darwin", f"-DCMAKE_PREFIX_PATH={macos_prefix}"]
    result = subprocess.run(
        [str(cmake_executable(label)), "-S", str(tmp_path), "-B", str(tmp_path / "build"), *darwin],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    values = dict(
        line.removeprefix("-- ").split("=", 1)
        for line in result.stdout.splitlines()
        if line.startswith("-- ") and "=" in line
    )
    assert values["APPLE"] == "1"
    lib = f"{macos_prefix}/lib"
    assert "no-as-needed" not in result.stdout
    if label == "4.x":
        assert values["QUANTIZED"] == "executorch::kernels_quantized"
        assert values["LOCATION"] == f"{lib}/libexecutorch_kernels_quantized.dylib"
        assert values["OPTIONS"].split(";") == [
            "-Wl,-rpath,@loader_path",
            "-Wl,-rpath,@loader_path/../lib",
            f"-Wl,-rpath,{lib}",
        ]
    else:
        assert values["QUANTIZED"] == f"{lib}/libexecutorch_kernels_quantized.dylib"
        assert values["LIBRARIES"].split(";")[0] == f"{lib}/libexecutorch.dylib"
        assert len(values["LIBRARIES"].split(";")) == 8


def test_verify_runs_what_linux_can_and_says_the_rest_needs_macos(macos_channel: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "splitter", "verify", str(macos_channel), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows: dict[str, list[dict[str, str]]] = {}
    for row in report["checks"]:
        rows.setdefault(row["check"], []).append(row)
    assert report["ok"] is True
    assert len(rows["signature"]) == 19
    assert {r["status"] for r in rows["signature"] + rows["resolution"]} == {"pass"}
    kernels = {r["subject"]: r for r in rows["kernels"]}
    assert kernels["libexecutorch_kernels_quantized.dylib"]["expected"].startswith("19 ")
    assert {r["status"] for r in rows["cmake (Darwin, no compiler)"]} == {"pass"}
    (together,) = rows["together"]  # the recipe's [[together]]: mlx.metallib beside MLX
    assert together["subject"] == "libexecutorch_backend_mlx.dylib + mlx.metallib"
    assert together["status"] == "pass"
    for name in ("co-load", "model (C++)", "relocation", "model (Python)"):
        (row,) = rows[name]
        assert row["status"] == "skip" and row["detail"].startswith("needs macOS")


def test_verify_signature_checker_agrees_with_the_tests_own(machos: dict[str, bytes]) -> None:
    """splitter's checker (used by verify) against tests/machotools.py's, on good and bad bytes."""
    from splitter.binaries.codesign import signature_problems

    for path, data in machos.items():
        assert signature_problems(data) == check_signature(data) == [], path
        changed = bytearray(data)
        changed[len(data) // 3] ^= 0x80
        assert signature_problems(bytes(changed)) and check_signature(bytes(changed)), path


def test_plan_fetches_the_macos_wheel_by_platform() -> None:
    from conftest import _cache

    options = ["--platform", "osx-arm64", "--python", "3.11", "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "splitter", "plan", "executorch==1.5.1", *options],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SPLITTER_CACHE": str(_cache().parent)},
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["input"]["tag"] == "cp311-cp311-macosx_14_0_arm64"
    assert data["platform"]["conda_subdir"] == "osx-arm64"


def test_rebuild_recipe_script_relocates_and_resigns(
    macos_channel: Path, macos_prefix: Path, real_wheel_macos: Path, tmp_path: Path
) -> None:
    """The recipes' install.sh for a macOS split, run with LLVM's tools standing in for Apple's
    (install_name_tool: llvm-install-name-tool-14; codesign: llvm-objcopy-14, which re-signs
    ad-hoc): the prefix gets the assembled packages' rpaths, each with a valid signature."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "install_name_tool").symlink_to(tool("llvm-install-name-tool-14"))
    objcopy = tool("llvm-objcopy-14")
    (tools / "codesign").write_text(
        f'#!/bin/sh\nfor f; do last="$f"; done\nexec {objcopy} "$last" "$last"\n'
    )
    (tools / "codesign").chmod(0o755)
    source, prefix = tmp_path / "src", tmp_path / "prefix"
    source.mkdir()
    shutil.copy(real_wheel_macos, source)
    script = macos_channel / "recipes" / "rattler-build" / "install.sh"
    environment = {
        **os.environ,
        "PATH": f"{tools}:{os.environ['PATH']}",
        "SRC_DIR": str(source),
        "PREFIX": str(prefix),
    }
    for package in (RUNTIME, QUANTIZED, EXPORT):
        result = subprocess.run(
            ["bash", str(script), package], env=environment, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
    built = staged_machos(
        {p.relative_to(prefix).as_posix(): p for p in prefix.rglob("*") if p.is_file()}
    )
    assert len(built) == 19
    for relative, data in built.items():
        assert check_signature(data) == [], relative
        assembled = (macos_prefix / relative).read_bytes()
        assert (
            analyse_macho(relative, data, False).runpath
            == analyse_macho(relative, assembled, False).runpath
        ), relative


def test_doctor_finds_a_second_quantized_copy_in_a_macos_prefix(
    macos_prefix: Path, machos: dict[str, bytes], tmp_path: Path
) -> None:
    """A pip executorch wheel's libraries beside the split packages: the quantized kernels
    twice, which aborts a process with 'Re-registering' (FACTS)."""
    prefix = tmp_path / "env"
    shutil.copytree(macos_prefix, prefix, symlinks=True)

    def doctor() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "splitter", "doctor", "--prefix", str(prefix), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )

    clean = doctor()
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert report["hazards"] == []
    assert any("operators unknown" in n and "torchao" in n for n in report["notes"])
    pip_lib = prefix / "lib/python3.11/site-packages/executorch/lib"
    pip_lib.mkdir(parents=True, exist_ok=True)  # the export package's lib/cmake is there
    (pip_lib / "libexecutorch_kernels_quantized.dylib").write_bytes(machos[QLIB])
    clashing = doctor()
    assert clashing.returncode == 1, clashing.stderr
    (hazard,) = json.loads(clashing.stdout)["hazards"]
    assert (
        sorted(Path(f).name for f in hazard["files"])
        == ["libexecutorch_kernels_quantized.dylib"] * 2
    )


@pytest.mark.parametrize("size", [8, 40, 200])
def test_truncated_macho_is_a_binary_error(machos: dict[str, bytes], size: int) -> None:
    with pytest.raises(BinaryError, match=r"cannot read Mach-O \(the file ends inside"):
        analyse_macho("executorch/lib/x.dylib", machos[QLIB][:size])


def _signature_command(data: bytes) -> int:
    """The offset of LC_CODE_SIGNATURE in a thin 64-bit Mach-O, read here with struct alone."""
    count = struct.unpack_from("<I", data, 16)[0]
    offset = 32
    for _ in range(count):
        command, size = struct.unpack_from("<II", data, offset)
        if command == 0x1D:
            return offset
        offset += size
    raise AssertionError("no LC_CODE_SIGNATURE")


@pytest.mark.parametrize("command", ["plan", "build"])
def test_a_signature_past_the_end_is_refused_before_any_tool(
    command: str, real_wheel_macos: Path, tmp_path: Path
) -> None:
    """LC_CODE_SIGNATURE's dataoff past the end of the file (RECORD kept valid): `plan` and
    `build -t conda` refuse it the same way, naming the file, before llvm-install-name-tool
    meets it (it said only "truncated or malformed object", exit 8)."""
    name = "executorch/lib/libexecutorch.dylib"
    with zipfile.ZipFile(real_wheel_macos) as wheel:
        data = bytearray(wheel.read(name))
    at = _signature_command(bytes(data))
    struct.pack_into("<I", data, at + 8, len(data) + 4096)
    broken = rewrite_wheel(real_wheel_macos, tmp_path, replace={name: bytes(data)})
    out = tmp_path / "out"
    args = (
        ["plan", str(broken)]
        if command == "plan"
        else ["build", str(broken), "-t", "conda", "-o", str(out)]
    )
    result = subprocess.run(
        [sys.executable, "-m", "splitter", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == BinaryError.exit_code, result.stderr
    assert "code signature" in result.stderr and name in result.stderr, result.stderr
    assert "install-name-tool" not in result.stderr
    assert not out.exists()
