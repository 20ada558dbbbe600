"""--target conan on the real wheel, checked with Conan 2 itself (from ci/locks/conan.lock):
the archives restore into a fresh CONAN_HOME with no remote, a consumer's `conan install
--build=never` resolves them with its own compiler settings, and the C++ consumer (CMakeDeps +
CMakeToolchain) runs the quantized model byte-identical, on CMake 4.x and, through the
variables route, 3.24."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from consumer_tools import (
    build_consumer,
    build_meson,
    cmake_executable,
    conan_executable,
    expected_output,
    meson_runs_the_model,
    pkg_config_flags,
    run_model,
)

from splitter.model import Plan
from splitter.targets.builder import build_output
from splitter.targets.conan import ConanBuilder

pytestmark = pytest.mark.integration

PACKAGES = ("executorch-runtime", "executorch-kernels-quantized")
ARCHIVES = tuple(f"{p}-1.5.1-Linux-x86_64.conan.tgz" for p in PACKAGES)
# A consumer's host profile: a compiler the packages were not built with (splitter's binaries
# are upstream's); their package ID is os and arch alone, so --build=never still finds them.
PROFILE = """[settings]
os=Linux
arch=x86_64
build_type=Release
compiler={compiler}
compiler.version={version}
compiler.libcxx=libstdc++11
compiler.cppstd=17
"""


@pytest.fixture(scope="module")
def conan() -> Iterator[Path]:
    """conan from its lock, on PATH for splitter's build."""
    binary = conan_executable()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
        yield binary


