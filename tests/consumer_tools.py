"""Real CMake versions from PyPI (cached) for the consumer checks; the rest lives in splitter."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from splitter.binaries.elf import analyse_elf
from splitter.model import PackagePlan
from splitter.verify.consumer import (  # noqa: F401  (re-exported for the tests)
    BUILD_TIMEOUT,
    CONSUMER,
    MODEL,
    RUN_PTE,
    Configured,
    build_consumer,
    cmake_version,
    expected_output,
    run_model,
    run_step,
)

# What the tests install comes from the locks in ci/locks (exact versions with hashes, written by
# ci/lock), never from a floating requirement: a new release must not change a test run.
LOCKS = Path(__file__).resolve().parent.parent / "ci" / "locks"

# The CMake lines under test, each locked in ci/locks/cmake-<label>.lock; 3.25 is the machine's
# own cmake when that is 3.25.
CMAKE_LABELS = ("3.24", "3.25", "3.28", "4.x")


def cache_root() -> Path:
    """The splitter test cache ($SPLITTER_CACHE or ~/.cache/splitter)."""
    return Path(os.environ.get("SPLITTER_CACHE") or Path.home() / ".cache" / "splitter")


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock on one cache entry while filling it: the test processes of
    pytest-xdist ask for the same venvs and wheels at once."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def lock_file(name: str) -> tuple[Path, str]:
    """ci/locks/<name>.lock and the first 12 hex digits of its sha256: cache entries filled from
    a lock carry the digest in their name, so refreshing the lock fills them anew."""
    path = LOCKS / f"{name}.lock"
    return path, hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def pip_install_locked(python: Path, name: str, *where: str) -> None:
    """Install exactly what ci/locks/<name>.lock pins (hashes required) with `python`'s pip."""
    lock, _ = lock_file(name)
    command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run(
        [*command, "--require-hashes", "--no-deps", *where, "-r", str(lock)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"pip could not install {lock}:\n{result.stderr}"


def cmake_executable(label: str) -> Path:
    """A cmake binary of the given version line, installed once into the cache from its lock."""
    assert label in CMAKE_LABELS, label
    system = shutil.which("cmake")
    # Check the version itself: a venv's own cmake wheel could shadow the system one on PATH.
    if system and label[0].isdigit() and "x" not in label:
        wanted = tuple(int(part) for part in label.split("."))
        if cmake_version(Path(system)) == wanted:
            return Path(system)
    _, digest = lock_file(f"cmake-{label}")
    target = cache_root() / "cmake" / f"{label}-{digest}"
    binary = target / "cmake" / "data" / "bin" / "cmake"
    with cache_lock(f"cmake-{label}"):
        if not binary.exists():
            pip_install_locked(Path(sys.executable), f"cmake-{label}", "--target", str(target))
    return binary


def locked_venv(name: str) -> Path:
    """The bin directory of a venv in the cache holding exactly ci/locks/<name>.lock (its
    requirements stay out of the test environment)."""
    _, digest = lock_file(name)
    target = cache_root() / name / digest
    with cache_lock(name):
        if not (target / ".complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
            pip_install_locked(target / "bin" / "python", name)
            (target / ".complete").touch()
    return target / "bin"


def conan_executable() -> Path:
    """Conan 2 from ci/locks/conan.lock (requests and Jinja2 among its requirements)."""
    return locked_venv("conan") / "conan"


def build_meson(
    build_dir: Path,
    *,
    quantized: bool,
    pkg_config_path: Path | None = None,
    cmake_prefix: Path | None = None,
    cmake: Path | None = None,
) -> Configured:
    """Configure and build the meson consumer (splitter/checks/consumer/meson.build, the CMake
    consumer's runner.cpp) with meson and ninja from ci/locks/meson.lock: through pkg-config
    from `pkg_config_path`, or through meson's CMake method with `cmake` and `cmake_prefix`.
    The environment is otherwise empty of search paths, so nothing else is found. Each step has
    verify's time limit (BUILD_TIMEOUT): a hung meson or ninja fails its test, not the suite."""
    bin_dir = locked_venv("meson")
    method = "pkg-config" if cmake is None else "cmake"
    path = [str(bin_dir), "/usr/bin", "/bin"]
    env = {"PATH": os.pathsep.join(path), "HOME": str(build_dir.parent)}
    if cmake is not None:
        env["PATH"] = os.pathsep.join([str(cmake.parent), *path])
        env["CMAKE_PREFIX_PATH"] = str(cmake_prefix)
    if pkg_config_path is not None:
        env["PKG_CONFIG_PATH"] = str(pkg_config_path)
    setup = [str(bin_dir / "meson"), "setup", str(build_dir), str(CONSUMER)]
    setup += [f"-Dquantized={'true' if quantized else 'false'}", f"-Dmethod={method}"]
    configure = run_step(setup, BUILD_TIMEOUT, env=env)
    output = configure.stdout + configure.stderr
    if configure.returncode != 0:
        return Configured(configure.returncode, output, build_dir)
    build = run_step([str(bin_dir / "ninja"), "-C", str(build_dir)], BUILD_TIMEOUT, env=env)
    return Configured(build.returncode, output + build.stdout + build.stderr, build_dir)


def meson_runs_the_model(
    work: Path,
    *,
    pkg_config_path: Path | None = None,
    cmake_prefix: Path | None = None,
    cmake: Path | None = None,
) -> None:
    """The meson consumer with the quantized kernels builds, keeps libexecutorch_kernels_quantized
    NEEDED under meson's --as-needed (binutils' readelf) and runs the model byte-identical."""
    built = build_meson(
        work / "m",
        quantized=True,
        pkg_config_path=pkg_config_path,
        cmake_prefix=cmake_prefix,
        cmake=cmake,
    )
    assert built.returncode == 0, built.output
    assert "libexecutorch_kernels_quantized.so" in readelf_needed(built.runner)
    run = run_model(built.runner, work / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (work / "out.bin").read_bytes() == expected_output()


def pkg_config_flags(pc_dir: Path, *args: str) -> list[str]:
    """pkg-config's answer for `args`, searching `pc_dir` only, each path in it normalised
    (quotes, as Conan's PkgConfigDeps writes them, dropped)."""
    result = subprocess.run(
        ["pkg-config", *args],
        env={"PKG_CONFIG_PATH": str(pc_dir), "PKG_CONFIG_LIBDIR": "", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        re.sub(r"(/[^,\s\"]*)", lambda m: os.path.normpath(m[1]), f.strip('"'))
        for f in result.stdout.split()
    ]


def readelf_needed(binary: Path) -> list[str]:
    """NEEDED entries as binutils' readelf reads them (independent of splitter's ELF reader)."""
    listing = subprocess.run(
        ["readelf", "-d", "-W", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", listing)


def needed(binary: Path) -> list[str]:
    """NEEDED entries of an ELF, read with splitter's own analyser."""
    return list(analyse_elf(binary.name, binary.read_bytes()).needed)


def undeclared_document(path: Path) -> dict[str, set[str]]:
    """A development package's splitter-undeclared-functions document, read back: library
    file name -> the qualified functions listed under it."""
    listed: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if (head := re.fullmatch(r"(\S+) \((\d+)\):", line)) is not None:
            current = listed.setdefault(head[1], set())
        elif line.startswith("  ") and current is not None:
            current.add(line.strip())
    return listed


def plan_undeclared(package: PackagePlan) -> dict[str, set[str]]:
    """The plan's undeclared functions of a package, by library file name."""
    return {path.rsplit("/", 1)[-1]: set(names) for path, names in package.undeclared}


def upstream_route(
    site_packages: Path, version: str, build_version: str, tmp_path: Path, cmake_label: str = "4.x"
) -> None:
    """Upstream's documented route into an install (its wheel C++ SDK checks take it): the
    CMake package at <site-packages>/executorch/share/cmake; its version file read as text as
    those checks read it (the quoted versions); a consumer configured with CMAKE_PREFIX_PATH at
    that directory and find_package(ExecuTorch ...) sees executorch_FOUND, and runs the
    quantized model byte-identical; one configured with CMAKE_PREFIX_PATH at
    <site-packages>/executorch builds too."""
    documented = site_packages / "executorch" / "share" / "cmake"
    version_file = documented / "executorch-config-version.cmake"
    installed = built = None
    for line in version_file.read_text().splitlines():
        if line.startswith("set(PACKAGE_VERSION"):
            installed = line.split('"')[1]
        elif line.startswith("set(EXECUTORCH_BUILD_VERSION"):
            built = line.split('"')[1]
    assert (installed, built) == (version, build_version), version_file
    cmake = cmake_executable(cmake_label)
    result = build_consumer(
        cmake,
        tmp_path / "upstream-route",
        prefix=documented,
        quantized=True,
        spelling="ExecuTorch",
    )
    assert result.returncode == 0, result.output
    # the config sets executorch_FOUND as upstream's does; CMake then sets the called name's
    for variable in ("executorch_FOUND", "ExecuTorch_FOUND"):
        assert result.variable(variable) in ("TRUE", "1"), (variable, result.output)
    out = tmp_path / "upstream-route.bin"
    run = run_model(result.runner, out)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == expected_output()
    # upstream's other route: CMAKE_PREFIX_PATH at the package (its lib/cmake/executorch)
    package = build_consumer(
        cmake,
        tmp_path / "package-route",
        prefix=documented.parents[1],
        quantized=True,
    )
    assert package.returncode == 0, package.output


def library_order(result: Configured) -> list[str]:
    """The components EXECUTORCH_LIBRARIES lists, in its order, as the consumer printed it:
    imported targets (executorch::X) or library paths (libexecutorch_X.so, wrapped or not;
    libexecutorch.so is the runtime)."""
    order = []
    for item in result.variable("EXECUTORCH_LIBRARIES").split(";"):
        if item.startswith("executorch::"):
            order.append(item.removeprefix("executorch::"))
            continue
        found = re.search(r"libexecutorch(?:_(\w+?))?\.(?:so|dylib)", item)
        assert found is not None, item
        order.append(found.group(1) or "runtime")
    return order
