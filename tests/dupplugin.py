"""Build the "duplicate kernel registration" fixture from the real ExecuTorch wheel.

Before ExecuTorch 1.5 the quantized export plugin
(``executorch/kernels/quantized/libquantized_ops_aot_lib.so``) carried its own
copy of the quantized kernels and registered them itself, so loading it beside
``executorch/lib/libexecutorch_kernels_quantized.so`` aborted the process with
``Re-registering quantized_decomposed::add.out``.  In 1.5.1 the plugin links the
quantized library instead, so the two coexist.

This module recreates the old, broken shape from the 1.5.1 wheel:

* :func:`build_dup_plugin` compiles ``tests/data/dup_plugin/dup_plugin.cpp``
  against the wheel's own headers and links it to the wheel's
  ``libexecutorch.so`` only; at load time it registers a few
  ``quantized_decomposed::*.out`` kernels under the same names the quantized
  library registers.
* :func:`make_dup_wheel` writes a copy of the real wheel in which the plugin is
  replaced by that library, with the RECORD row updated so the wheel still
  verifies.
"""

from __future__ import annotations

import copy
import csv
import io
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from splitter.input.wheel import record_hash

PLUGIN_SOURCE = Path(__file__).parent / "data" / "dup_plugin" / "dup_plugin.cpp"
PLUGIN_ARCNAME = "executorch/kernels/quantized/libquantized_ops_aot_lib.so"
PLUGIN_SONAME = "libquantized_ops_aot_lib.so"
# Same first RUNPATH entry as the real plugin: executorch/kernels/quantized -> executorch/lib.
PLUGIN_RUNPATH = "$ORIGIN/../../lib"
# Operator names the fixture registers (all of them are also registered by
# executorch/lib/libexecutorch_kernels_quantized.so).
DUP_OPERATORS = (
    "quantized_decomposed::add.out",
    "quantized_decomposed::quantize_per_tensor.out",
    "quantized_decomposed::dequantize_per_tensor.out",
    "quantized_decomposed::embedding_byte.out",
)

_INCLUDE_PREFIX = "executorch/include/"
_LIBEXECUTORCH = "executorch/lib/libexecutorch.so"


class DupPluginBuildError(RuntimeError):
    """The fixture plugin could not be compiled or linked."""


def compile_command(unpacked_executorch_dir: Path, output: Path) -> list[str]:
    """The g++ command line that builds the plugin (exposed for reporting/debugging)."""
    include = unpacked_executorch_dir / "include"
    c10 = include / "executorch" / "runtime" / "core" / "portable_type" / "c10"
    libdir = unpacked_executorch_dir / "lib"
    return [
        "g++",
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-DC10_USING_CUSTOM_GENERATED_MACROS",
        f"-I{include}",
        f"-I{c10}",
        "-o",
        str(output),
        str(PLUGIN_SOURCE),
        f"-Wl,-soname,{PLUGIN_SONAME}",
        f"-Wl,--enable-new-dtags,-rpath,{PLUGIN_RUNPATH}",
        f"-L{libdir}",
        # libexecutorch.so must be NEEDED (it owns the registry we register
        # into); everything else only if actually used.
        "-Wl,--no-as-needed",
        "-lexecutorch",
        "-Wl,--as-needed",
    ]


