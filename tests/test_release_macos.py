"""A macOS arm64 release (cp310, cp311, cp312 of 1.5.1): the runtime is shared although
libexecutorch_backend_mlx.dylib embeds a per-Python build path; any other difference is
refused, naming the file and both wheels, with nothing written."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from builders import replace_member, run_splitter
from machotools import check_signature, same_but_spans

from splitter.binaries.macho import stamp_layout, stamped_spans
from splitter.errors import ReleaseError
from splitter.plan.recipe import load_recipe
from splitter.plan.release import Release, make_release
from splitter.verify.install import conda_info_file

pytestmark = pytest.mark.integration

LIB = "executorch/lib/"
MLX = f"{LIB}libexecutorch_backend_mlx.dylib"
BUILD_PATH = re.compile(
    r"/pip-out/temp\.macosx-14\.0-arm64-cpython-3(\d+)/cmake-out/.*/mlx\.metallib$"
)


@pytest.fixture(scope="module")
def wheels(
    real_wheel_macos_cp310: Path, real_wheel_macos: Path, real_wheel_macos_cp312: Path
) -> list[Path]:
    return [real_wheel_macos_cp310, real_wheel_macos, real_wheel_macos_cp312]


@pytest.fixture(scope="module")
def release(wheels: list[Path]) -> Release:
    return make_release(wheels, load_recipe())


def test_the_runtime_is_shared_with_the_mlx_build_path_set_aside(
    release: Release, wheels: list[Path]
) -> None:
    """Eight runtime dylibs are stamped; MLX's record names its build-path string in each of
    the three wheels, each naming that wheel's own CPython, at one offset."""
    (group,) = release.groups
    assert group.subdir == "osx-arm64" and group.source.wheel.path == wheels[0]
    assert len(group.stamped) == 8
    by_path = {f.path: f for f in group.stamped}
    mlx = by_path[MLX]
    assert mlx.wheels == (wheels[1].name, wheels[2].name)
    assert [s.wheel for s in mlx.strings] == [w.name for w in wheels]
    assert len({s.offset for s in mlx.strings}) == 1
    for string, wheel in zip(mlx.strings, wheels, strict=True):
        match = BUILD_PATH.search(string.text)
        assert match is not None, string.text
        assert f"cp3{match.group(1)}-" in wheel.name
    assert [f.path for f in group.stamped if f.strings] == [MLX]
    assert (
        mlx.set_aside == "LC_UUID and code signature and strings naming each wheel's Python build"
    )


def test_the_set_aside_string_is_the_only_other_difference(wheels: list[Path]) -> None:
    """Independently: cmp-style, every byte of MLX that differs between cp310 and cp312 outside
    LC_UUID and the signature is in the one string inside __TEXT,__cstring; the other seven
    differing dylibs differ only in the link stamps; every copy's signature holds."""
    left, right = zipfile.ZipFile(wheels[0]), zipfile.ZipFile(wheels[2])
    a, b = left.read(MLX), right.read(MLX)
    spans, (cstring,) = stamp_layout(MLX, a)
    outside = [
        i for i in range(len(a)) if a[i] != b[i] and not any(s <= i < s + n for s, n in spans)
    ]
    assert outside and all(cstring[0] <= i < cstring[0] + cstring[1] for i in outside)
    start = a.rfind(b"\0", 0, outside[0]) + 1
    assert all(i < a.index(b"\0", start) for i in outside)
    assert (
        b"cpython-310" in a[start : outside[-1] + 4]
        and b"cpython-312" in b[start : outside[-1] + 4]
    )
    assert check_signature(a) == check_signature(b) == []
    stamped_only = []
    for name in sorted(n for n in left.namelist() if n.endswith(".dylib") and n.startswith(LIB)):
        x, y = left.read(name), right.read(name)
        if x != y and same_but_spans(x, y, stamped_spans(name, x), stamped_spans(name, y)):
            stamped_only.append(name)
    assert len(stamped_only) == 7 and MLX not in stamped_only


