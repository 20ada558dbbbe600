"""Every package of a `splitter build` output unpacked with its format's own tools (zipfile
for wheels and the .conda container, zstd-compressed tars, `dpkg-deb --fsys-tarfile`,
`rpm2cpio | cpio`, Conan's .tgz), with the licence its format declares for each file: the
wheel's METADATA License-Expression, conda's about.json `license`, the tree manifest's
`license`, the rpm's LICENSE tag, the Conan recipe's `license`, and for a .deb the License of
the last Files: paragraph of its DEP-5 copyright file that matches the file."""

from __future__ import annotations

import email.parser
import fnmatch
import io
import json
import re
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard


@dataclass(frozen=True)
class Unpacked:
    """One package as shipped: its files' bytes by path, and the licence declared for each."""

    package: str
    files: dict[str, bytes]
    declared: Callable[[str], str]


def unpack(out: Path, target: str) -> Iterator[Unpacked]:
    """The packages of the output `out` of `target`, payload only (no licence text, SBOM or
    packaging metadata: documents about the licences, not code under them)."""
    if target == "wheel":
        for path in sorted(out.glob("*.whl")):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
                headers = email.parser.BytesHeaderParser().parsebytes(archive.read(meta))
                files = {
                    n: archive.read(n)
                    for n in names
                    if not n.endswith("/") and ".dist-info/" not in n
                }
            yield Unpacked(path.name, files, _constant(headers["License-Expression"]))
    elif target == "tree":
        for manifest in sorted(out.glob("*.json")):
            root = out / manifest.stem
            if not root.is_dir():
                continue
            licence = json.loads(manifest.read_text())["license"]
            files = {
                p.relative_to(root).as_posix(): p.read_bytes()
                for p in sorted(root.rglob("*"))
                if p.is_file() and not p.is_symlink()
            }
            yield Unpacked(manifest.stem, files, _constant(licence))
    elif target == "conda":
        for path in sorted(out.glob("*/*.conda")):
            info = conda_archive(path, "info-")
            about = json.loads(info["info/about.json"])
            yield Unpacked(path.name, conda_archive(path, "pkg-"), _constant(about["license"]))
    elif target == "deb":
        for path in sorted(out.glob("*.deb")):
            raw = subprocess.run(
                ["dpkg-deb", "--fsys-tarfile", str(path)], capture_output=True, check=True
            ).stdout
            files = {n.removeprefix("./"): d for n, d in tar_files(raw).items()}
            copyright = next(d for n, d in files.items() if n.endswith("/copyright"))
            yield Unpacked(path.name, files, _dep5(copyright.decode()))
    elif target == "rpm":
        for path in sorted(out.glob("*.rpm")):
            if path.name.endswith(".src.rpm"):
                continue
            licence = subprocess.run(
                ["rpm", "-qp", "--queryformat", "%{LICENSE}", str(path)],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            yield Unpacked(path.name, _rpm_files(path), _constant(licence))
    elif target == "conan":
        for path in sorted(out.glob("*.conan.tgz")):
            members = tar_files(path.read_bytes())
            recipe = next(d for n, d in members.items() if n.endswith("/e/conanfile.py"))
            found = re.search(r'^\s*license = "([^"]+)"', recipe.decode(), re.MULTILINE)
            assert found is not None, f"{path.name}: no license in its conanfile.py"
            files = {n.split("/p/", 1)[1]: d for n, d in members.items() if "/p/" in n}
            yield Unpacked(path.name, files, _constant(found.group(1)))
    else:
        raise ValueError(target)


def _constant(licence: str) -> Callable[[str], str]:
    return lambda _path: licence


def tar_files(raw: bytes) -> dict[str, bytes]:
    """Every file of a tar (plain or gzip), by member name."""
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def conda_archive(path: Path, prefix: str) -> dict[str, bytes]:
    """The files of a .conda's info- or pkg- archive."""
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if n.startswith(prefix))
        stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(archive.read(member)))
        return tar_files(stream.read())


def _rpm_files(path: Path) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as where:
        subprocess.run(
            f"rpm2cpio '{path}' | cpio -idm --quiet",
            shell=True, cwd=where, check=True, capture_output=True,
        )  # fmt: skip
        root = Path(where)
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }


def _dep5(text: str) -> Callable[[str], str]:
    """A file's licence by a DEP-5 copyright file: the last Files: paragraph matching it
    (`*` crosses `/`), its License's first line."""
    stanzas = []
    for paragraph in text.split("\n\n"):
        fields: dict[str, list[str]] = {}
        field = ""
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t"):  # a continuation line
                fields[field].append(line.strip())
            elif ":" in line:
                field, value = line.split(":", 1)
                fields[field] = [value.strip()]
        if "Files" in fields:
            globs = " ".join(fields["Files"]).split()
            stanzas.append((globs, fields["License"][0]))

    def declared(path: str) -> str:
        licence = ""
        for globs, named in stanzas:
            if any(fnmatch.fnmatchcase(path, g) for g in globs):
                licence = named
        return licence

    return declared
