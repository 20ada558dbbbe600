"""The bug this tool exists for, reproduced from the real 1.5.1 wheel.

Two different files that register the same operator names into the registry
owned by ``libexecutorch.so`` abort the process ("Re-registering
quantized_decomposed::add.out", SIGABRT).  One file loaded twice does not.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:  # tests/ on sys.path (pytest "prepend" mode, no tests/__init__.py)
    from dupplugin import (
        DUP_OPERATORS,
        PLUGIN_ARCNAME,
        PLUGIN_RUNPATH,
        PLUGIN_SONAME,
        make_dup_wheel,
        verify_record,
    )
except ImportError:  # tests is a package
    from tests.dupplugin import (
        DUP_OPERATORS,
        PLUGIN_ARCNAME,
        PLUGIN_RUNPATH,
        PLUGIN_SONAME,
        make_dup_wheel,
        verify_record,
    )

pytestmark = pytest.mark.integration

LIBEXECUTORCH = "executorch/lib/libexecutorch.so"
QUANTIZED_LIB = "executorch/lib/libexecutorch_kernels_quantized.so"

# Loads each argv path with RTLD_GLOBAL, in order, in a fresh interpreter.
_LOADER = """
import ctypes, sys
for path in sys.argv[1:]:
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    print("loaded", path, flush=True)
print("ALL-LOADED", flush=True)
"""


@pytest.fixture(scope="module")
def dup_wheel(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dup_wheel(real_wheel, tmp_path_factory.mktemp("dup-wheel"))


@pytest.fixture(scope="module")
def unpacked(dup_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The modified wheel, unpacked (only the libraries the tests load)."""
    root = tmp_path_factory.mktemp("dup-unpacked")
    with zipfile.ZipFile(dup_wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith("executorch/lib/") or info.filename == PLUGIN_ARCNAME:
                path = Path(zf.extract(info, root))
                if not info.is_dir():
                    path.chmod(info.external_attr >> 16 & 0o777 or 0o644)
    return root


def _load(root: Path, *relpaths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _LOADER, *(str(root / p) for p in relpaths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )


def _assert_reregistration_abort(proc: subprocess.CompletedProcess[str]) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode in (-6, 134), f"expected SIGABRT, got {proc.returncode}:\n{output}"
    assert "ALL-LOADED" not in proc.stdout, output
    assert "Re-registering" in output, output
    assert "quantized_decomposed::" in output, output


def test_plugin_shape(unpacked: Path) -> None:
    """The fixture plugin imports (not defines) register_kernels and links libexecutorch only."""
    plugin = unpacked / PLUGIN_ARCNAME
    dyn = subprocess.run(
        ["readelf", "-d", "-W", str(plugin)], capture_output=True, text=True, check=True
    ).stdout
    assert f"Library soname: [{PLUGIN_SONAME}]" in dyn
    assert f"Library runpath: [{PLUGIN_RUNPATH}]" in dyn
    needed = [line.split("[", 1)[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
    assert "libexecutorch.so" in needed
    assert not [n for n in needed if n.startswith("libexecutorch") and n != "libexecutorch.so"]
    syms = subprocess.run(
        ["nm", "-D", str(plugin)], capture_output=True, text=True, check=True
    ).stdout
    reg = [line for line in syms.splitlines() if "register_kernels" in line]
    assert reg and all(line.split()[0] == "U" for line in reg), reg
    data = plugin.read_bytes()
    for op in DUP_OPERATORS:
        assert op.encode() + b"\0" in data
        assert op.encode() + b"\0" in (unpacked / QUANTIZED_LIB).read_bytes()


def test_plugin_alone_loads(unpacked: Path) -> None:
    """Alone (libexecutorch found through its RUNPATH), the fixture registers fine."""
    proc = _load(unpacked, PLUGIN_ARCNAME)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ALL-LOADED" in proc.stdout


def test_quantized_then_dup_plugin_aborts(unpacked: Path) -> None:
    _assert_reregistration_abort(_load(unpacked, LIBEXECUTORCH, QUANTIZED_LIB, PLUGIN_ARCNAME))


def test_dup_plugin_then_quantized_aborts(unpacked: Path) -> None:
    _assert_reregistration_abort(_load(unpacked, LIBEXECUTORCH, PLUGIN_ARCNAME, QUANTIZED_LIB))


def test_same_file_twice_is_one_copy(unpacked: Path) -> None:
    """Control: the 1.5.1 layout (plugin NEEDs the quantized lib) = one copy, no abort."""
    proc = _load(unpacked, LIBEXECUTORCH, QUANTIZED_LIB, QUANTIZED_LIB)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ALL-LOADED" in proc.stdout
    assert "Re-registering" not in proc.stdout + proc.stderr


def test_dup_wheel_record_verifies(real_wheel: Path, dup_wheel: Path) -> None:
    assert dup_wheel.name == real_wheel.name
    assert verify_record(dup_wheel) == []
    with zipfile.ZipFile(real_wheel) as zr, zipfile.ZipFile(dup_wheel) as zd:
        real_infos, dup_infos = zr.infolist(), zd.infolist()
        assert [i.filename for i in dup_infos] == [i.filename for i in real_infos]
        (record_name,) = [n for n in zr.namelist() if n.endswith(".dist-info/RECORD")]
        changed = set()
        for ri, di in zip(real_infos, dup_infos, strict=True):
            assert (di.date_time, di.external_attr, di.compress_type) == (
                ri.date_time,
                ri.external_attr,
                ri.compress_type,
            ), ri.filename
            if zr.read(ri) != zd.read(di):
                changed.add(ri.filename)
        assert changed == {PLUGIN_ARCNAME, record_name}
        assert zd.read(PLUGIN_ARCNAME) != zr.read(PLUGIN_ARCNAME)


def test_dup_wheel_is_deterministic(real_wheel: Path, dup_wheel: Path, tmp_path: Path) -> None:
    again = make_dup_wheel(real_wheel, tmp_path)
    assert again.read_bytes() == dup_wheel.read_bytes()
