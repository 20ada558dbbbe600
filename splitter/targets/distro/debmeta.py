"""The text of a binary .deb's metadata: control, symbols, md5sums, DEP-5 copyright, the
Debian changelog and lintian overrides (pure; deb.py writes them)."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from splitter.model import Plan
from splitter.targets.generated.files import SPLIT_FROM, split_from

DEP5 = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"

# Lintian tags the packages keep, each with the reason written into its overrides file.
# Only tags lintian 2.116 reports on the 1.5.1 packages are listed: an override that matches
# nothing is itself reported (unused-override), so the list cannot drift silently.
EVERY_PACKAGE: tuple[tuple[str, str], ...] = (
    (
        "initial-upload-closes-no-bugs",
        "built from upstream's wheel for local or third-party repositories, not uploaded to "
        "Debian: there is no ITP bug to close",
    ),
)
LIBRARY = (
    (
        "shared-library-lacks-version *",
        "upstream's sonames carry no version (libexecutorch.so); splitter ships upstream's "
        "binaries as verified against the wheel's RECORD and does not invent a soname, so "
        "Debian's libfooN naming cannot be met either",
    ),
)
PYTHON = (
    (
        "unstripped-binary-or-object [usr/lib/python3/dist-packages/executorch/data/bin/flatc]",
        "upstream's prebuilt flatc, shipped byte for byte as verified against the wheel's "
        "RECORD (the other targets ship the same bytes); it is a build tool, not a library",
    ),
    (
        "hardening-no-pie [usr/lib/python3/dist-packages/executorch/data/bin/flatc]",
        "upstream's prebuilt flatc, shipped as built upstream (no rebuild from source here)",
    ),
    (
        "no-manual-page [usr/bin/flatc]",
        "upstream ships no manual page for flatc (its --help is the documentation)",
    ),
    (
        "unusual-interpreter fbpython *",
        "upstream test and codegen scripts keep their original #! line; they are run with "
        "python3 -m, never as executables",
    ),
)
BARE_EXECUTABLE = (
    "executable-not-elf-or-script *",
    "upstream ships this helper script executable without a #! line; kept as in the wheel",
)


def synopsis(summary: str) -> str:
    """A synopsis under 80 characters (policy 3.4.1): the summary, cut at its first
    parenthesis or colon when too long; the whole summary opens the long description."""
    if len(summary) < 80:
        return summary
    for mark in (" (", ": ", ", "):
        head = summary.split(mark, 1)[0]
        if len(head) < 80:
            return head
    return summary[:76].rsplit(" ", 1)[0]


def control(
    *,
    name: str,
    source: str,
    version: str,
    arch: str,
    maintainer: str,
    installed_size: int,
    depends: Sequence[str],
    section: str,
    homepage: str,
    summary: str,
    long_description: str,
) -> str:
    """DEBIAN/control of one binary package; long lines folded the Debian way."""
    lines = [
        f"Package: {name}",
        f"Source: {source}",
        f"Version: {version}",
        f"Architecture: {arch}",
        f"Maintainer: {maintainer}",
        f"Installed-Size: {installed_size}",
    ]
    if depends:
        lines.append(f"Depends: {', '.join(depends)}")
    lines += [f"Section: {section}", "Priority: optional"]
    if homepage:
        lines.append(f"Homepage: {homepage}")
    lines.append(f"Description: {synopsis(summary)}")
    lines += [_description_line(paragraph) for paragraph in long_description.split("\n\n")]
    return "\n".join(lines) + "\n"


def _description_line(paragraph: str) -> str:
    wrapped = textwrap.wrap(paragraph, width=78, break_long_words=False, break_on_hyphens=False)
    return "\n".join(f" {line}" for line in wrapped) if wrapped else " ."


def paragraphs(*texts: str) -> str:
    """Paragraphs of a long description, separated as control() expects."""
    return "\n\n".join(t for t in texts if t)


def symbols(sonames: Sequence[str], name: str, dependency: str) -> str:
    """DEBIAN/symbols: each soname maps to this package at the exact version. Unversioned
    sonames cannot be written in a shlibs file (dpkg cannot split `libfoo.so` into name and
    version), so the symbols file is how dpkg-shlibdeps finds the package for them."""
    return "".join(
        f"{soname} {dependency}\n* Build-Depends-Package: {name}\n" for soname in sorted(sonames)
    )


def md5sums(root: Path) -> str:
    """DEBIAN/md5sums: every regular file but DEBIAN/, sorted by path."""
    lines = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not (directory == str(root) and d == "DEBIAN"))
        for file in sorted(files):
            path = os.path.join(directory, file)
            if os.path.islink(path):
                continue
            with open(path, "rb") as handle:
                digest = hashlib.file_digest(handle, "md5").hexdigest()
            lines.append(f"{digest}  {os.path.relpath(path, root)}")
    return "".join(f"{line}\n" for line in sorted(lines, key=lambda x: x[34:]))


def installed_size(root: Path) -> int:
    """Installed-Size in KiB as dpkg-gencontrol counts it: each file rounded up, plus one
    per directory."""
    total = 0
    for directory, subdirs, files in os.walk(root):
        if directory == str(root):
            subdirs[:] = [d for d in subdirs if d != "DEBIAN"]
        total += len(subdirs)
        total += sum((os.lstat(os.path.join(directory, f)).st_size + 1023) // 1024 for f in files)
    return total


def copyright_file(plan: Plan, license_text: str) -> str:
    """A machine-readable (DEP-5) copyright: the wheel's licence and its copyright lines."""
    holders = [
        re.sub(r"^Copyright\s*(\(c\))?\s*", "", line.strip(), flags=re.IGNORECASE)
        for line in license_text.splitlines()
        if line.strip().lower().startswith("copyright") and "holders" not in line.lower()
    ]
    body = "\n".join(f" {line}" if line.strip() else " ." for line in license_text.splitlines())
    fields = [
        f"Format: {DEP5}",
        f"Upstream-Name: {plan.recipe.project}",
    ]
    if plan.wheel.home:
        fields.append(f"Source: {plan.wheel.home}")
    fields.append(f"Comment: {split_from(plan)}")
    copyright_lines = "\n".join(f" {h}" for h in holders[1:])
    first = holders[0] if holders else "the ExecuTorch authors"
    stanza = [
        "Files: *",
        f"Copyright: {first}" + (f"\n{copyright_lines}" if copyright_lines else ""),
        f"License: {plan.wheel.license or 'unknown'}",
        body.rstrip(" .\n"),
    ]
    return "\n".join(fields) + "\n\n" + "\n".join(stanza) + "\n"


def changelog_gz(source: str, version: str, maintainer: str, plan: Plan) -> bytes:
    """changelog.Debian.gz, dated by the wheel, gzip'd without name or time (`gzip -n -9`)."""
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(plan.wheel.timestamp))
    text = (
        f"{source} ({version}) unstable; urgency=medium\n\n"
        f"  * {SPLIT_FROM}\n"
        f"    {plan.wheel.filename}\n"
        f"    (sha256 {plan.wheel.sha256[:32]}\n"
        f"    {plan.wheel.sha256[32:]}).\n\n"
        f" -- {maintainer}  {date}\n"
    )
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def lintian_overrides(name: str, overrides: Sequence[tuple[str, str]]) -> str:
    """usr/share/lintian/overrides/<name>: each tag after a comment giving the reason."""
    return "".join(f"# {reason}\n{name}: {tag}\n" for tag, reason in overrides)
