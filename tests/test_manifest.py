"""The output manifest and the publish that keeps a user's files: every target, one driver.

The builds run the CLI on the real wheel into an OUT that already holds a user's `notes.txt`
and a sub-folder (the tree twice: the second build replaces the first's files); each output's
manifest is checked against the files with hashlib, and `verify`/`doctor` are shown to refuse
an output altered after its build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import run_splitter
from consumer_tools import conan_executable

from splitter.errors import OutputError
from splitter.manifest import NAME
from splitter.targets.output import atomic_output

TARGETS = ("conda", "wheel", "tree", "deb", "rpm", "conan")
PACKAGE_SUFFIXES = (".conda", ".whl", ".deb", ".rpm", ".dsc", ".tar.gz", ".tar.xz", ".conan.tgz")
# The packages each target makes: Conan's are the C++ side's alone.
PACKAGES = ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")
TARGET_PACKAGES = {target: set(PACKAGES) for target in TARGETS} | {"conan": set(PACKAGES[:2])}


def user_files(out: Path) -> dict[str, bytes]:
    """A user's files in OUT before any build: a note and a sub-folder with a file."""
    files = {"notes.txt": b"my notes\n", "keep/mine/data.bin": b"\x00\x01\x02"}
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    return files


@pytest.fixture(scope="module")
def outputs(
    real_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """Each target built into an OUT holding a user's files; the tree twice (the second build
    replaces the first's files: the publishing step is the same for every target, and the
    manifest check below shows each target's files are exactly its manifest's)."""
    if not shutil.which("dpkg-deb") or not shutil.which("rpmbuild"):
        pytest.fail("dpkg-deb and rpmbuild are needed (apt-get install dpkg-dev rpm)")
    root = tmp_path_factory.mktemp("manifest")
    built = {}
    with pytest.MonkeyPatch.context() as patch:  # conan from its lock, for --target conan
        patch.setenv("PATH", f"{conan_executable().parent}{os.pathsep}{os.environ['PATH']}")
        for target in TARGETS:
            out = root / target
            out.mkdir()
            user_files(out)
            for _ in range(2 if target == "tree" else 1):
                command = ("build", "-q", "-t", target, "-o", str(out), str(real_wheel))
                result = run_splitter(*command)
                assert result.returncode == 0, result.stderr
            built[target] = out
        yield built


@pytest.mark.integration
@pytest.mark.parametrize("target", TARGETS)
def test_every_target_writes_a_manifest_that_lists_what_is_there(
    target: str, outputs: dict[str, Path], real_wheel: Path
) -> None:
    """Each artifact exists with the sha256 and size hashlib gives; every package file in OUT
    is an artifact; the files list is exactly what the build wrote (the user's files aside)."""
    out = outputs[target]
    manifest = json.loads((out / NAME).read_text())
    assert manifest["target"] == target
    wheel_sha = hashlib.sha256(real_wheel.read_bytes()).hexdigest()
    assert manifest["inputs"] == [{"filename": real_wheel.name, "sha256": wheel_sha}]
    artifacts = manifest["artifacts"]
    binaries = [a for a in artifacts if a["platform"] != "source"]
    sources = [a for a in artifacts if a["platform"] == "source"]
    assert {a["package"] for a in binaries} == TARGET_PACKAGES[target]
    for artifact in artifacts:
        data = (out / artifact["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == artifact["sha256"], artifact["path"]
        assert len(data) == artifact["size"], artifact["path"]
    for artifact in binaries:
        assert artifact["platform"] == "linux-64"
        python = "3.11" if artifact["package"] == "executorch-export" else None
        assert artifact["python"] == python, artifact
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    # the source package that rebuilds them (.dsc and its tarballs, .src.rpm) is published
    # too: artifacts of the source package, platform "source"
    on_disk_sources = {p for p in on_disk if p.endswith((".src.rpm", ".dsc", ".tar.gz", ".tar.xz"))}
    assert {a["path"] for a in sources} == on_disk_sources
    assert {(a["package"], a["python"]) for a in sources} <= {("executorch", None)}
    assert bool(sources) == (target in ("deb", "rpm")), sources
    packages = {p for p in on_disk if p.endswith(PACKAGE_SUFFIXES)}
    if target == "tree":
        packages = {p for p in on_disk if p.count("/") == 0 and p.endswith(".json")} - {NAME}
    assert packages == {a["path"] for a in binaries} | on_disk_sources
    assert set(manifest["files"]) == on_disk - {NAME, "notes.txt", "keep/mine/data.bin"}


@pytest.mark.integration
@pytest.mark.parametrize("target", TARGETS)
def test_a_users_files_in_out_survive_every_target(
    target: str, outputs: dict[str, Path], tmp_path: Path
) -> None:
    """notes.txt and a sub-folder the user keeps in -o DIR are there, unchanged, after each
    target's build (two of the tree's)."""
    out = outputs[target]
    expected = user_files(tmp_path)
    for name, data in expected.items():
        assert (out / name).read_bytes() == data, f"{target}: {name}"


@pytest.mark.integration
def test_a_file_the_build_would_overwrite_is_refused_naming_it(
    real_wheel: Path, tmp_path: Path
) -> None:
    """A wheel in OUT that no splitter build wrote, under the name the build would write:
    the build stops naming it, exit 9, and OUT is as it was."""
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "executorch_runtime-1.5.1-py3-none-manylinux_2_28_x86_64.whl"
    mine.write_bytes(b"the user's own wheel\n")
    result = run_splitter("build", "-q", "-t", "wheel", "-o", str(out), str(real_wheel))
    assert result.returncode == 9, result.stderr
    assert str(mine) in result.stderr and "splitter did not write" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [mine.name]
    assert mine.read_bytes() == b"the user's own wheel\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging left beside


@pytest.mark.integration
@pytest.mark.parametrize("command", ["verify", "doctor"])
def test_an_altered_package_is_refused_before_anything_is_installed(
    command: str, outputs: dict[str, Path], tmp_path: Path
) -> None:
    """One byte of the runtime .conda changed after the build: verify and doctor --output exit
    non-zero naming that file."""
    channel = tmp_path / "channel"
    shutil.copytree(outputs["conda"], channel)
    (runtime,) = channel.glob("linux-64/executorch-runtime-*.conda")
    data = bytearray(runtime.read_bytes())
    data[len(data) // 2] ^= 0xFF
    runtime.write_bytes(bytes(data))
    args = ["verify", str(channel)] if command == "verify" else ["doctor", "--output", str(channel)]
    result = run_splitter(*args)
    assert result.returncode == 14, result.stdout + result.stderr
    assert f"changed since the build (sha256 differs): {runtime}" in result.stderr


@pytest.mark.integration
def test_verify_refuses_an_output_without_a_manifest(
    outputs: dict[str, Path], tmp_path: Path
) -> None:
    """A directory that no splitter build wrote (its manifest removed) is not verified."""
    wheels = tmp_path / "wheels"
    shutil.copytree(outputs["wheel"], wheels)
    (wheels / NAME).unlink()
    result = run_splitter("verify", str(wheels))
    assert result.returncode == 14, result.stderr
    assert f"not a splitter output (no {NAME}): {wheels}" in result.stderr


def publish_files(out: Path, files: dict[str, bytes]) -> None:
    """Publish `files` into OUT through atomic_output, with a manifest listing them."""
    with atomic_output(out) as build:
        for name, data in files.items():
            (build / name).parent.mkdir(parents=True, exist_ok=True)
            (build / name).write_bytes(data)
        listing = {"files": sorted(files)}
        (build / NAME).write_text(json.dumps(listing))


def test_publish_replaces_the_previous_build_and_keeps_the_rest(tmp_path: Path) -> None:
    """The second build's files replace the first's; a file only the first wrote goes, with
    the directory it leaves empty; a user's file beside them, even inside a directory the
    builds write, stays."""
    out = tmp_path / "out"
    publish_files(out, {"a/one.txt": b"1", "a/old.txt": b"old", "gone/x.txt": b"x"})
    (out / "a" / "user.txt").write_bytes(b"user")
    publish_files(out, {"a/one.txt": b"2", "b/two.txt": b"2"})
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert on_disk == {"a/one.txt", "a/user.txt", "b/two.txt", NAME}
    assert (out / "a" / "one.txt").read_bytes() == b"2"
    assert not (out / "gone").exists()


def test_publish_refuses_before_changing_anything(tmp_path: Path) -> None:
    """A user's file where the build writes a file, or where it needs a directory: refused,
    both named, OUT unchanged."""
    out = tmp_path / "out"
    publish_files(out, {"a/one.txt": b"1"})
    (out / "b.txt").write_bytes(b"user")
    (out / "c").write_bytes(b"user's file named like the build's directory")
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(OutputError, match=r"2 file.*splitter did not write") as raised:
        publish_files(out, {"a/one.txt": b"2", "b.txt": b"build", "c/d.txt": b"build"})
    assert str(out / "b.txt") in str(raised.value) and str(out / "c") in str(raised.value)
    after = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
