"""splitter doctor on prefixes, binaries and live processes built from the real 1.5.1 wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from splitter.binaries.elf import REGISTER_KERNELS
from splitter.doctor.diagnose import (
    Diagnosis,
    DoctorError,
    diagnose_binary,
    diagnose_pid,
    diagnose_prefix,
)

try:  # tests/ on sys.path (pytest "prepend" mode, no tests/__init__.py)
    from dupplugin import build_dup_plugin
except ImportError:  # tests is a package
    from tests.dupplugin import build_dup_plugin

LIB = "executorch/lib"
SITE = "lib/python3.11/site-packages"
PLUGIN = "executorch/kernels/quantized/libquantized_ops_aot_lib.so"
QLIB = "libexecutorch_kernels_quantized.so"
OPTIMIZED = "libexecutorch_kernels_optimized.so"

# Loads each argv path in order with the mode in argv[1], then waits to be inspected.
LOADER = """
import ctypes, sys, time
for path in sys.argv[2:]:
    ctypes.CDLL(path, mode=getattr(ctypes, sys.argv[1]))
print("READY", flush=True)
time.sleep(300)
"""


def make_prefix(unpacked: Path, prefix: Path) -> Path:
    """A conda-style prefix: runtime libraries in lib/, the `_C` extension and plugin in site."""
    (prefix / "lib").mkdir(parents=True)
    for library in (unpacked / LIB).glob("*.so"):
        shutil.copy2(library, prefix / "lib" / library.name)
    (extension,) = (unpacked / "executorch/extension/pybindings").glob("_C.*.so")
    for source in (extension, unpacked / PLUGIN):
        target = prefix / SITE / source.relative_to(unpacked)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    # Links name a file already seen: one file, not two copies.
    (prefix / "lib" / "libexecutorch.so.1").symlink_to("libexecutorch.so")
    os.link(prefix / "lib" / QLIB, prefix / SITE / "executorch" / QLIB)
    return prefix


def by_name(diagnosis: Diagnosis) -> dict[str, tuple[str, int]]:
    return {Path(x.path).name: (x.registry, x.operators) for x in diagnosis.libraries}


@contextmanager
def process_loading(*paths: Path, mode: str = "RTLD_GLOBAL") -> Iterator[int]:
    """A live interpreter that has dlopened `paths`; killed on exit."""
    with subprocess.Popen(
        [sys.executable, "-c", LOADER, mode, *map(str, paths)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            ready = proc.stdout.readline()
            assert ready == "READY\n", proc.stderr.read()
            yield proc.pid
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def clean_prefix(unpacked_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_prefix(unpacked_wheel, tmp_path_factory.mktemp("clean") / "prefix")


@pytest.fixture(scope="module")
def mixed_prefix(
    unpacked_wheel: Path, real_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The clean prefix plus the upstream wheel pip-installed into its site-packages."""
    prefix = make_prefix(unpacked_wheel, tmp_path_factory.mktemp("mixed") / "prefix")
    # --upgrade: without it pip --target skips the existing executorch/ and installs nothing.
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--no-index"]
    command += ["--disable-pip-version-check", "--upgrade", "--target", str(prefix / SITE)]
    subprocess.run([*command, str(real_wheel)], check=True, capture_output=True)
    assert (prefix / SITE / LIB / "libexecutorch.so").is_file()
    return prefix


@pytest.mark.integration
def test_clean_prefix_is_ok(clean_prefix: Path) -> None:
    diagnosis = diagnose_prefix(clean_prefix)
    assert diagnosis.ok, diagnosis.hazards
    assert by_name(diagnosis) == {
        "libexecutorch.so": ("owns", 28),
        OPTIMIZED: ("uses", 212),
        QLIB: ("uses", 19),
    }
    assert all(Path(x.path).parent == clean_prefix / "lib" for x in diagnosis.libraries)
    assert diagnosis.notes == ()