def _flip_code_byte(data: bytes) -> bytes:
    """One byte of __TEXT,__text changed (the signature is not redone: it is set aside)."""
    import lief

    binary = lief.MachO.parse(data).at(0)
    text = binary.get_section("__TEXT", "__text")
    changed = bytearray(data)
    changed[text.offset + text.size // 2] ^= 0xFF
    return bytes(changed)


def _change_another_string(data: bytes) -> bytes:
    """One letter of a __cstring string other than the build path upper-cased."""
    _, ((start, size),) = stamp_layout(MLX, data)
    section = data[start : start + size]
    found = re.search(rb"\0([a-z][a-z ]{8,})\0", section)
    assert found is not None and b"cpython" not in found.group(1)
    changed = bytearray(data)
    changed[start + found.start(1)] ^= 0x20
    return bytes(changed)


@pytest.mark.parametrize(
    ("member", "tamper", "why"),
    [
        (f"{LIB}libexecutorch.dylib", _flip_code_byte, "is outside its read-only string sections"),
        (MLX, _change_another_string, "differs beyond the Python build it names"),
    ],
    ids=["code-byte", "another-string"],
)
def test_any_other_difference_is_refused_and_nothing_written(
    wheels: list[Path], tmp_path: Path, member: str, tamper: object, why: str
) -> None:
    """cp312 tampered (RECORD kept valid): plan and the conda and wheel builds refuse naming
    the file and both wheels, exit 11; the working directory stays empty."""
    assert callable(tamper)
    changed = tmp_path / "wheels" / wheels[2].name
    changed.parent.mkdir()
    shutil.copyfile(wheels[2], changed)
    with zipfile.ZipFile(changed) as archive:
        replace_member(changed, member, tamper(archive.read(member)))
    with pytest.raises(ReleaseError) as raised:
        make_release([wheels[0], wheels[1], changed], load_recipe())
    message = str(raised.value)
    assert f"beyond its LC_UUID and code signature: {member}; " in message
    assert f"wheels {wheels[0].name} and {changed.name}" in message
    assert why in message
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for command in (
        ("plan",),
        ("build", "-t", "conda", "-o", "out"),
        ("build", "-t", "wheel", "-o", "out"),
    ):
        result = run_splitter(*command, str(wheels[0]), str(wheels[1]), str(changed), cwd=cwd)
        assert result.returncode == ReleaseError.exit_code, result.stderr
        assert member in result.stderr and wheels[0].name in result.stderr, result.stderr
        assert sorted(cwd.iterdir()) == []


def test_plan_of_every_platform_is_the_fifteen_wheels() -> None:
    """`--python all --platform all` is cp310-cp314 on linux-64, linux-aarch64 and osx-arm64:
    15 wheels, each platform's shared packages from its cp310 wheel; the matrix names each
    stamped file and what was set aside in it (MLX's build path, once per macOS wheel)."""
    request = ("--python", "all", "--platform", "all", "executorch==1.5.1")
    result = run_splitter("plan", "--json", *request)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["inputs"]) == 15
    platforms = {p["subdir"]: p for p in data["platforms"]}
    assert sorted(platforms) == ["linux-64", "linux-aarch64", "osx-arm64"]
    for subdir, platform in platforms.items():
        assert platform["pythons"] == ["3.10", "3.11", "3.12", "3.13", "3.14"], subdir
        assert "-cp310-cp310-" in platform["shared_from"]
    stamped = {subdir: p["stamped"] for subdir, p in platforms.items()}
    assert [len(stamped[s]) for s in sorted(stamped)] == [7, 6, 8]
    (mlx,) = [f for f in stamped["osx-arm64"] if f["strings"]]
    assert mlx["path"] == MLX and len(mlx["strings"]) == 5
    assert [s["wheel"].split("-")[2] for s in mlx["strings"]] == [
        f"cp3{minor}" for minor in range(10, 15)
    ]
    assert all(s["strings"] == [] for p in ("linux-64", "linux-aarch64") for s in stamped[p])
    shown = run_splitter("plan", *request)
    assert shown.returncode == 0, shown.stderr
    assert "executorch 1.5.1: 15 wheels, 3 platform(s)" in shown.stdout
    assert f"{MLX}: the same but for its LC_UUID and code signature and strings" in shown.stdout


def test_the_runtime_wheel_names_what_was_set_aside(wheels: list[Path], tmp_path: Path) -> None:
    """`--target wheel` of the three: one runtime and one kernels-quantized wheel, three
    exports; the runtime's METADATA names every wheel with its sha256, each stamped file, and
    MLX's build-path string per wheel; its MLX dylib is the cp310 wheel's, byte for byte."""
    out = tmp_path / "wheels"
    result = run_splitter("build", "-q", "-t", "wheel", *map(str, wheels), "-o", str(out))
    assert result.returncode == 0, result.stderr
    built = sorted(p.name for p in out.glob("*.whl"))
    assert [n.split("-")[0] for n in built] == ["executorch_export"] * 3 + [
        "executorch_kernels_quantized",
        "executorch_runtime",
    ]
    (runtime,) = out.glob("executorch_runtime-*.whl")
    with zipfile.ZipFile(runtime) as archive:
        text = archive.read("executorch_runtime-1.5.1.dist-info/METADATA").decode()
        shipped = archive.read(MLX)
    assert shipped == zipfile.ZipFile(wheels[0]).read(MLX)
    for wheel in wheels:
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f"- {wheel.name} (sha256 {digest})" in text
        cp = wheel.name.split("-")[2].removeprefix("cp")
        assert f"  - {wheel.name} at 0x" in text and f"-cpython-{cp}/cmake-out/" in text
    assert f"- {MLX}: its LC_UUID and code signature and strings naming each" in text
    assert f"- {LIB}libexecutorch_etdump.dylib: its LC_UUID and code signature\n" in text
    (quantized,) = out.glob("executorch_kernels_quantized-*.whl")
    with zipfile.ZipFile(quantized) as archive:
        text = archive.read("executorch_kernels_quantized-1.5.1.dist-info/METADATA").decode()
    assert "libexecutorch_kernels_quantized.dylib: its LC_UUID and code signature\n" in text
    assert "cpython-3" not in text


