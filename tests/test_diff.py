"""`splitter diff OLD NEW` on the real 1.5.0 and 1.5.1 wheels and on small wheels built for one
kind of change each; every symbol finding is checked against binutils (`nm -D`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from builders import make_wheel, run_splitter
from conftest import _download
from test_components import components_found

from splitter.plan.diff import Break, Reason, Verdict, diff_plans
from splitter.plan.diffmeta import Meta, MetadataChange
from splitter.plan.diffreport import diff_json, report_lines
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe

pytestmark = pytest.mark.integration

PACKAGES = ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")


@pytest.fixture(scope="module")
def wheel_150() -> Path:
    return _download("executorch==1.5.0", None)


def nm_defined(wheel: Path, member: str, scratch: Path) -> set[str]:
    """`nm -D --defined-only` of a member: its exported dynamic symbols, by binutils."""
    copy = scratch / f"{wheel.stem}-{Path(member).name}"
    with zipfile.ZipFile(wheel) as archive:
        copy.write_bytes(archive.read(member))
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(copy)], capture_output=True, text=True, check=True
    ).stdout
    symbols = set()
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] not in ("t", "d", "b", "r"):  # global or weak
            symbols.add(fields[2].split("@")[0])
    return symbols


def test_real_upgrade(wheel_150: Path, real_wheel: Path, tmp_path: Path) -> None:
    """1.5.0 -> 1.5.1: the JSON has the documented shape, every binary listed as changed
    differs beyond its build-id, its symbol changes are nm's, and --exit-code says 1."""
    result = run_splitter("diff", str(wheel_150), str(real_wheel), "--json", "--exit-code")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["from"] == wheel_150.name and report["to"] == real_wheel.name
    assert set(report["packages"]) == set(PACKAGES)
    plans = make_plan(wheel_150, load_recipe()), make_plan(real_wheel, load_recipe())
    unstamped = [{b.path: b.unstamped_sha256 for b in p.binaries} for p in plans]
    for name, package in report["packages"].items():
        assert set(package) >= {"verdict", "added", "removed", "changed", "moved", "binaries"}
        assert package["verdict"] in ("unchanged", "compatible", "incompatible")
        for path in package["changed"]:
            if path in unstamped[1] and path in unstamped[0]:
                assert unstamped[0][path] != unstamped[1][path], path  # not a stamp only
        for binary in package["binaries"]:
            path = binary["path"]
            old = nm_defined(wheel_150, path, tmp_path)
            new = nm_defined(real_wheel, path, tmp_path)
            added = {s["mangled"] for s in binary["symbols_added"]}
            removed = {s["mangled"] for s in binary["symbols_removed"]}
            assert added == new - old, path
            assert removed == old - new, path
            if removed:
                assert package["verdict"] == "incompatible", name
    # each package's third-party components, old and new, are the ones binutils' nm (and
    # the path patterns over zipfile's names) find in its files of each wheel
    for index, wheel in enumerate((wheel_150, real_wheel)):
        found = components_found(wheel, plans[index], tmp_path / f"scan{index}")
        components = plans[index].recipe.third_party
        side = ("from", "to")[index]
        for name, package in report["packages"].items():
            held = {c for path, c in found if plans[index].owners[path][0] == name}
            order = [c.name for c in components if c.name in held]
            assert package["third_party"][side] == order, (name, side)
            assert package["license"][side] == plans[index].package(name).license


def _neutral(name: str) -> str:
    """A member's name with the dist-info directory's version taken out (diff pairs them)."""
    return re.sub(r"^executorch-[^/]+\.dist-info/", "executorch.dist-info/", name)


