"""Build small wheels and recipes for tests from {path: bytes}; RECORD is computed here. Run
the CLI as a user does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from splitter.input.wheel import record_hash

METADATA = """Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: test wheel
"""
WHEEL = """Wheel-Version: 1.0
Generator: splitter-tests
Root-Is-Purelib: false
Tag: {tag}
"""


def make_wheel(
    directory: Path,
    files: dict[str, bytes],
    *,
    name: str = "executorch",
    version: str = "1.5.1",
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    record: bool = True,
    extra_record_rows: tuple[str, ...] = (),
) -> Path:
    """A valid wheel holding `files` plus generated dist-info (RECORD hashes included)."""
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    contents = dict(files)
    contents.setdefault(
        f"{dist_info}/METADATA", METADATA.format(name=name, version=version).encode()
    )
    contents.setdefault(f"{dist_info}/WHEEL", WHEEL.format(tag=tag).encode())
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in contents.items()]
    rows += list(extra_record_rows)
    rows.append(f"{dist_info}/RECORD,,")
    if record:
        contents[f"{dist_info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = directory / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in contents.items():
            info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path


def rewrite_wheel(
    source: Path,
    target_dir: Path,
    *,
    replace: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
) -> Path:
    """Copy a real wheel with some members replaced or dropped, RECORD kept consistent."""
    replace = replace or {}
    target = target_dir / source.name
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for line in src.read(record_name).decode().splitlines():
            path = line.split(",", 1)[0]
            if path in drop:
                continue
            if path in replace:
                line = f"{path},{record_hash(replace[path])},{len(replace[path])}"
            rows.append(line)
        for info in src.infolist():
            if info.filename in drop:
                continue
            if info.filename == record_name:
                dst.writestr(info, ("\n".join(rows) + "\n").encode())
            elif info.filename in replace:
                dst.writestr(info, replace[info.filename])
            else:
                dst.writestr(info, src.read(info))
    return target


def replace_member(wheel: Path, name: str, data: bytes) -> None:
    """Rewrite `wheel` in place (atomically) with member `name` holding `data` and its RECORD
    row updated, so it is still a valid wheel: one that differs from the one a plan verified."""
    replacement = wheel.with_name(wheel.name + ".new")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(replacement, "w") as target:
        for info in source.infolist():  # stored: a quick rewrite, still a valid wheel
            content = data if info.filename == name else source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                row = f"{name},{record_hash(data)},{len(data)}"
                lines = content.decode().splitlines()
                rows = [row if r.startswith(f"{name},") else r for r in lines]
                content = ("\n".join(rows) + "\n").encode()
            info.compress_type = zipfile.ZIP_STORED
            target.writestr(info, content)
    replacement.replace(wheel)


def verify_refuses_altered(out: Path, name: str, work: Path) -> None:
    """A copy of OUT with its file `name` grown by a byte: `splitter verify` refuses it
    before installing anything, exit 14, naming the file."""
    copy = work / name.replace(".", "-")
    shutil.copytree(out, copy)
    with (copy / name).open("ab") as stream:
        stream.write(b"\n")
    result = run_splitter("verify", "--only", "depends", str(copy), timeout=300)
    assert result.returncode == 14, result.stderr
    assert f"changed since the build (sha256 differs): {copy / name}" in result.stderr
    shutil.rmtree(copy)


def run_splitter(
    *args: str, cwd: Path | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    """`splitter ARGS` in a subprocess of this interpreter, stdout and stderr pipes (as in
    `splitter ... | cat`)."""
    return subprocess.run(
        [sys.executable, "-m", "splitter", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=timeout,
    )