SUBDIRS = ("linux-64", "linux-aarch64", "osx-arm64")
SHARED = ("executorch-kernels-quantized", "executorch-runtime")


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The conda channel of the 15 wheels, by one command (~30 s with the wheels cached)."""
    out = tmp_path_factory.mktemp("release15") / "channel"
    request = ("--python", "all", "--platform", "all", "executorch==1.5.1")
    result = run_splitter("build", "-q", "-t", "conda", *request, "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_the_channel_of_fifteen_wheels(channel: Path) -> None:
    """Each subdir: one runtime, one kernels-quantized and five exports pinning exactly that
    subdir's shared builds; repodata per subdir; the osx-arm64 runtime holds mlx.metallib
    beside libexecutorch_backend_mlx.dylib."""
    for subdir in SUBDIRS:
        records = json.loads((channel / subdir / "repodata.json").read_text())["packages.conda"]
        names = sorted(r["name"] for r in records.values())
        assert names == ["executorch-export"] * 5 + list(SHARED), subdir
        pins = {
            f"{r['name']} =={r['version']} {r['build']}"
            for r in records.values()
            if r["name"] in SHARED
        }
        exports = [r for r in records.values() if r["name"] == "executorch-export"]
        assert all(pins <= set(r["depends"]) for r in exports), subdir
        assert sorted(r["build"][:5] for r in exports) == [f"py3{m}" for m in range(10, 15)]
    (runtime,) = (channel / "osx-arm64").glob("executorch-runtime-*.conda")
    paths = [p["_path"] for p in json.loads(conda_info_file(runtime, "info/paths.json"))["paths"]]
    assert "lib/libexecutorch_backend_mlx.dylib" in paths and "lib/mlx.metallib" in paths


def test_verify_and_doctor_accept_the_fifteen_wheel_channel(channel: Path) -> None:
    """verify checks this machine's exports it has a CPython for, runs the static macOS checks
    on each osx-arm64 environment (signatures, resolution, mlx.metallib beside MLX) and lists
    the other Linux ones as skipped; doctor --output diagnoses an environment per export of
    every subdir; both exit 0."""
    verified = run_splitter("verify", str(channel), "--json")
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] is True
    skipped = [r["subject"] for r in report["checks"] if r["check"] == "release"]
    assert len(skipped) <= 9 and not any("osx-arm64" in s for s in skipped), skipped
    together = [r for r in report["checks"] if r["check"] == "together"]
    assert len(together) == 5 and {r["status"] for r in together} == {"pass"}
    signatures = [r for r in report["checks"] if r["check"] == "signature"]
    assert len(signatures) == 5 * 19 and {r["status"] for r in signatures} == {"pass"}
    doctor = run_splitter("doctor", "--output", str(channel), "--json")
    assert doctor.returncode == 0, doctor.stderr
    environments = json.loads(doctor.stdout)["environments"]
    assert len(environments) == 15


def test_the_runtime_tree_record_names_what_was_set_aside(
    wheels: list[Path], tmp_path: Path
) -> None:
    """`--target tree` of the three: the runtime's .json says, under "release", every wheel
    it stands for and each file set aside with MLX's strings per wheel (as plan --json does);
    mlx.metallib sits beside the MLX dylib; an export's record has no "release"."""
    out = tmp_path / "trees"
    result = run_splitter("build", "-q", "-t", "tree", *map(str, wheels), "-o", str(out))
    assert result.returncode == 0, result.stderr
    record = json.loads((out / "osx-arm64" / "executorch-runtime.json").read_text())
    release = record["release"]
    assert [i["filename"] for i in release["inputs"]] == [w.name for w in wheels]
    by_path = {f["path"]: f for f in release["set_aside"]}
    assert len(by_path) == 7 and MLX in by_path  # the eighth is the quantized library's
    assert [s["wheel"] for s in by_path[MLX]["strings"]] == [w.name for w in wheels]
    installed = {Path(f["path"]).name: Path(f["path"]).parent for f in record["files"]}
    assert installed["mlx.metallib"] == installed["libexecutorch_backend_mlx.dylib"]
    export = json.loads((out / "osx-arm64" / "executorch-export-py311.json").read_text())
    assert "release" not in export