def _dynamic(path: Path) -> dict[str, list[str]]:
    """binutils' readelf -d: NEEDED, SONAME and RUNPATH of one file."""
    listing = subprocess.run(
        ["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, list[str]] = {"NEEDED": [], "SONAME": [], "RUNPATH": []}
    for kind, value in re.findall(r"\((NEEDED|SONAME|RUNPATH)\)[^\[]*\[(.*)\]$", listing, re.M):
        found[kind].append(value)
    return found


def _without_build_id(path: Path) -> bytes:
    """The file with its GNU build-id note removed by binutils' objcopy."""
    stripped = path.with_name(path.name + ".nobuildid")
    subprocess.run(
        ["objcopy", "--remove-section=.note.gnu.build-id", str(path), str(stripped)], check=True
    )
    return stripped.read_bytes()


def test_real_upgrade_as_binutils_sees_it(
    wheel_150: Path, real_wheel: Path, tmp_path: Path
) -> None:
    """1.5.0 -> 1.5.1 judged by zipfile and binutils alone: added and removed are the
    namelists' differences; `changed` is every member whose bytes differ, an ELF file once
    objcopy has removed its build-id; the binaries listed are exactly those whose nm -D
    exports, readelf NEEDED, SONAME or RUNPATH differ (plus any whose kernels or schemas do),
    field by field; and the verdicts are pinned."""
    result = run_splitter("diff", str(wheel_150), str(real_wheel), "--json")
    assert result.returncode == 0, result.stderr
    packages = json.loads(result.stdout)["packages"]
    old_zip, new_zip = zipfile.ZipFile(wheel_150), zipfile.ZipFile(real_wheel)
    old = {_neutral(n): n for n in old_zip.namelist() if not n.endswith("/")}
    new = {_neutral(n): n for n in new_zip.namelist() if not n.endswith("/")}
    listed = {
        key: {_neutral(x) for p in packages.values() for x in p[key]}
        for key in ("added", "removed", "changed")
    }
    assert [m for p in packages.values() for m in p["moved"]] == []
    assert listed["added"] == new.keys() - old.keys()
    assert listed["removed"] == old.keys() - new.keys()
    changed, binary_changes = set(), {}
    for name in sorted(old.keys() & new.keys()):
        before, after = old_zip.read(old[name]), new_zip.read(new[name])
        if before == after:
            continue
        if before[:4] != b"\x7fELF":
            changed.add(name)
            continue
        a, b = tmp_path / "a" / name, tmp_path / "b" / name
        for path, data in ((a, before), (b, after)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if _without_build_id(a) != _without_build_id(b):
            changed.add(name)
        exports = (
            nm_defined(wheel_150, old[name], tmp_path),
            nm_defined(real_wheel, new[name], tmp_path),
        )
        dynamic = _dynamic(a), _dynamic(b)
        if exports[0] != exports[1] or dynamic[0] != dynamic[1]:
            binary_changes[name] = (exports, dynamic)
    assert binary_changes  # threadpool's new export at least: the comparison below is real
    assert listed["changed"] == changed
    binaries = {b["path"]: b for p in packages.values() for b in p["binaries"]}
    for path, entry in binaries.items():
        if path not in binary_changes:  # listed for its kernels or operator schemas alone
            assert any(
                entry[k]
                for k in ("kernels_added", "kernels_removed", "schemas_added", "schemas_removed")
            ), path
    assert binary_changes.keys() <= binaries.keys()
    for path, ((old_exports, new_exports), (before, after)) in binary_changes.items():
        entry = binaries[path]
        assert {s["mangled"] for s in entry["symbols_added"]} == new_exports - old_exports
        assert {s["mangled"] for s in entry["symbols_removed"]} == old_exports - new_exports
        assert set(entry["needed_added"]) == set(after["NEEDED"]) - set(before["NEEDED"])
        assert set(entry["needed_removed"]) == set(before["NEEDED"]) - set(after["NEEDED"])
        for field, key in (("soname", "SONAME"), ("runpath", "RUNPATH")):
            same = before[key] == after[key]
            assert entry[field] == (
                None
                if same
                else {
                    "from": before[key][0] if before[key] else None,
                    "to": after[key][0] if after[key] else None,
                }
            ), (path, field)
    assert {n: p["verdict"] for n, p in packages.items()} == {
        "executorch-runtime": "compatible",
        "executorch-kernels-quantized": "unchanged",
        "executorch-export": "incompatible",
    }


def test_same_wheel_has_no_changes(real_wheel: Path) -> None:
    text = run_splitter("diff", str(real_wheel), str(real_wheel), "--exit-code")
    assert text.returncode == 0, text.stderr
    for name in PACKAGES:
        assert f"{name}: unchanged" in text.stdout
    report = json.loads(run_splitter("diff", str(real_wheel), str(real_wheel), "--json").stdout)
    assert report["changed"] is False
    assert {p["verdict"] for p in report["packages"].values()} == {"unchanged"}


def test_bad_input_is_named_and_nothing_is_written(tmp_path: Path, real_wheel: Path) -> None:
    missing = tmp_path / "executorch-1.5.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    result = run_splitter("diff", str(missing), str(real_wheel), cwd=tmp_path)
    assert result.returncode != 0 and str(missing) in result.stderr
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


# --- small wheels, one kind of change each --------------------------------------------------

LIBRARY = r"""
typedef struct { const char *name; const char *key; void (*fn)(void); } Kernel;
typedef struct { const Kernel *data; unsigned long size; } Span;
extern void register_kernels(Span)
    __asm__("_ZN10executorch7runtime16register_kernelsENS0_4SpanIKNS0_6KernelEEE");
static void add_out(void) {}
static void mul_out(void) {}
static const Kernel kernels[] = {
  {"quantized_decomposed::add.out", 0, add_out},
  KERNELS
};
__attribute__((constructor)) static void init(void) {
  Span span = {kernels, sizeof kernels / sizeof kernels[0]};
  register_kernels(span);
}
EXPORTS
"""

RECIPE = """\
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
glob = ["executorch/lib/*.so*", "executorch/include/**"]
package = "executorch-runtime"
reason = "the C++ side"

[[rules]]
glob = ["executorch/**", "executorch-*.dist-info/**"]
exclude = ["executorch/lib/**", "executorch/include/**"]
package = "executorch-export"
reason = "the Python side"

[components]
runtime = { library = "libexecutorch.so" }

[system]
sonames = ["libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"]
"""


def library(directory: Path, kernels: str, exports: str, soname: str, *flags: str) -> bytes:
    """A shared library registering `kernels`, exporting `exports`, linked with `flags`."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the libraries")
    source = directory / f"{abs(hash((kernels, exports, soname, flags)))}.c"
    source.write_text(LIBRARY.replace("KERNELS", kernels).replace("EXPORTS", exports))
    out = source.with_suffix(".so")
    command = [gcc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}", "-o", str(out)]
    subprocess.run([*command, str(source), *flags], check=True)
    return out.read_bytes()


def plain_library(directory: Path, source: str, soname: str) -> bytes:
    """A shared library without kernels."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the libraries")
    path = directory / f"{soname}.c"
    path.write_text(source + "\n")
    out = path.with_suffix(".so")
    subprocess.run(
        [gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(path)], check=True
    )
    return out.read_bytes()


def small(directory: Path, version: str, lib: bytes, python_file: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return make_wheel(
        directory,
        {
            "executorch/lib/libexecutorch.so": lib,
            "executorch/include/executorch.h": b"#pragma once\n",
            python_file: b"VALUE = 1\n",
        },
        version=version,
    )


def test_each_kind_of_change(tmp_path: Path) -> None:
    """A removed symbol, a new kernel, a soname change and a file moved to another package,
    each found, each confirmed by binutils, and the runtime judged incompatible."""
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(RECIPE)
    recipe = load_recipe(recipe_path)
    old_lib = library(
        tmp_path,
        "",
        "int kept(void) { return 1; }\nint dropped(void) { return 2; }",
        "libexecutorch.so",
    )
    new_lib = library(
        tmp_path,
        '{"quantized_decomposed::mul.out", 0, mul_out},',
        "int kept(void) { return 1; }\nint fresh(void) { return 3; }",
        "libexecutorch.so.2",
    )
    old = small(tmp_path / "old", "1.5.0", old_lib, "executorch/exir/moved.py")
    new = small(tmp_path / "new", "1.5.1", new_lib, "executorch/include/moved.py")
    found = diff_plans(make_plan(old, recipe), make_plan(new, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    (binary,) = runtime.binaries
    assert binary.soname == ("libexecutorch.so", "libexecutorch.so.2")
    sonames = []
    for wheel in (old, new):  # readelf -d, independently
        copy = tmp_path / f"{wheel.stem}.so"
        with zipfile.ZipFile(wheel) as archive:
            copy.write_bytes(archive.read("executorch/lib/libexecutorch.so"))
        dynamic = subprocess.run(
            ["readelf", "-d", str(copy)], capture_output=True, text=True, check=True
        ).stdout
        sonames += [
            line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "SONAME" in line
        ]
    assert tuple(sonames) == binary.soname
    old_nm = nm_defined(old, "executorch/lib/libexecutorch.so", tmp_path)
    new_nm = nm_defined(new, "executorch/lib/libexecutorch.so", tmp_path)
    assert set(binary.symbols_removed) == old_nm - new_nm == {"dropped"}
    assert set(binary.symbols_added) == new_nm - old_nm == {"fresh"}
    assert binary.kernels_added == ("quantized_decomposed::mul.out",)
    assert [(m.old, m.new, m.old_package) for m in runtime.moved] == [
        ("executorch/exir/moved.py", "executorch/include/moved.py", "executorch-export")
    ]
    assert runtime.verdict is Verdict.INCOMPATIBLE
    assert [(r.kind, r.subject) for r in runtime.reasons] == [
        (Break.SONAME, "executorch/lib/libexecutorch.so"),
        (Break.SYMBOLS, "executorch/lib/libexecutorch.so"),
        (Break.MOVED_IN, "executorch/include/moved.py"),
    ]
    assert runtime.reasons[1].names == ("dropped",)
    export = next(p for p in found.packages if p.name == "executorch-export")
    assert export.removed == () and export.moved == ()  # it moved out: listed where it went
    # an addition alone is compatible
    added = library(
        tmp_path,
        "",
        "int kept(void) { return 1; }\nint dropped(void) { return 2; }\n"
        "int more(void) { return 4; }",
        "libexecutorch.so",
    )
    grown = small(tmp_path / "grown", "1.5.1", added, "executorch/exir/moved.py")
    found = diff_plans(make_plan(old, recipe), make_plan(grown, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    assert runtime.verdict is Verdict.COMPATIBLE, runtime.reasons
    assert runtime.binaries[0].symbols_added == ("more",)


def test_a_removed_kernel_a_new_needed_and_a_new_requirement(tmp_path: Path) -> None:
    """Three more kinds, each confirmed by an independent tool: a kernel registration removed
    (strings -a finds its name in the old library only) makes the runtime incompatible,
    naming it; a NEEDED added (readelf -d) is listed and compatible; a Requires-Dist added to
    the wheel's METADATA is the export package's compatible metadata change."""
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(RECIPE + '\n[conda.names]\nnumpy = "numpy"\n')
    recipe = load_recipe(recipe_path)
    kernel = '{"quantized_decomposed::mul.out", 0, mul_out},'
    old_lib = library(tmp_path, kernel, "int kept(void) { return 1; }", "libexecutorch.so")
    new_lib = library(
        tmp_path,
        "",
        "#include <math.h>\ndouble kept(double x) { return cos(x); }",
        "libexecutorch.so",
        "-Wl,--no-as-needed",
        "-lm",
    )
    old = small(tmp_path / "old", "1.5.0", old_lib, "executorch/exir/a.py")
    (tmp_path / "new").mkdir()
    metadata = "Metadata-Version: 2.1\nName: executorch\nVersion: 1.5.1\nRequires-Dist: numpy\n"
    new = make_wheel(
        tmp_path / "new",
        {
            "executorch/lib/libexecutorch.so": new_lib,
            "executorch/include/executorch.h": b"#pragma once\n",
            "executorch/exir/a.py": b"VALUE = 1\n",
            "executorch-1.5.1.dist-info/METADATA": metadata.encode(),
        },
    )
    found = diff_plans(make_plan(old, recipe), make_plan(new, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    export = next(p for p in found.packages if p.name == "executorch-export")
    strings = []
    needed = []
    for name, data in (("old.so", old_lib), ("new.so", new_lib)):
        (tmp_path / name).write_bytes(data)
        strings.append(
            subprocess.run(
                ["strings", "-a", str(tmp_path / name)], capture_output=True, text=True, check=True
            ).stdout.split()
        )
        dynamic = subprocess.run(
            ["readelf", "-d", "-W", str(tmp_path / name)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        needed.append(set(re.findall(r"\(NEEDED\)[^\[]*\[(.*)\]", dynamic)))
    kernel_name = "quantized_decomposed::mul.out"
    assert kernel_name in strings[0] and kernel_name not in strings[1]
    (binary,) = runtime.binaries
    assert binary.kernels_removed == (kernel_name,)
    assert set(binary.needed_added) == needed[1] - needed[0]
    assert "libm.so.6" in binary.needed_added
    assert runtime.verdict is Verdict.INCOMPATIBLE
    assert [(r.kind, r.names) for r in runtime.reasons] == [(Break.KERNELS, (kernel_name,))]
    assert [(m.kind, m.subject) for m in export.metadata] == [(Meta.REQUIRES_ADDED, "numpy")]
    assert export.verdict is Verdict.COMPATIBLE


def test_one_pair_per_platform_and_python(real_wheel: Path, real_wheel_aarch64: Path) -> None:
    """--platform/--python: a comparison per pair; wheels of two platforms are refused."""
    result = run_splitter(
        "-q",
        "diff",
        "executorch==1.5.0",
        "executorch==1.5.1",
        "--platform",
        "linux-64,linux-aarch64",
        "--python",
        "3.11",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    pairs = json.loads(result.stdout)["pairs"]
    machines = [(p["from"].endswith("_x86_64.whl"), p["to"].endswith("_x86_64.whl")) for p in pairs]
    assert machines == [(True, True), (False, False)]
    assert pairs[1]["to"].endswith("_aarch64.whl")
    assert all(p["from"].startswith("executorch-1.5.0-") for p in pairs)
    mixed = run_splitter("diff", str(real_wheel), str(real_wheel_aarch64))
    assert mixed.returncode != 0 and "compare wheels of one platform" in mixed.stderr
    assert mixed.stdout == ""


def test_abi_adds_abidiffs_report(wheel_150: Path, real_wheel: Path) -> None:
    """--abi: abidiff on each changed ELF library; the threadpool's added symbol is an ABI
    change abidiff sees, and the report says the wheels carry no debug info."""
    if shutil.which("abidiff") is None:
        pytest.skip("abidiff is not installed (Debian: abigail-tools)")
    result = run_splitter("-q", "diff", str(wheel_150), str(real_wheel), "--abi", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    abi = {r["path"]: r for r in report["abi"]}
    changed = {p for package in report["packages"].values() for p in package["changed"]}
    assert set(abi) <= changed | {
        b["path"] for p in report["packages"].values() for b in p["binaries"]
    }
    threadpool = abi["executorch/lib/libexecutorch_threadpool.so"]
    assert threadpool["status"] & 4 and not threadpool["status"] & 3
    assert "_ZN10executorch9extension16get_thread_countEv" in threadpool["report"]
    assert threadpool["debug_info"] is False and "symbols only" in threadpool["summary"]
    text = run_splitter("-q", "diff", str(wheel_150), str(real_wheel), "--abi")
    assert "abidiff executorch/lib/libexecutorch_threadpool.so: ABI change" in text.stdout


def test_a_new_cmake_component(tmp_path: Path) -> None:
    """A library that makes an optional CMake component: its arrival is a compatible
    addition, its departure an incompatible removal naming the component."""
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(
        RECIPE.replace(
            "[system]",
            'extra = { library = "libexecutorch_extra.so", platforms = [] }\n\n[system]',
        )
    )
    recipe = load_recipe(recipe_path)
    lib = library(tmp_path, "", "int kept(void) { return 1; }", "libexecutorch.so")
    extra = plain_library(tmp_path, "int other(void) { return 5; }", "libexecutorch_extra.so")
    without = small(tmp_path / "without", "1.5.0", lib, "executorch/exir/x.py")
    (tmp_path / "with").mkdir()
    with_extra = make_wheel(
        tmp_path / "with",
        {
            "executorch/lib/libexecutorch.so": lib,
            "executorch/lib/libexecutorch_extra.so": extra,
            "executorch/include/executorch.h": b"#pragma once\n",
            "executorch/exir/x.py": b"VALUE = 1\n",
        },
        version="1.5.1",
    )
    grown = diff_plans(make_plan(without, recipe), make_plan(with_extra, recipe))
    runtime = next(p for p in grown.packages if p.name == "executorch-runtime")
    assert runtime.metadata == (MetadataChange(kind=Meta.COMPONENT_ADDED, subject="extra"),)
    assert "  * CMake component extra: added" in report_lines(grown)
    assert runtime.added == ("executorch/lib/libexecutorch_extra.so",)
    assert runtime.verdict is Verdict.COMPATIBLE, runtime.reasons
    shrunk = diff_plans(make_plan(with_extra, recipe), make_plan(without, recipe))
    runtime = next(p for p in shrunk.packages if p.name == "executorch-runtime")
    assert runtime.verdict is Verdict.INCOMPATIBLE
    removal = MetadataChange(kind=Meta.COMPONENT_REMOVED, subject="extra")
    assert runtime.reasons == (
        Reason(kind=Break.REMOVED, subject="executorch/lib/libexecutorch_extra.so"),
        Reason(kind=Break.METADATA, subject="extra", metadata=removal),
    )
    assert "  incompatible: CMake component extra: removed" in report_lines(shrunk)


COMPONENT = """
[[third_party]]
name = "nlohmann_json"
license = "MIT"
url = "https://github.com/nlohmann/json"
license_text = { repo = "nlohmann/json", path = "LICENSE.MIT", revision = "REVISION" }
symbols = ["json_*"]
"""


def test_a_new_third_party_component(tmp_path: Path) -> None:
    """A library that starts carrying another project's code (nm sees its symbols): diff
    names the component as added, for review, and the package's licence as changed."""
    shipped = next(c for c in load_recipe().third_party if c.name == "nlohmann_json")
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(RECIPE + COMPONENT.replace("REVISION", shipped.license_revision))
    recipe = load_recipe(recipe_path)  # its licence text: the shipped copy
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_lib = plain_library(tmp_path / "old", "int kept(void) { return 1; }", "libexecutorch.so")
    new_lib = plain_library(
        tmp_path / "new",
        "int kept(void) { return 1; }\nint json_parse(void) { return 2; }",
        "libexecutorch.so",
    )
    old = small(tmp_path / "o", "1.5.0", old_lib, "executorch/a.py")
    new = small(tmp_path / "n", "1.5.1", new_lib, "executorch/a.py")
    unpacked = tmp_path / "lib.so"
    unpacked.write_bytes(new_lib)
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(unpacked)], capture_output=True, text=True, check=True
    ).stdout
    assert "json_parse" in listing  # binutils sees the component's symbol
    found = diff_plans(make_plan(old, recipe), make_plan(new, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    assert runtime.third_party == ((), ("nlohmann_json",))
    assert runtime.license[1] == f"{runtime.license[0]} AND MIT"
    kinds = {(m.kind, m.subject) for m in runtime.metadata}
    assert (Meta.THIRD_PARTY_ADDED, "nlohmann_json") in kinds
    assert (Meta.LICENSE_CHANGED, "executorch-runtime") in kinds
    assert runtime.verdict is Verdict.COMPATIBLE  # nothing a consumer built against breaks
    shown = diff_json(found)["packages"]["executorch-runtime"]  # type: ignore[index]
    assert shown["third_party"] == {"from": [], "to": ["nlohmann_json"]}
    assert "third-party component nlohmann_json: added (review its licence)" in shown["metadata"]


def _differing_bytes(old: Path, new: Path) -> list[int]:
    """Offsets (0-based) of the bytes that differ, as binutils' cmp -l lists them."""
    listing = subprocess.run(
        ["cmp", "-l", str(old), str(new)], capture_output=True, text=True, check=False
    ).stdout
    return [int(line.split()[0]) - 1 for line in listing.splitlines()]


def _section(path: Path, name: str) -> range:
    """The file offsets a section occupies, as binutils' readelf -S -W gives them."""
    listing = subprocess.run(
        ["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    for line in listing.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1] == name:
            offset, size = int(fields[4], 16), int(fields[5], 16)
            return range(offset, offset + size)
    raise AssertionError(f"{path} has no {name}")


def test_a_library_differing_only_in_its_build_id_is_not_changed(tmp_path: Path) -> None:
    """One source linked twice with two GNU build-ids: cmp -l finds bytes that differ, all of
    them inside .note.gnu.build-id (readelf -S), so diff lists nothing changed and the
    verdict is unchanged; the same source with one more export is changed, compatible."""
    source = "int kept(void) { return 1; }"
    (tmp_path / "kept.c").write_text(source + "\n")
    files = [tmp_path / "first.so", tmp_path / "second.so"]
    for path, stamp in zip(files, ("aa", "bb"), strict=True):
        command = ["gcc", "-shared", "-fPIC", "-Wl,-soname,libexecutorch.so", "kept.c"]
        subprocess.run(
            [*command, f"-Wl,--build-id=0x{stamp * 20}", "-o", str(path)], cwd=tmp_path, check=True
        )
    stamped = [path.read_bytes() for path in files]
    differing = _differing_bytes(*files)
    note = _section(files[0], ".note.gnu.build-id")
    assert differing and all(offset in note for offset in differing), (differing, note)
    assert note == _section(files[1], ".note.gnu.build-id")
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(RECIPE)
    recipe = load_recipe(recipe_path)
    old = small(tmp_path / "old", "1.5.0", stamped[0], "executorch/exir/a.py")
    new = small(tmp_path / "new", "1.5.1", stamped[1], "executorch/exir/a.py")
    found = diff_plans(make_plan(old, recipe), make_plan(new, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    assert runtime.changed == () and runtime.binaries == (), runtime
    assert runtime.verdict is Verdict.UNCHANGED
    more = plain_library(tmp_path, source + " int more(void) { return 2; }", "libexecutorch.so")
    newer = small(tmp_path / "newer", "1.5.1", more, "executorch/exir/a.py")
    found = diff_plans(make_plan(old, recipe), make_plan(newer, recipe))
    runtime = next(p for p in found.packages if p.name == "executorch-runtime")
    assert runtime.changed == ("executorch/lib/libexecutorch.so",)
    assert runtime.verdict is Verdict.COMPATIBLE
