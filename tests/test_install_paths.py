"""Installing built wheels for verify: every member lands under site-packages or nothing does."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from splitter.errors import InvalidWheel
from splitter.manifest import NAME, Artifact, Manifest, digest
from splitter.verify.install import install

WHEEL = "executorch_runtime-1.5.1-py3-none-any.whl"


def write_zip(path: Path, members: list[tuple[str, int, bytes]]) -> Path:
    """A zip of (name, st_mode, data) members; no wheel checks, so it can be malicious. Its
    directory gets the manifest a wheel build would write for it (one runtime wheel)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, mode, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            archive.writestr(info, data)
    sha256, size = digest(path)
    runtime = Artifact(
        path=path.name,
        package="executorch-runtime",
        platform="linux-64",
        python=None,
        components=("runtime",),
        sha256=sha256,
        size=size,
    )
    manifest = Manifest(
        splitter="0", target="wheel", inputs=(), artifacts=(runtime,), files=(path.name,)
    )
    (path.parent / NAME).write_text(manifest.text())
    return path


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != NAME)


@pytest.mark.parametrize(
    "member",
    ["../escape.txt", "executorch/../../escape.txt", "{outside}/escape.txt"],
    ids=["parent", "nested-parent", "absolute"],
)
def test_member_outside_site_packages_is_refused(tmp_path: Path, member: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    member = member.format(outside=outside)
    write_zip(out / WHEEL, [(member, stat.S_IFREG | 0o644, b"evil")])
    scratch = tmp_path / "scratch"
    with pytest.raises(InvalidWheel, match=r"escape\.txt"):
        install(out, scratch)
    assert files_under(tmp_path) == ["out", f"out/{WHEEL}", "outside"]


def test_symlink_member_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    link = (stat.S_IFLNK | 0o777, b"/etc/passwd")
    write_zip(out / WHEEL, [("executorch/link", *link)])
    with pytest.raises(InvalidWheel, match="executorch/link"):
        install(out, tmp_path / "scratch")
    assert not (tmp_path / "scratch" / "site-packages" / "executorch" / "link").exists()


def test_wheel_members_land_under_site_packages(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    write_zip(
        out / WHEEL,
        [
            ("executorch/", stat.S_IFDIR | 0o755, b""),
            ("executorch/lib/libexecutorch.so", stat.S_IFREG | 0o755, b"\x7fELF"),
            ("executorch/__init__.py", stat.S_IFREG | 0o644, b""),
        ],
    )
    installed = install(out, tmp_path / "scratch")
    site = tmp_path / "scratch" / "site-packages"
    assert installed.packages == ("executorch-runtime",)
    assert files_under(site) == [
        "executorch",
        "executorch/__init__.py",
        "executorch/lib",
        "executorch/lib/libexecutorch.so",
    ]
    assert (site / "executorch" / "lib" / "libexecutorch.so").stat().st_mode & 0o777 == 0o755
    assert (site / "executorch" / "__init__.py").stat().st_mode & 0o777 == 0o644