def build_dup_plugin(unpacked_executorch_dir: Path, out_dir: Path) -> Path:
    """Compile the duplicate-registration plugin.

    ``unpacked_executorch_dir`` is the ``executorch/`` directory of an unpacked
    wheel (it must contain ``include/`` and ``lib/libexecutorch.so``).  Returns
    the path of ``out_dir/libquantized_ops_aot_lib.so``.
    """
    unpacked_executorch_dir = Path(unpacked_executorch_dir)
    out_dir = Path(out_dir)
    for needed in (
        unpacked_executorch_dir / "include",
        unpacked_executorch_dir / "lib" / "libexecutorch.so",
    ):
        if not needed.exists():
            raise DupPluginBuildError(
                f"{needed} does not exist; is {unpacked_executorch_dir} an unpacked executorch/?"
            )
    if shutil.which("g++") is None:
        raise DupPluginBuildError(
            "g++ not found on PATH; it is needed to build the dup plugin fixture"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / PLUGIN_SONAME
    cmd = compile_command(unpacked_executorch_dir, output)
    try:
        subprocess.run(cmd, capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as exc:
        raise DupPluginBuildError(
            f"building the dup plugin failed (exit {exc.returncode}):\n"
            f"$ {shlex.join(cmd)}\n{exc.stdout}{exc.stderr}"
        ) from exc
    if not output.is_file():
        raise DupPluginBuildError(f"g++ succeeded but {output} was not written")
    return output


def _unpack_build_inputs(real_wheel: Path, dest: Path) -> Path:
    """Extract only what the plugin build needs (headers + libexecutorch.so)."""
    with zipfile.ZipFile(real_wheel) as zf:
        members = [
            info
            for info in zf.infolist()
            if info.filename.startswith(_INCLUDE_PREFIX) or info.filename == _LIBEXECUTORCH
        ]
        if not any(info.filename == _LIBEXECUTORCH for info in members):
            raise DupPluginBuildError(f"{real_wheel} has no {_LIBEXECUTORCH}")
        for info in members:
            zf.extract(info, dest)
    return dest / "executorch"


def _rewrite_record(record: bytes, arcname: str, data: bytes) -> bytes:
    """Replace the RECORD row of ``arcname``; every other byte stays as it was."""
    lines = record.decode("utf-8").splitlines(keepends=True)
    out: list[str] = []
    found = False
    for line in lines:
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        row = next(csv.reader([body]), [])
        if row and row[0] == arcname:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow(
                [arcname, record_hash(data), str(len(data))]
            )
            line = buf.getvalue() + ending
            found = True
        out.append(line)
    if not found:
        raise ValueError(f"RECORD has no row for {arcname}")
    return "".join(out).encode("utf-8")


def make_dup_wheel(real_wheel: Path, out_dir: Path, *, plugin: Path | None = None) -> Path:
    """Write ``out_dir/<real wheel name>`` with the quantized plugin replaced.

    The replacement is the library built by :func:`build_dup_plugin` (built here
    from the wheel's own headers unless ``plugin`` is given).  All other entries
    are copied in order with their original ``ZipInfo`` (name, timestamp, mode,
    compression type) and unchanged contents; RECORD is rewritten with the new
    hash and size for the plugin row.  Same input -> same output bytes.
    """
    real_wheel = Path(real_wheel)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / real_wheel.name
    if target.resolve() == real_wheel.resolve():
        raise ValueError("out_dir must differ from the real wheel's directory")

    with tempfile.TemporaryDirectory(prefix="dup-plugin-") as tmp:
        if plugin is None:
            unpacked = _unpack_build_inputs(real_wheel, Path(tmp) / "wheel")
            plugin = build_dup_plugin(unpacked, Path(tmp) / "build")
        plugin_bytes = Path(plugin).read_bytes()

        with zipfile.ZipFile(real_wheel) as zin:
            infos = zin.infolist()
            names = [info.filename for info in infos]
            if PLUGIN_ARCNAME not in names:
                raise ValueError(f"{real_wheel} has no {PLUGIN_ARCNAME}")
            records = [n for n in names if n.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise ValueError(f"{real_wheel}: expected one .dist-info/RECORD, found {records}")
            record_name = records[0]

            tmp_target = target.with_name(target.name + ".part")
            with zipfile.ZipFile(tmp_target, "w") as zout:
                for info in infos:
                    data = zin.read(info)
                    if info.filename == PLUGIN_ARCNAME:
                        data = plugin_bytes
                    elif info.filename == record_name:
                        data = _rewrite_record(data, PLUGIN_ARCNAME, plugin_bytes)
                    # A copy, so writing (which updates sizes/CRC/offsets) never
                    # touches the ZipInfo that describes the source archive.
                    zout.writestr(copy.copy(info), data)
            tmp_target.replace(target)
    return target


def verify_record(wheel: Path) -> list[str]:
    """Check every RECORD row of ``wheel`` against the archive; return the problems."""
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        files = {info.filename for info in zf.infolist() if not info.is_dir()}
        record_names = [n for n in files if n.endswith(".dist-info/RECORD")]
        if len(record_names) != 1:
            return [f"expected one RECORD, found {record_names}"]
        record_name = record_names[0]
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode("utf-8"))))
        listed: set[str] = set()
        for row in rows:
            if not row:
                continue
            name, hash_, size = [*row, "", ""][:3]
            listed.add(name)
            if name not in files:
                problems.append(f"{name}: in RECORD but not in the archive")
                continue
            if name == record_name:
                if hash_ or size:
                    problems.append(f"{name}: RECORD must not hash itself")
                continue
            data = zf.read(name)
            if hash_ != record_hash(data):
                problems.append(f"{name}: hash {hash_} != {record_hash(data)}")
            if size != str(len(data)):
                problems.append(f"{name}: size {size} != {len(data)}")
        for name in sorted(files - listed):
            problems.append(f"{name}: in the archive but not in RECORD")
    return problems
