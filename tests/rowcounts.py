"""The rows `splitter verify` must report for an output of the real cp311 x86_64 wheel, derived
from the wheel itself (zipfile), the packages (the format's own tool lists their SBOMs) and the
README's stated figure, never from verify's own lists."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import zstandard
from conda_tools import torch_python
from consumer_tools import cmake_executable

README = Path(__file__).resolve().parent.parent / "README.md"
ELF = b"\x7fELF"


def coload_files(wheel: Path) -> int:
    """The files the co-load matrix pairs: the wheel's shipped libraries, its `_C` extension and
    its export plugins (`*_aot_lib.so`), each an ELF file (its magic read from the zip)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [
            n
            for n in archive.namelist()
            if re.fullmatch(r"executorch/lib/[^/]+\.so[.\d]*", n)
            or re.fullmatch(r"executorch/extension/pybindings/_C\.[^/]+\.so", n)
            or re.fullmatch(r"executorch/.+_aot_lib\.so", n)
        ]
        return sum(1 for n in names if archive.read(n)[:4] == ELF)


def expected_rows(wheel: Path, sboms: int, *, depends: bool) -> Counter[str]:
    """Every row of a full verify with torch and one CMake >= 3.28, by check."""
    files = coload_files(wheel)
    expected = Counter(
        {
            "co-load": files * (files - 1),  # every ordered pair
            "model (C++)": 1,
            "missing component": 1,
            "relocation": 1,
            "model (Python)": 1,
            "sbom": sboms,
            "headers": 1,
        }
    )
    if depends:
        expected["depends"] = 1
    return expected


def full_verify_matches(
    out: Path, wheel: Path, listed: list[str], target: str, *, depends: bool = True
) -> None:
    """`splitter verify OUT` with torch and CMake 3.28: nothing skipped, every row passes,
    the rows per check are expected_rows' (`listed`: every path the packages hold, as the
    format's own tool lists them, for their SBOMs; `depends`: a .deb/.rpm output's row), and
    their sum is the README's figure."""
    from splitter.verify.run import Status, verify

    checks = verify(out, [torch_python()], [cmake_executable("3.28")])
    assert [c for c in checks if c.status is not Status.PASS] == []
    sboms = sum(1 for line in listed if line.endswith(".cdx.json"))
    expected = expected_rows(wheel, sboms, depends=depends)
    assert Counter(c.check for c in checks) == expected
    assert len(checks) == sum(expected.values()) == readme_passed(target)


def readme_passed(target: str) -> int:
    """The `N passed` the README states for `splitter verify dist/<target>`."""
    found = re.search(rf"splitter verify dist/{target} .*# (\d+) passed", README.read_text())
    assert found is not None, f"the README states no count for verify dist/{target}"
    return int(found[1])


def listing(out: Path, target: str) -> list[str]:
    """Every path the binary packages of a conda, deb or rpm output hold, as the format's own
    reader lists them (the .conda's zip and tar members, dpkg-deb -c, rpm -qlp)."""
    if target == "conda":
        names: list[str] = []
        for package in sorted(out.rglob("*.conda")):
            with zipfile.ZipFile(package) as archive:
                for member in archive.namelist():
                    if member.endswith(".tar.zst"):
                        raw = zstandard.ZstdDecompressor().stream_reader(
                            io.BytesIO(archive.read(member))
                        )
                        with tarfile.open(fileobj=io.BytesIO(raw.read())) as tar:
                            names += tar.getnames()
        return names
    command, pattern = {"deb": (["dpkg-deb", "-c"], "*.deb"), "rpm": (["rpm", "-qlp"], "*.rpm")}[
        target
    ]
    return [
        line
        for package in sorted(out.glob(pattern))
        if not package.name.endswith(".src.rpm")
        for line in subprocess.run(
            [*command, str(package)], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    ]


def sboms(out: Path, target: str) -> int:
    """How many CycloneDX SBOMs the output's packages hold (listing)."""
    return sum(1 for line in listing(out, target) if line.endswith(".cdx.json"))
