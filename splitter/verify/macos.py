"""What `splitter verify` can check of a macOS (Mach-O) output on a machine that is not a Mac:
code signatures, dyld's resolution inside the installed layout, and the CMake config evaluated
for Darwin without a compiler. Co-loading, the C++ consumer and the model need macOS."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from splitter.binaries.codesign import signature_problems
from splitter.binaries.macho import analyse_macho, is_macho
from splitter.binaries.resolve import find_unresolved
from splitter.model import Recipe
from splitter.platforms import MACOSX, by_subdir
from splitter.verify.consumer import cmake_version
from splitter.verify.install import Installed
from splitter.verify.rows import Row

# (row, subject, expected, detail, passed)
MacRow = tuple[Row, str, str, str, bool]
NEEDS_MACOS = "needs macOS (arm64): dyld, the Apple toolchain and codesign are not here"
# find_package as a Darwin consumer, without languages (no compiler is run)
PROBE = """cmake_minimum_required(VERSION 3.19)
project(probe NONE)
find_package(executorch REQUIRED CONFIG COMPONENTS @COMPONENTS@)
message(STATUS "SPLITTER_QUANTIZED=${EXECUTORCH_QUANTIZED_KERNELS_LIBRARY}")
"""


def is_macos_output(full: Installed) -> bool:
    """Whether the installed output is a macOS split (its artifacts' platform)."""
    platform = by_subdir(full.platform)
    return platform is not None and platform.family == MACOSX


def macos_checks(full: Installed, cmakes: list[Path], recipe: Recipe) -> list[MacRow]:
    """(check, subject, expected, detail, passed) rows for what runs without a Mac, against
    `recipe` (the one the output was built with)."""
    files = {
        p.relative_to(full.root).as_posix(): p
        for p in sorted(full.root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "conda-meta" not in p.parts
    }
    machos = {rel: path for rel, path in files.items() if is_macho(path.read_bytes()[:4])}
    rows = []
    for relative, path in machos.items():
        problems = signature_problems(path.read_bytes())
        rows.append(
            (Row.SIGNATURE, relative, "valid ad-hoc signature", "; ".join(problems), not problems)
        )
    allowed = frozenset(recipe.system_sonames) | frozenset(
        s for e in recipe.externals for s in e.sonames
    )
    unresolved = find_unresolved(
        files, allowed, elves=frozenset(machos), system_paths=recipe.system_paths
    )
    rows.append(
        (
            Row.RESOLUTION,
            f"{len(machos)} Mach-O files",
            "every @rpath dependency inside the layout",
            "; ".join(unresolved),
            not unresolved,
        )
    )
    rows += _kernel_rows(full, machos)
    rows += together_rows(files, recipe)
    components = "kernels_quantized" if full.quantized in full.packages else "runtime"
    for cmake in cmakes:
        version = ".".join(map(str, cmake_version(cmake)))
        with tempfile.TemporaryDirectory(prefix="splitter-darwin-cmake-") as scratch:
            source = Path(scratch)
            (source / "CMakeLists.txt").write_text(PROBE.replace("@COMPONENTS@", components))
            darwin = ["-DCMAKE_SYSTEM_NAME=Darwin", f"-DCMAKE_PREFIX_PATH={full.cmake_prefix}"]
            result = subprocess.run(
                [str(cmake), "-S", str(source), "-B", str(source / "build"), *darwin],
                capture_output=True,
                text=True,
                check=False,
            )
        tail = (result.stderr.strip().splitlines() or [""])[-1]
        rows.append(
            (
                Row.CMAKE_DARWIN,
                f"CMake {version}",
                f"find_package(executorch COMPONENTS {components}) configures",
                "" if result.returncode == 0 else tail,
                result.returncode == 0,
            )
        )
    return rows


def together_rows(files: dict[str, Path], recipe: Recipe) -> list[MacRow]:
    """Each [[together]] group of the recipe whose files the output installs: all of them, in
    one directory (MLX finds mlx.metallib beside its library; its compiled-in fallback is a
    build directory of the wheel's Python). A group none of whose files is installed (another
    platform's) has no row."""
    rows = []
    for group in recipe.together:
        names = [PurePosixPath(f).name for f in group.files]
        places = {
            name: sorted(
                str(PurePosixPath(rel).parent) for rel in files if PurePosixPath(rel).name == name
            )
            for name in names
        }
        if not any(places.values()):
            continue
        directories = {d for found in places.values() for d in found}
        passed = (
            all(places.values())
            and len(directories) == 1
            and all(len(p) == 1 for p in places.values())
        )
        detail = "; ".join(
            f"{name} in {', '.join(found) or 'no directory'}" for name, found in places.items()
        )
        rows.append(
            (
                Row.TOGETHER,
                " + ".join(names),
                "installed in one directory",
                "" if passed else detail,
                passed,
            )
        )
    return rows


def _kernel_rows(full: Installed, machos: dict[str, Path]) -> list[MacRow]:
    """Each file of a shipped exclusivity record registers, installed, the kernels the record
    says the plan counted (its `operators` field; a file whose count is unknown, null, or a
    record written before the field existed, has no row)."""
    by_name = {Path(rel).name: path for rel, path in machos.items()}
    rows = []
    for verdict in full.verdicts:
        for entry in verdict["files"]:
            wheel_path = entry["path"]
            expected = entry.get("operators")
            installed = by_name.get(Path(wheel_path).name)
            if not isinstance(expected, int) or installed is None:
                continue
            info = analyse_macho(wheel_path, installed.read_bytes())
            found = len(info.et_operators)
            rows.append(
                (
                    Row.KERNELS,
                    Path(wheel_path).name,
                    f"{expected} in static tables, as planned",
                    "" if found == expected else f"{found} found",
                    found == expected and info.operators_known,
                )
            )
    return rows