@pytest.fixture(scope="module")
def out(real_plan: Plan, conan: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conan") / "out"
    written = build_output(ConanBuilder(), real_plan, out).artifacts
    assert sorted(p.name for p in written) == sorted(ARCHIVES)
    for package in PACKAGES:
        assert (out / package / "conanfile.py").is_file()
    return out


def conan_in(conan: Path, home: Path, *args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(conan), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**os.environ, "CONAN_HOME": str(home), "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def home(out: Path, conan: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh CONAN_HOME with no remote at all, the archives restored into it."""
    home = tmp_path_factory.mktemp("conan-home")
    (home / "profiles").mkdir()
    (home / "profiles" / "default").write_text(PROFILE.format(compiler="gcc", version="12"))
    (home / "profiles" / "clang").write_text(PROFILE.format(compiler="clang", version="14"))
    conan_in(conan, home, "remote", "remove", "*")
    assert json.loads(conan_in(conan, home, "remote", "list", "--format=json")) == []
    for name in ARCHIVES:
        conan_in(conan, home, "cache", "restore", str(out / name))
    return home


def consumer(
    conan: Path, home: Path, where: Path, packages: tuple[str, ...], profile: str = "default"
) -> Path:
    """A consumer's conanfile.txt requiring `packages`, installed with --build=never; the
    CMake toolchain file it gives."""
    where.mkdir()
    requires = "".join(f"{p}/1.5.1\n" for p in packages)
    (where / "conanfile.txt").write_text(
        f"[requires]\n{requires}\n[generators]\nCMakeDeps\nCMakeToolchain\n"
    )
    conan_in(conan, home, "install", ".", "--build=never", f"-pr:a={profile}", "-of=gen", cwd=where)
    return where / "gen" / "conan_toolchain.cmake"


def test_restored_packages_run_the_model(conan: Path, home: Path, tmp_path: Path) -> None:
    """The issue's check: CMake 4.x, find_package(executorch REQUIRED COMPONENTS
    kernels_quantized), executorch::kernels_quantized linked; the output is the committed
    one, byte for byte."""
    toolchain = consumer(conan, home, tmp_path / "c", PACKAGES)
    built = build_consumer(
        cmake_executable("4.x"), tmp_path / "b", quantized=True, toolchain=toolchain
    )
    assert built.returncode == 0, built.output
    run = run_model(built.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


def test_without_kernels_quantized_configure_names_the_package(
    conan: Path, home: Path, tmp_path: Path
) -> None:
    toolchain = consumer(conan, home, tmp_path / "c", ("executorch-runtime",))
    built = build_consumer(
        cmake_executable("3.28"), tmp_path / "b", quantized=True, toolchain=toolchain
    )
    assert built.returncode != 0
    assert "install the executorch-kernels-quantized package" in " ".join(built.output.split())


@pytest.mark.parametrize("packages", [PACKAGES, PACKAGES[:1]], ids=["both", "runtime-only"])
def test_pkgconfigdeps_with_meson(
    conan: Path, home: Path, tmp_path: Path, packages: tuple[str, ...]
) -> None:
    """A Conan user with meson: `conan install --requires=... -g PkgConfigDeps --build=never`
    writes executorch.pc and executorch-kernels-quantized.pc from package_info alone; the meson
    consumer keeps the quantized library NEEDED under meson's --as-needed (readelf) and runs
    the model byte-identical. Their Cflags are those of splitter's own executorch.pc in the
    package. Without the quantized package, configure fails naming it."""
    where = tmp_path / "c"
    where.mkdir()
    requires = [f"--requires={p}/1.5.1" for p in packages]
    conan_in(
        conan,
        home,
        "install",
        *requires,
        "-g",
        "PkgConfigDeps",
        "--build=never",
        "-of=gen",
        cwd=where,
    )
    gen = where / "gen"
    if packages != PACKAGES:
        built = build_meson(tmp_path / "m", quantized=True, pkg_config_path=gen)
        assert built.returncode != 0
        assert 'Dependency "executorch-kernels-quantized" not found' in built.output
        return
    meson_runs_the_model(tmp_path, pkg_config_path=gen)
    (folder,) = pkg_config_flags(gen, "--variable=prefix", "executorch")
    shipped = Path(folder) / "lib" / "pkgconfig"
    cflags = pkg_config_flags(gen, "--cflags", "executorch")
    assert set(cflags) == set(pkg_config_flags(shipped, "--cflags", "executorch"))


def test_variables_route_before_cmake_3_28(conan: Path, home: Path, tmp_path: Path) -> None:
    """CMake 3.24: EXECUTORCH_LIBRARIES and EXECUTORCH_QUANTIZED_KERNELS_LIBRARY; the program
    runs in the environment Conan generates for it (conanrun.sh: each package's lib folder,
    as for every Conan package of shared libraries)."""
    toolchain = consumer(conan, home, tmp_path / "c", PACKAGES)
    built = build_consumer(
        cmake_executable("3.24"), tmp_path / "b", quantized=True, toolchain=toolchain
    )
    assert built.returncode == 0, built.output
    conanrun = toolchain.parent / "conanrun.sh"
    model = run_model(built.runner, tmp_path / "plain.bin")
    assert model.returncode != 0  # the quantized library is in its own package folder
    command = f'. "{conanrun}" && exec "$@"'
    args = [str(a) for a in model.args]
    result = subprocess.run(
        ["sh", "-c", command, "sh", *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plain.bin").read_bytes() == expected_output()


def test_binaries_match_any_compiler(conan: Path, home: Path, tmp_path: Path) -> None:
    """The package ID is os and arch alone: a clang profile resolves the same binaries with
    --build=never, and each package says what it needs of the system."""
    consumer(conan, home, tmp_path / "c", PACKAGES, profile="clang")
    listed = json.loads(conan_in(conan, home, "list", "executorch-runtime/1.5.1:*", "-f=json"))
    packages = next(iter(listed["Local Cache"]["executorch-runtime/1.5.1"]["revisions"].values()))
    (info,) = [p["info"] for p in packages["packages"].values()]
    assert info == {"settings": {"arch": "x86_64", "os": "Linux"}}


def test_packages_hold_the_record_licence_and_cmake_config(
    conan: Path, home: Path, out: Path
) -> None:
    """What a restored package holds: the libraries, splitter's CMake config and fragment,
    the licence, and the exclusivity record, also in the package's metadata."""
    for package, library in (
        ("executorch-runtime", "libexecutorch.so"),
        ("executorch-kernels-quantized", "libexecutorch_kernels_quantized.so"),
    ):
        listed = json.loads(conan_in(conan, home, "list", f"{package}/1.5.1:*", "-f=json"))
        revisions = listed["Local Cache"][f"{package}/1.5.1"]["revisions"]
        (package_id,) = next(iter(revisions.values()))["packages"]
        folder = Path(
            conan_in(conan, home, "cache", "path", f"{package}/1.5.1:{package_id}").strip()
        )
        assert (folder / "lib" / library).is_file()
        licences = folder / "licenses" / package
        assert (licences / "LICENSE").read_text().startswith("BSD")
        # the runtime's libraries carry Eigen (MPL-2.0) and more; the quantized kernels none
        texts = {p.name for p in licences.iterdir()}
        assert ("Eigen-COPYING.MPL2" in texts) == (package == "executorch-runtime")
        assert texts != {"LICENSE"} or package == "executorch-kernels-quantized"
        sbom = json.loads((folder / "share" / "doc" / package / "sbom.cdx.json").read_text())
        assert sbom["metadata"]["component"]["purl"] == f"pkg:conan/{package}@1.5.1"
        record = json.loads(
            (folder / "share" / "doc" / package / "splitter-process-exclusive.json").read_text()
        )
        assert record["package"] == package
        metadata = Path(
            conan_in(
                conan, home, "cache", "path", f"{package}/1.5.1:{package_id}", "--folder=metadata"
            ).strip()
        )
        assert json.loads((metadata / "splitter-process-exclusive.json").read_text()) == record
    runtime_config = "lib/cmake/executorch/executorch-config.cmake"
    with tarfile.open(out / ARCHIVES[0]) as archive:
        assert any(n.endswith(runtime_config) for n in archive.getnames())
    text = (out / "executorch-kernels-quantized" / "conanfile.py").read_text()
    assert 'requires = ["executorch-runtime/1.5.1"]' in text
    assert "executorch-runtime::runtime" in text


def test_two_builds_are_byte_identical(
    real_plan: Plan, conan: Path, out: Path, tmp_path: Path
) -> None:
    again = build_output(ConanBuilder(), real_plan, tmp_path / "again").written
    for path in again:
        relative = path.relative_to(tmp_path / "again")
        assert path.read_bytes() == (out / relative).read_bytes(), relative


def test_release_gives_one_binary_per_platform(
    real_wheel: Path,
    real_wheel_aarch64: Path,
    real_wheel_macos: Path,
    conan: Path,
    tmp_path: Path,
) -> None:
    """The cp311 wheels of Linux x86_64, Linux aarch64 and macOS arm64: one conanfile.py per
    package holding each platform's components, six archives; restored into one cache, each
    platform's consumer profile resolves its binaries with --build=never, and a platform
    that was not built is refused naming the ones that were."""
    from splitter.plan.recipe import load_recipe
    from splitter.plan.release import make_release

    release = make_release([real_wheel, real_wheel_aarch64, real_wheel_macos], load_recipe())
    out = tmp_path / "out"
    written = build_output(ConanBuilder(), release, out).artifacts
    platforms = ("Linux-x86_64", "Linux-armv8", "Macos-armv8")
    assert sorted(p.name for p in written) == sorted(
        f"{p}-1.5.1-{key}.conan.tgz" for p in PACKAGES for key in platforms
    )
    text = (out / "executorch-runtime" / "conanfile.py").read_text()
    for key in platforms:
        assert f"'{key}': {{'components'" in text, key
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    profiles = {
        "Linux-x86_64": PROFILE.format(compiler="gcc", version="12"),
        "Linux-armv8": PROFILE.format(compiler="gcc", version="12").replace("x86_64", "armv8"),
        "Macos-armv8": PROFILE.format(compiler="apple-clang", version="15")
        .replace("os=Linux", "os=Macos")
        .replace("x86_64", "armv8")
        .replace("libstdc++11", "libc++"),
    }
    for key, profile in profiles.items():
        (home / "profiles" / key).write_text(profile)
    (home / "profiles" / "default").write_text(profiles["Linux-x86_64"])
    conan_in(conan, home, "remote", "remove", "*")
    for path in written:
        conan_in(conan, home, "cache", "restore", str(path))
    for key in platforms:
        graph = consumer(conan, home, tmp_path / f"c-{key}", PACKAGES, profile=key)
        assert graph.is_file(), key
    # Conan's own check of every restored file against its conanmanifest.txt, which
    # reproducible() rewrote; and each platform's binaries are that platform's (binutils'
    # readelf -h, LLVM's Mach-O header), whatever the archive's name says.
    checked = subprocess.run(
        [str(conan), "cache", "check-integrity", "*"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CONAN_HOME": str(home), "NO_COLOR": "1"},
    )
    assert checked.returncode == 0, checked.stderr
    verdicts = re.findall(r"^(\S+): Integrity check: (\w+)$", checked.stderr, re.M)
    assert len(verdicts) == len(PACKAGES) * (1 + len(platforms)), checked.stderr  # recipes too
    assert {verdict for _, verdict in verdicts} == {"ok"}, checked.stderr
    machines = {"Linux-x86_64": "X86-64", "Linux-armv8": "AArch64", "Macos-armv8": "ARM64"}
    for package in PACKAGES:
        listed = json.loads(conan_in(conan, home, "list", f"{package}/1.5.1:*", "-f=json"))
        revisions = listed["Local Cache"][f"{package}/1.5.1"]["revisions"]
        found = {}
        for package_id, entry in next(iter(revisions.values()))["packages"].items():
            settings = entry["info"]["settings"]
            key = f"{settings['os']}-{settings['arch']}"
            folder = conan_in(conan, home, "cache", "path", f"{package}/1.5.1:{package_id}")
            libraries = sorted((Path(folder.strip()) / "lib").glob("lib*.*"))
            assert libraries, (package, key)
            found[key] = {_machine(library) for library in libraries}
        assert found == {key: {machines[key]} for key in platforms}, package
    windows = PROFILE.format(compiler="msvc", version="193").replace("os=Linux", "os=Windows")
    (home / "profiles" / "windows").write_text(windows.replace("compiler.libcxx=libstdc++11\n", ""))
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "conanfile.txt").write_text("[requires]\nexecutorch-runtime/1.5.1\n")
    refused = subprocess.run(
        [str(conan), "install", ".", "--build=never", "-pr:h=windows", "-pr:b=default"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path / "w",
        env={**os.environ, "CONAN_HOME": str(home), "NO_COLOR": "1"},
    )
    assert refused.returncode != 0
    assert "no prebuilt binary for Windows-x86_64" in refused.stdout + refused.stderr


def _machine(library: Path) -> str:
    """The machine a shared library is built for, read by binutils (ELF) or LLVM (Mach-O)."""
    if library.read_bytes()[:4] == b"\x7fELF":
        header = subprocess.run(
            ["readelf", "-h", str(library)], capture_output=True, text=True, check=True
        ).stdout
        (line,) = [line for line in header.splitlines() if line.strip().startswith("Machine:")]
        return line.split()[-1]  # "Advanced Micro Devices X86-64", "AArch64"
    header = subprocess.run(
        ["llvm-objdump-14", "--macho", "--private-header", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return header.splitlines()[-1].split()[1]  # MH_MAGIC_64 ARM64 ...


def test_verify_says_it_does_not_install_conan_archives(out: Path) -> None:
    from splitter.errors import UsageError
    from splitter.verify.run import verify

    with pytest.raises(UsageError, match=r"verify does not install Conan archives.*\n.*restore"):
        verify(out, [], [cmake_executable("3.28")], 2, ("cmake",))
