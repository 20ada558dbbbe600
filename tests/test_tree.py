"""The tree target on the real wheel: layout, relocation, file lists, and a real CMake consumer."""

from __future__ import annotations

import gc
import io
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from consumer_tools import (
    CMAKE_LABELS,
    CONSUMER,
    build_consumer,
    build_meson,
    cmake_executable,
    cmake_version,
    expected_output,
    meson_runs_the_model,
    needed,
    pkg_config_flags,
    run_model,
)
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

import splitter.targets.install as install_module
from splitter.binaries.elf import (
    _dynamic_entries,
    analyse_elf,
    exported_symbols,
    has_debug_info,
    stamp_layout,
)
from splitter.binaries.resolve import find_unresolved
from splitter.errors import BinaryError, UsageError
from splitter.model import Plan
from splitter.plan.layout import make_layout
from splitter.targets.tree import build_tree

pytestmark = pytest.mark.integration

PACKAGES = ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")
PREFIX = "usr/local"
SITE = "lib/python3.11/site-packages"
QUANTIZED_MESSAGE = "install the executorch-kernels-quantized package"


@pytest.fixture(scope="module")
def tree(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tree") / "out"
    build_tree(real_plan, out, make_layout(real_plan.wheel, "/usr/local", "lib", "include", None))
    return out


def merge(tree: Path, target: Path, *packages: str) -> Path:
    """Install the staged trees of `packages` into one prefix, as a package manager would."""
    for package in packages:
        shutil.copytree(tree / package / PREFIX, target, dirs_exist_ok=True, symlinks=True)
    return target


@pytest.fixture(scope="module")
def prefixes(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prefixes")
    return {
        "runtime": merge(tree, root / "runtime", "executorch-runtime"),
        "runtime+quantized": merge(
            tree, root / "both", "executorch-runtime", "executorch-kernels-quantized"
        ),
    }


def staged_files(tree: Path, package: str) -> set[str]:
    root = tree / package
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_layout(tree: Path) -> None:
    runtime = staged_files(tree, "executorch-runtime")
    assert f"{PREFIX}/lib/libexecutorch.so" in runtime
    assert f"{PREFIX}/include/executorch/runtime/core/evalue.h" in runtime
    assert f"{PREFIX}/lib/cmake/executorch/executorch-config.cmake" in runtime
    assert f"{PREFIX}/lib/pkgconfig/executorch.pc" in runtime
    quantized = staged_files(tree, "executorch-kernels-quantized")
    assert quantized == {
        f"{PREFIX}/lib/libexecutorch_kernels_quantized.so",
        f"{PREFIX}/lib/cmake/executorch/executorch-component-kernels_quantized.cmake",
        f"{PREFIX}/lib/pkgconfig/executorch-kernels-quantized.pc",
        # its licence (no third-party code: the wheel's alone) and its SBOMs
        f"{PREFIX}/share/licenses/executorch-kernels-quantized/LICENSE",
        f"{PREFIX}/share/doc/executorch-kernels-quantized/sbom.cdx.json",
        f"{PREFIX}/share/doc/executorch-kernels-quantized/sbom.spdx.json",
    }
    export = staged_files(tree, "executorch-export")
    assert f"{PREFIX}/{SITE}/executorch/exir/__init__.py" in export
    assert f"{PREFIX}/bin/flatc" in export
    assert not any(p.startswith(f"{PREFIX}/{SITE}/executorch/include/") for p in export)
    # upstream's two CMake directories hold only the config that loads the runtime's
    # (lib/cmake/executorch) and the version file, as upstream's checks read them
    package = f"{PREFIX}/{SITE}/executorch"
    assert {p for p in export if p.startswith((f"{package}/share/", f"{package}/lib/"))} == {
        f"{package}/{where}/executorch-config{kind}.cmake"
        for where in ("share/cmake", "lib/cmake/executorch")
        for kind in ("", "-version")
    }


def test_install_lists_are_complete_and_disjoint(tree: Path) -> None:
    seen: list[str] = []
    for package in PACKAGES:
        listed = (tree / f"{package}.install").read_text().splitlines()
        assert sorted(listed) == sorted(staged_files(tree, package))
        seen += listed
    assert len(seen) == len(set(seen))


def test_rpm_files_and_json_manifest(tree: Path) -> None:
    rpm = (tree / "executorch-kernels-quantized.files").read_text().splitlines()
    assert rpm[0] == "%files -n executorch-kernels-quantized"
    assert "/usr/local/lib/libexecutorch_kernels_quantized.so" in rpm
    # its directories are the runtime's, but for its own documentation and licence ones
    assert [line for line in rpm if line.startswith("%dir")] == [
        "%dir /usr/local/share/doc/executorch-kernels-quantized",
        "%dir /usr/local/share/licenses/executorch-kernels-quantized",
    ]
    assert "%dir /usr/local/include/executorch" in (tree / "executorch-runtime.files").read_text()
    manifest = json.loads((tree / "executorch-export.json").read_text())
    assert {d["name"] for d in manifest["depends"]} == {
        "executorch-runtime",
        "executorch-kernels-quantized",
    }
    entry = next(f for f in manifest["files"] if f["path"].endswith("/bin/flatc"))
    assert entry["mode"] == "0755" and len(entry["sha256"]) == 64
    (verdict,) = manifest["process_exclusive"]
    assert verdict["in_effect"] is False


def test_relocated_runpaths(tree: Path) -> None:
    files = {}
    for package in PACKAGES:
        for relative in staged_files(tree, package):
            files[relative.removeprefix(PREFIX + "/")] = tree / package / relative
    plugin = f"{SITE}/executorch/kernels/quantized/libquantized_ops_aot_lib.so"
    info = analyse_elf(plugin, files[plugin].read_bytes())
    assert info.rpath == ()  # DT_RUNPATH stays DT_RUNPATH
    assert "$ORIGIN/../../../../.." in info.runpath  # site-packages/executorch/... -> lib
    assert "$ORIGIN/../../../torch/lib" in info.runpath
    assert not any("cuda" in e or "src/executorch" in e for e in info.runpath)
    assert find_unresolved(files, frozenset(_allowed())) == []


def readelf_dynamic(path: Path) -> dict[str, list[str]]:
    """binutils' reading of a file's NEEDED, SONAME, RUNPATH and RPATH entries."""
    listing = subprocess.run(
        ["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, list[str]] = {"NEEDED": [], "SONAME": [], "RUNPATH": [], "RPATH": []}
    for kind, value in re.findall(
        r"\((NEEDED|SONAME|RUNPATH|RPATH)\)\s+\S+[^\[]*\[(.*)\]$", listing, re.M
    ):
        found[kind].append(value)
    return found


def test_the_resolver_reads_what_readelf_reads(
    tree: Path, real_plan: Plan, real_wheel_aarch64: Path
) -> None:
    """The resolver's reading of each relocated binary (program headers only), which the
    full analysis takes too, is binutils' and pyelftools' reading of it, for the x86-64 tree
    and for the aarch64 wheel's files."""
    files = [
        tree / package / relative
        for package in PACKAGES
        for relative in staged_files(tree, package)
        if (tree / package / relative).read_bytes()[:4] == b"\x7fELF"
    ]
    assert len(files) == len(real_plan.binaries) == 19
    aarch64 = tree.parent / "aarch64"
    with zipfile.ZipFile(real_wheel_aarch64) as archive:
        for info in archive.infolist():
            if archive.read(info)[:4] == b"\x7fELF":
                archive.extract(info, aarch64)
    machines = [p for p in aarch64.rglob("*") if p.is_file()]
    assert len(machines) >= 17
    files += machines
    for path in files:
        data = path.read_bytes()
        quick, full = analyse_elf(path.name, data, registrations=False), analyse_elf("f", data)
        # read from the program headers, not by pyelftools (which sets the unstamped digest)
        assert quick.unstamped_sha256 == "" and full.unstamped_sha256, path
        dynamic = readelf_dynamic(path)
        assert list(quick.needed) == dynamic["NEEDED"], path
        assert [quick.soname] == (dynamic["SONAME"] or [""]), path
        assert ":".join(quick.runpath) == "".join(dynamic["RUNPATH"]), path
        assert ":".join(quick.rpath) == "".join(dynamic["RPATH"]), path
        assert quick.machine == full.machine in ("EM_X86_64", "EM_AARCH64"), path
        linkage = (quick.soname, quick.needed, quick.runpath, quick.rpath)
        assert (full.soname, full.needed, full.runpath, full.rpath) == linkage, path
        with io.BytesIO(data) as stream:  # pyelftools' own reading of the dynamic section
            dynamic = ELFFile(stream).get_section_by_name(".dynamic")
            assert isinstance(dynamic, DynamicSection)
            assert _dynamic_entries(dynamic) == linkage, path


def test_the_resolver_names_every_binary_that_needs_a_missing_library(tree: Path) -> None:
    """The static loader (which maps each staged ELF file rather than reading it) names,
    with the library one library short of the union, exactly the files binutils says NEED
    it, and nothing else."""
    files = {}
    for package in PACKAGES:
        for relative in staged_files(tree, package):
            files[relative.removeprefix(PREFIX + "/")] = tree / package / relative
    assert find_unresolved(files, frozenset(_allowed())) == []
    del files["lib/libexecutorch.so"]
    needers = {
        relative
        for relative, path in files.items()
        if path.read_bytes()[:4] == b"\x7fELF"
        and "libexecutorch.so" in readelf_dynamic(path)["NEEDED"]
    }
    assert len(needers) >= 5, needers
    problems = find_unresolved(files, frozenset(_allowed()))
    assert {p.split(" NEEDS ")[0] for p in problems} == needers
    assert all(" NEEDS libexecutorch.so (searched: " in p for p in problems), problems


def test_reading_a_binary_lets_go_of_its_bytes(tree: Path) -> None:
    """pyelftools' readers hold each other in reference cycles, which the build's raised
    collection threshold (splitter.__main__) would leave for long: each reading takes its
    reader apart, so it leaves no garbage for the collector and nothing keeps the file's
    bytes (19 binaries, 23 MB, in a cp311 x86_64 wheel)."""
    data = (tree / "executorch-runtime" / PREFIX / "lib/libexecutorch.so").read_bytes()
    gc.collect()
    gc.disable()
    try:
        before = sys.getrefcount(data)
        assert analyse_elf("lib/libexecutorch.so", data).machine == "EM_X86_64"
        assert exported_symbols("lib/libexecutorch.so", data)
        assert stamp_layout("lib/libexecutorch.so", data)[0]
        assert not has_debug_info(data)
        assert sys.getrefcount(data) == before
        assert gc.collect() == 0  # no cycle was left to collect
    finally:
        gc.enable()


def test_a_truncated_binary_is_named(tree: Path) -> None:
    """A binary cut short (its dynamic table past the end) is left to pyelftools, which
    names it; the quick reading gives up rather than guess."""
    lib = tree / "executorch-runtime" / PREFIX / "lib/libexecutorch.so"
    with pytest.raises(BinaryError, match=r"cannot read ELF .*: lib/libexecutorch\.so"):
        analyse_elf("lib/libexecutorch.so", lib.read_bytes()[:4096], registrations=False)


def _allowed() -> set[str]:
    from splitter.plan.recipe import load_recipe

    recipe = load_recipe()
    return set(recipe.system_sonames) | {s for e in recipe.externals for s in e.sonames}


def test_broken_runpath_fails_the_build(
    real_plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = install_module.runpath_for

    def broken(binary, dest, targets, ext_dirs, externals):  # type: ignore[no-untyped-def]
        if binary.path.endswith("libexecutorch_kernels_quantized.so"):
            return ("$ORIGIN/nowhere",)
        return original(binary, dest, targets, ext_dirs, externals)

    monkeypatch.setattr(install_module, "runpath_for", broken)
    out = tmp_path / "out"
    with pytest.raises(
        BinaryError, match=r"lib/libexecutorch_kernels_quantized\.so NEEDS libexecutorch\.so"
    ):
        build_tree(real_plan, out, make_layout(real_plan.wheel, "/usr", "lib", "include", None))
    assert not out.exists() or not any(out.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary directory left either


def test_rpath_strip(real_plan: Plan, tmp_path: Path) -> None:
    layout = make_layout(
        real_plan.wheel, "/usr", "lib/x86_64-linux-gnu", "include", "lib/python3/dist-packages"
    )
    build_tree(real_plan, tmp_path / "out", layout, rpath="strip")
    lib = (
        tmp_path
        / "out/executorch-runtime/usr/lib/x86_64-linux-gnu/libexecutorch_kernels_optimized.so"
    )
    assert analyse_elf("x", lib.read_bytes()).runpath == ()
    c_ext = next(
        (tmp_path / "out/executorch-export/usr/lib/python3/dist-packages").rglob("_C.*.so")
    )
    assert analyse_elf("x", c_ext.read_bytes()).runpath == ("$ORIGIN/../../../torch/lib",)
    with pytest.raises(UsageError, match="--rpath strip needs a libdir"):
        build_tree(
            real_plan,
            tmp_path / "o2",
            make_layout(real_plan.wheel, "/opt/et", "lib", "include", None),
            rpath="strip",
        )


UPSTREAM_PC = Path(__file__).parent / "data" / "upstream" / "executorch.pc.in"


def test_pkgconfig_keeps_upstreams_flags(
    prefixes: dict[str, Path], real_wheel: Path, tmp_path: Path
) -> None:
    """Upstream's own executorch.pc.in (tools/cmake, verbatim), configured for the same prefix,
    against splitter's executorch.pc: every flag of upstream's is in ours, and ours adds exactly
    what the README lists: the two definitions of splitter's CMake config, the runtime
    package's other libraries (from the wheel) and one argument keeping them NEEDED."""
    prefix = prefixes["runtime+quantized"]
    values = {
        "CMAKE_INSTALL_PREFIX": str(prefix),
        "CMAKE_INSTALL_FULL_LIBDIR": str(prefix / "lib"),
        "CMAKE_INSTALL_FULL_INCLUDEDIR": str(prefix / "include"),
        "PROJECT_VERSION": "1.5.1",
    }
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    text = re.sub(r"@(\w+)@", lambda m: values[m[1]], UPSTREAM_PC.read_text())
    (upstream / "executorch.pc").write_text(text)
    ours = prefix / "lib" / "pkgconfig"
    for query in (["--modversion"], ["--cflags"], ["--libs"]):
        assert set(pkg_config_flags(upstream, *query, "executorch")) <= set(
            pkg_config_flags(ours, *query, "executorch")
        ), query
    assert pkg_config_flags(ours, "--variable=exec_prefix", "executorch") == [str(prefix)]
    upstream_flags = set(pkg_config_flags(upstream, "--cflags", "--libs", "executorch"))
    added = [
        f
        for f in pkg_config_flags(ours, "--cflags", "--libs", "executorch")
        if f not in upstream_flags
    ]
    with zipfile.ZipFile(real_wheel) as wheel:
        libraries = sorted(
            Path(n).name
            for n in wheel.namelist()
            if re.fullmatch(r"executorch/lib/lib\w+\.so", n)
            and "quantized" not in n
            and Path(n).name != "libexecutorch.so"
        )
    kept = ",".join(f"{prefix}/lib/{name}" for name in libraries)
    assert sorted(added) == sorted(
        [
            "-DET_EVENT_TRACER_ENABLED",
            "-DET_USE_THREADPOOL",
            *(f"-l{name[3:-3]}" for name in libraries),
            f"-Wl,--push-state,--no-as-needed,{kept},--pop-state",
        ]
    )
    quantized = pkg_config_flags(ours, "--libs", "executorch-kernels-quantized")
    assert (
        f"-Wl,--push-state,--no-as-needed,{prefix}/lib/libexecutorch_kernels_quantized.so,--pop-state"
        in quantized
    )
    assert "-lexecutorch" in quantized  # Requires: executorch


def test_plain_compiler_with_as_needed(prefixes: dict[str, Path], tmp_path: Path) -> None:
    """A Makefile's way, with --as-needed (Debian's and Ubuntu's toolchain default) before the
    .pc flags: the quantized library stays NEEDED (readelf) and the model runs."""
    pc_dir = prefixes["runtime+quantized"] / "lib" / "pkgconfig"
    runner = tmp_path / "runner"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            *pkg_config_flags(pc_dir, "--cflags", "executorch-kernels-quantized"),
            str(CONSUMER / "runner.cpp"),
            "-o",
            str(runner),
            "-Wl,--as-needed",
            *pkg_config_flags(pc_dir, "--libs", "executorch-kernels-quantized"),
            f"-Wl,-rpath,{pc_dir.parent}",
        ],
        check=True,
        capture_output=True,
    )
    assert "libexecutorch_kernels_quantized.so" in readelf_dynamic(runner)["NEEDED"]
    run = run_model(runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


def test_meson_pkgconfig(prefixes: dict[str, Path], tmp_path: Path) -> None:
    """meson's dependency('executorch') and dependency('executorch-kernels-quantized'), through
    pkg-config, with meson's default --as-needed: the model runs byte-identical; on a prefix
    without the quantized package, configure fails naming it."""
    prefix = prefixes["runtime+quantized"]
    meson_runs_the_model(tmp_path, pkg_config_path=prefix / "lib" / "pkgconfig")
    alone = build_meson(
        tmp_path / "a", quantized=True, pkg_config_path=prefixes["runtime"] / "lib" / "pkgconfig"
    )
    assert alone.returncode != 0
    assert 'Dependency "executorch-kernels-quantized" not found' in alone.output
    assert not alone.runner.exists()


@pytest.mark.parametrize("cmake_label", ["3.28", "4.x"], ids=lambda v: f"cmake-{v}")
def test_meson_cmake_method(cmake_label: str, prefixes: dict[str, Path], tmp_path: Path) -> None:
    """meson's CMake method (the imported targets, CMake >= 3.28) runs the model; without the
    quantized package configure fails with the config's message naming the package."""
    cmake = cmake_executable(cmake_label)
    prefix = prefixes["runtime+quantized"]
    meson_runs_the_model(tmp_path, cmake=cmake, cmake_prefix=prefix)
    alone = build_meson(
        tmp_path / "a", quantized=True, cmake=cmake, cmake_prefix=prefixes["runtime"]
    )
    assert alone.returncode != 0
    assert QUANTIZED_MESSAGE in " ".join(alone.output.split())


@pytest.mark.parametrize("cmake_label", list(CMAKE_LABELS), ids=lambda v: f"cmake-{v}")
def test_consumer_with_quantized(
    cmake_label: str, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    cmake = cmake_executable(cmake_label)
    prefix = prefixes["runtime+quantized"]
    result = build_consumer(cmake, tmp_path / "q", prefix=prefix, quantized=True)
    assert result.returncode == 0, result.output
    run = run_model(result.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()
    quantized_var = result.variable("EXECUTORCH_QUANTIZED_KERNELS_LIBRARY")
    if cmake_version(cmake) >= (3, 28):
        assert quantized_var == "executorch::kernels_quantized"
    else:
        assert re.fullmatch(
            r"-Wl,--push-state,--no-as-needed,.*/lib/libexecutorch_kernels_quantized\.so,--pop-state",
            quantized_var,
        )
    assert "libexecutorch_kernels_quantized.so" in needed(result.runner)

    plain = build_consumer(cmake, tmp_path / "plain", prefix=prefix, quantized=False)
    assert plain.returncode == 0, plain.output
    names = needed(plain.runner)
    assert "libexecutorch_kernels_optimized.so" in names
    assert "libexecutorch_backend_qnn.so" in names  # upstream's pre-3.28 aggregate leaves it out
    assert "libexecutorch_kernels_quantized.so" not in names
    assert "Missing operator" in run_model(plain.runner, tmp_path / "o.bin").stderr


@pytest.mark.parametrize("cmake_label", list(CMAKE_LABELS), ids=lambda v: f"cmake-{v}")
def test_consumer_runtime_alone(
    cmake_label: str, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    cmake = cmake_executable(cmake_label)
    prefix = prefixes["runtime"]
    wanted = build_consumer(cmake, tmp_path / "q", prefix=prefix, quantized=True)
    assert wanted.returncode != 0
    assert QUANTIZED_MESSAGE in " ".join(wanted.output.split())
    plain = build_consumer(cmake, tmp_path / "plain", prefix=prefix, quantized=False)
    assert plain.returncode == 0, plain.output
    run = run_model(plain.runner, tmp_path / "o.bin")
    assert run.returncode != 0
    assert "Missing operator" in run.stderr and "quantized_decomposed::" in run.stderr


@pytest.mark.parametrize("cmake_label", ["3.25", "3.28"], ids=lambda v: f"cmake-{v}")
def test_consumer_against_upstream_wheel(
    cmake_label: str, unpacked_wheel: Path, tmp_path: Path
) -> None:
    """The same consumer project works against upstream's own config: the contract is the same."""
    cmake = cmake_executable(cmake_label)
    config_dir = unpacked_wheel / "executorch" / "share" / "cmake"
    quantized = cmake_version(cmake) >= (3, 28)  # upstream refuses COMPONENTS before 3.28
    result = build_consumer(cmake, tmp_path / "b", config_dir=config_dir, quantized=quantized)
    assert result.returncode == 0, result.output
    run = run_model(result.runner, tmp_path / "o.bin")
    if quantized:
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "o.bin").read_bytes() == expected_output()
    else:
        assert "Missing operator" in run.stderr


def test_moved_prefix(prefixes: dict[str, Path], tmp_path: Path) -> None:
    """Configure from a moved prefix, and run a program installed in <prefix>/bin after a move."""
    cmake = cmake_executable("3.28")
    first = tmp_path / "first"
    shutil.copytree(prefixes["runtime+quantized"], first, symlinks=True)
    built = build_consumer(cmake, tmp_path / "b1", prefix=first, quantized=True)
    assert built.returncode == 0, built.output
    (first / "bin").mkdir(exist_ok=True)
    shutil.copy2(built.runner, first / "bin" / "runner")
    moved = tmp_path / "elsewhere" / "prefix"
    moved.parent.mkdir()
    first.rename(moved)
    run = run_model(moved / "bin" / "runner", tmp_path / "o.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "o.bin").read_bytes() == expected_output()
    for label in ("3.24", "3.28"):
        again = build_consumer(
            cmake_executable(label), tmp_path / f"b-{label}", prefix=moved, quantized=True
        )
        assert again.returncode == 0, again.output
        assert str(moved) in again.variable("EXECUTORCH_RUNTIME_LIBRARY_DIR")
        run = run_model(again.runner, tmp_path / "o2.bin")
        assert run.returncode == 0 and (tmp_path / "o2.bin").read_bytes() == expected_output()
