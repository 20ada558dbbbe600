"""The pure renderers of Debian metadata, on small inputs (no wheel, no tools)."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitter.targets.distro import debmeta


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ("Short summary", "Short summary"),
        (
            "ExecuTorch quantized operator kernels (quantized_decomposed::*) for the C++ runtime",
            "ExecuTorch quantized operator kernels",
        ),
        (
            "ExecuTorch C++ runtime: shared libraries, headers and CMake package config, "
            "and more words to pass eighty",
            "ExecuTorch C++ runtime",
        ),
    ],
    ids=["short", "parenthesis", "colon"],
)
def test_synopsis_is_under_80_characters(summary: str, expected: str) -> None:
    assert debmeta.synopsis(summary) == expected
    assert len(debmeta.synopsis(summary)) < 80


def test_control_folds_the_long_description() -> None:
    text = debmeta.control(
        name="libx",
        source="x",
        version="1.0-1",
        arch="amd64",
        maintainer="A B <a@example.org>",
        installed_size=12,
        depends=["liby (= 1.0-1)", "libc6 (>= 2.28)"],
        section="libs",
        homepage="",
        summary="A library",
        long_description=debmeta.paragraphs("word " * 40, "", "second paragraph"),
    )
    lines = text.splitlines()
    assert lines[:7] == [
        "Package: libx",
        "Source: x",
        "Version: 1.0-1",
        "Architecture: amd64",
        "Maintainer: A B <a@example.org>",
        "Installed-Size: 12",
        "Depends: liby (= 1.0-1), libc6 (>= 2.28)",
    ]
    assert "Homepage" not in text
    description = lines[lines.index("Description: A library") + 1 :]
    assert all(line.startswith(" ") and len(line) <= 79 for line in description)
    assert " second paragraph" in description
    assert len(description) > 2  # 40 words do not fit one line


def test_symbols_maps_each_soname_to_the_exact_version() -> None:
    text = debmeta.symbols(("libb.so", "liba.so"), "liba", "liba (= 1-1)")
    assert text.splitlines() == [
        "liba.so liba (= 1-1)",
        "* Build-Depends-Package: liba",
        "libb.so liba (= 1-1)",
        "* Build-Depends-Package: liba",
    ]


def test_lintian_overrides_put_the_reason_before_each_tag() -> None:
    text = debmeta.lintian_overrides("p", (("tag-a", "why a"), ("tag-b *", "why b")))
    assert text == "# why a\np: tag-a\n# why b\np: tag-b *\n"


def test_md5sums_and_installed_size_skip_debian(tmp_path: Path) -> None:
    (tmp_path / "DEBIAN").mkdir()
    (tmp_path / "DEBIAN" / "control").write_text("x")
    (tmp_path / "usr" / "b").mkdir(parents=True)
    (tmp_path / "usr" / "b" / "z").write_bytes(b"hello")
    (tmp_path / "usr" / "a").write_bytes(b"x" * 2048)
    assert debmeta.md5sums(tmp_path) == (
        f"{_md5(b'x' * 2048)}  usr/a\n5d41402abc4b2a76b9719d911017c592  usr/b/z\n"
    )
    # usr, usr/b: 2 directories; 2 KiB + 1 KiB (5 bytes round up)
    assert debmeta.installed_size(tmp_path) == 5


def _md5(data: bytes) -> str:
    import hashlib

    return hashlib.md5(data).hexdigest()