@pytest.mark.integration
def test_upstream_wheel_over_prefix_would_clash(mixed_prefix: Path) -> None:
    diagnosis = diagnose_prefix(mixed_prefix)
    assert not diagnosis.ok
    kinds = {(h.kind, Path(h.files[0]).name) for h in diagnosis.hazards}
    assert kinds == {
        ("duplicate-registry", "libexecutorch.so"),
        ("duplicate-kernels", OPTIMIZED),
        ("duplicate-kernels", QLIB),
    }
    for hazard in diagnosis.hazards:
        (name,) = {Path(f).name for f in hazard.files}
        ours, upstream = mixed_prefix / "lib" / name, mixed_prefix / SITE / LIB / name
        assert hazard.files == (str(ours), str(upstream))
        assert str(ours) in hazard.message and str(upstream) in hazard.message
        assert "would meet if loaded into one process" in hazard.message
    (quantized,) = [h for h in diagnosis.hazards if h.files[0].endswith(QLIB)]
    assert "19 ExecuTorch operators" in quantized.message
    assert "(e.g. quantized_decomposed::add.out)" in quantized.message
    assert "loading both aborts with 'Re-registering <operator>'" in quantized.message
    (registry,) = [h for h in diagnosis.hazards if h.kind == "duplicate-registry"]
    assert registry.message.startswith("two copies of libexecutorch.so")
    assert "Missing operator" in registry.message
    assert "the next copy aborts with 'Re-registering'" in registry.message


@pytest.mark.integration
def test_json_is_sorted_and_stable(mixed_prefix: Path) -> None:
    data = diagnose_prefix(mixed_prefix).to_json()
    assert data["schema"] == "splitter.doctor/1" and data["ok"] is False
    assert data["mode"] == "prefix" and data["target"] == str(mixed_prefix)
    paths = [x["path"] for x in data["libraries"]]
    assert paths == sorted(paths) and len(paths) == 7
    # upstream's custom-ops plugin imports register_kernels but has no static Kernel table: it
    # builds its 11 kernels in code (tests/test_kernel_counts.py), so its count is unknown
    custom = [x for x in data["libraries"] if x["path"].endswith("libcustom_ops_aot_lib.so")]
    assert [(x["registry"], x["operators"]) for x in custom] == [("uses", None)]
    assert any("operators unknown" in n and "libcustom_ops_aot_lib.so" in n for n in data["notes"])
    hazards = [(h["kind"], h["files"]) for h in data["hazards"]]
    assert hazards == sorted(hazards)
    again = json.dumps(diagnose_prefix(mixed_prefix).to_json(), sort_keys=True)
    assert json.dumps(data, sort_keys=True) == again


@pytest.mark.integration
def test_binary_closure_resolves_through_origin(unpacked_wheel: Path) -> None:
    library = unpacked_wheel / LIB / QLIB
    diagnosis = diagnose_binary(library, search=[])
    resolved = {(x.source, x.needed): x.path for x in diagnosis.links}
    for needed in ("libexecutorch.so", "libexecutorch_threadpool.so"):
        assert resolved[(str(library), needed)] == str(unpacked_wheel / LIB / needed)
    assert diagnosis.ok and diagnosis.unresolved == ()
    assert by_name(diagnosis) == {"libexecutorch.so": ("owns", 28), QLIB: ("uses", 19)}


@pytest.mark.integration
def test_binary_reports_unresolved_then_library_path(unpacked_wheel: Path, tmp_path: Path) -> None:
    alone = tmp_path / QLIB
    shutil.copy2(unpacked_wheel / LIB / QLIB, alone)
    missing = {x.needed for x in diagnose_binary(alone, search=[]).unresolved}
    assert missing == {"libexecutorch.so", "libexecutorch_threadpool.so"}
    found = diagnose_binary(alone, search=[unpacked_wheel / LIB])
    assert found.unresolved == ()
    assert {x.path for x in found.links if x.needed == "libexecutorch.so"} == {
        str(unpacked_wheel / LIB / "libexecutorch.so")
    }


@pytest.mark.integration
def test_process_lists_what_it_loaded(unpacked_wheel: Path) -> None:
    lib = unpacked_wheel / LIB
    with process_loading(lib / "libexecutorch.so", lib / QLIB) as pid:
        diagnosis = diagnose_pid(pid)
    assert diagnosis.ok, diagnosis.hazards
    assert by_name(diagnosis) == {"libexecutorch.so": ("owns", 28), QLIB: ("uses", 19)}
    assert diagnosis.mode == "pid" and diagnosis.target == str(pid)


@pytest.mark.integration
def test_process_with_two_registries(unpacked_wheel: Path, tmp_path: Path) -> None:
    original = unpacked_wheel / LIB / "libexecutorch.so"
    copy = tmp_path / "libexecutorch.so"
    shutil.copy2(original, copy)
    # RTLD_LOCAL: with RTLD_GLOBAL the second copy aborts on load (Re-registering).
    with process_loading(original, copy, mode="RTLD_LOCAL") as pid:
        diagnosis = diagnose_pid(pid)
    (hazard,) = diagnosis.hazards
    assert hazard.kind == "duplicate-registry"
    assert set(hazard.files) == {str(original), str(copy)}
    assert f"two copies of libexecutorch.so do meet in process {pid}" in hazard.message


@pytest.mark.integration
def test_plugin_with_its_own_kernels_would_clash(unpacked_wheel: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "lib").mkdir(parents=True)
    for name in ("libexecutorch.so", "libexecutorch_threadpool.so", QLIB):
        shutil.copy2(unpacked_wheel / LIB / name, prefix / "lib" / name)
    plugin = prefix / SITE / PLUGIN
    build_dup_plugin(unpacked_wheel / "executorch", plugin.parent)
    diagnosis = diagnose_prefix(prefix)
    (hazard,) = diagnosis.hazards
    assert hazard.kind == "duplicate-kernels"
    assert hazard.files == (str(prefix / "lib" / QLIB), str(plugin))
    assert "both register 4 ExecuTorch operators (e.g. quantized_decomposed::add.out)" in (
        hazard.message
    )


def test_junk_is_skipped_with_notes(tmp_path: Path) -> None:
    site = tmp_path / SITE / "pkg"
    site.mkdir(parents=True)
    (tmp_path / "lib" / "libscript.so").write_text("INPUT ( libc.so.6 )\n")
    (tmp_path / "lib" / "libgone.so.1").symlink_to("nowhere.so.1")
    (site / "broken.so").write_bytes(b"\x7fELF" + bytes(60) + REGISTER_KERNELS)
    (site / "data.sorted.txt").write_text("not a library name")
    diagnosis = diagnose_prefix(tmp_path)
    assert diagnosis.ok and diagnosis.libraries == ()
    assert diagnosis.notes == (
        f"skipped (No such file or directory): {tmp_path / 'lib/libgone.so.1'}",
        f"skipped (not an ELF file): {tmp_path / 'lib/libscript.so'}",
        f"skipped (cannot read ELF (Invalid EI_CLASS b'\\x00')): {site / 'broken.so'}",
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda t: diagnose_prefix(t / "absent"), "no lib/ directory", id="prefix"),
        pytest.param(lambda t: diagnose_binary(t / "absent.so"), "no such binary", id="binary"),
        pytest.param(lambda t: diagnose_binary(t / "text.so"), "not an ELF file", id="not-elf"),
        pytest.param(lambda t: diagnose_pid(2**22 + 1), "no such process", id="pid"),
        pytest.param(lambda t: diagnose_pid(0), "not a process id", id="pid-zero"),
    ],
)
def test_bad_targets_raise(call: object, message: str, tmp_path: Path) -> None:
    (tmp_path / "text.so").write_text("hello")
    with pytest.raises(DoctorError, match=message) as error:
        call(tmp_path)  # type: ignore[operator]
    assert error.value.exit_code == 10
