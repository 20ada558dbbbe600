"""The text of a .deb's metadata: control fields and descriptions, symbols, md5sums, DEP-5
copyright, the Debian changelog and lintian overrides (pure; deb.py and debsource.py write
them, so a binary package and its source package say the same)."""

from __future__ import annotations

import gzip
import hashlib
import os
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from splitter.model import PackagePlan, Plan
from splitter.plan import declared
from splitter.plan.report import record_name
from splitter.targets.distro.common import (
    DEVELOPMENT,
    LIBRARY,
    PYTHON,
    DistroPackage,
    exclusivity_sentence,
    has_bare_executable,
    origin_sentence,
    record_json,
)

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
LIBRARY_TAGS = (
    (
        "lacks-unversioned-link-to-shared-library *",
        "the soname is the unversioned name itself (upstream's libexecutorch.so): the file the "
        "linker finds is the one the loader loads, so it is in the library package and the "
        "-dev package has no link to add",
    ),
    (
        "shared-library-lacks-version *",
        "upstream's sonames carry no version (libexecutorch.so); splitter ships upstream's "
        "binaries as verified against the wheel's RECORD and does not invent a soname, so "
        "Debian's libfooN naming cannot be met either",
    ),
)
PYTHON_TAGS = (
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
    multi_arch: str = "",
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
    if multi_arch:
        lines.append(f"Multi-Arch: {multi_arch}")
    if depends:
        lines.append(f"Depends: {', '.join(depends)}")
    lines += [f"Section: {section}", "Priority: optional"]
    if homepage:
        lines.append(f"Homepage: {homepage}")
    lines.append(description_field(summary, long_description))
    return "\n".join(lines) + "\n"


def description_field(summary: str, long_description: str) -> str:
    """The Description field: the synopsis, then the long description folded."""
    lines = [f"Description: {synopsis(summary)}"]
    lines += [_description_line(paragraph) for paragraph in long_description.split("\n\n")]
    return "\n".join(lines)


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


def changelog_text(source: str, version: str, maintainer: str, epoch: int, origin: str) -> str:
    """The one Debian changelog entry: the same in every architecture's packages (a
    Multi-Arch: same package's changelog must be) and in the source package, dated `epoch`."""
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(epoch))
    body = textwrap.wrap(origin, width=72, break_long_words=False, break_on_hyphens=False)
    entry = "\n".join(f"    {line}" for line in body).lstrip()
    head = f"{source} ({version}) unstable; urgency=medium"
    return f"{head}\n\n  * {entry}\n\n -- {maintainer}  {date}\n"


def changelog_gz(text: str) -> bytes:
    """changelog.Debian.gz, gzip'd without name or time (`gzip -n -9`)."""
    return _gzip_n(text.encode())


def _gzip_n(data: bytes) -> bytes:
    """`gzip -9n`'s bytes: zlib's level 9, no name, no time."""
    return gzip.compress(data, compresslevel=9, mtime=0)


LDCONFIG_TRIGGER = "activate-noawait ldconfig\n"  # DEBIAN/triggers of a package with libraries


def compressed(path: str, data: bytes) -> tuple[str, bytes]:
    """A doc file as dh_compress leaves it in a .deb (policy 12.3): gzip'd (`gzip -9n`) when
    it is under usr/share/doc, over 4 kB and not a .json (debian/rules keeps those: -X.json);
    as it is otherwise."""
    if path.startswith("usr/share/doc/") and len(data) > 4096 and not path.endswith(".json"):
        return f"{path}.gz", _gzip_n(data)
    return path, data


def lintian_overrides(name: str, overrides: Sequence[tuple[str, str]]) -> str:
    """usr/share/lintian/overrides/<name>: each tag after a comment giving the reason."""
    return "".join(f"# {reason}\n{name}: {tag}\n" for tag, reason in overrides)


def package_docs(plan: Plan, package: DistroPackage, arch: str) -> list[tuple[str, bytes]]:
    """The files under /usr/share a .deb carries that both its builds install (the .deb's
    writer and the rebuild's dh_compress gzip the large ones alike: compressed), by path from
    the root: the exclusivity record (library and Python packages; named for the
    `arch`, e.g. amd64), a development package's list of the functions its libraries export
    that no header declares (splitter.plan.declared, named for the `arch` too) and the
    lintian overrides. copyright and changelog.Debian.gz are not
    here: a source package's build makes them from debian/ (dh_installdocs,
    dh_installchangelogs)."""
    docs = []
    if package.role != DEVELOPMENT:
        record = record_json(plan, package.package, package.name, package.development)
        docs.append((f"usr/share/doc/{package.name}/{record_name(arch)}", record.encode()))
    elif package.package.undeclared:  # what its libraries export that no header declares
        text = declared.doc_text(plan, package.package)
        docs.append((f"usr/share/doc/{package.name}/{declared.doc_name(arch)}", text.encode()))
    overrides = lintian_overrides(package.name, lintian_tags(package))
    docs.append((f"usr/share/lintian/overrides/{package.name}", overrides.encode()))
    return docs


def lintian_tags(package: DistroPackage) -> tuple[tuple[str, str], ...]:
    """The lintian tags a package keeps, each with its reason (debmeta's lists)."""
    tags = EVERY_PACKAGE
    tags += LIBRARY_TAGS if package.libraries else ()
    tags += PYTHON_TAGS if package.role == PYTHON else ()
    tags += (BARE_EXECUTABLE,) if has_bare_executable(package.files) else ()
    return tags


def python_depends(plan: Plan, package: PackagePlan) -> list[str]:
    """The python3 an export package's extension modules are built for (their tag)."""
    if not package.python:
        return []
    major, minor = plan.platform.python
    return [f"python3 (>= {major}.{minor}~)", f"python3 (<< {major}.{minor + 1})"]


def multi_arch(package: DistroPackage) -> str:
    """`same` for library and development packages: their architecture-dependent files are in
    /usr/lib/<triplet>, the rest (headers, docs) the same in every architecture, so amd64 and
    arm64 co-install. A Python package's modules share one dist-packages: none."""
    return "" if package.role == PYTHON else "same"


SECTIONS = {LIBRARY: "libs", DEVELOPMENT: "libdevel", PYTHON: "python"}


def summary(package: DistroPackage) -> str:
    """The package's one-line summary (a development package's says what it holds)."""
    if package.role == DEVELOPMENT:
        return f"{package.requires[0]} development files: headers, CMake and pkg-config"
    return package.package.summary


def long_description(plan: Plan, package: DistroPackage) -> str:
    """The long description, the same for every architecture (the source package's control
    has one): the whole summary where the synopsis cut it, what the package holds, where
    it comes from, and for library and Python packages the exclusivity record's verdicts."""
    record = f"{record_name('<arch>')} (in /usr/share/doc/{package.name})"
    origin = origin_sentence(plan, record_name("<arch>"))
    if package.role == DEVELOPMENT:
        held = (
            f"The headers, the CMake package config (find_package(executorch)) and the "
            f"pkg-config files of {package.requires[0]}: what building against it needs."
        )
        return paragraphs(held, origin)
    whole = package.package.summary
    return paragraphs(
        whole + "." if synopsis(whole) != whole else "",
        moved_sentence(package),
        origin,
        exclusivity_sentence(plan, package.package, record),
    )


def moved_sentence(package: DistroPackage) -> str:
    """For a library package with a development package: the split package's summary (the
    recipe's, shared by every channel) may name headers or CMake files, which are there."""
    if not package.development:
        return ""
    return (
        f"This package holds the shared libraries; the headers, CMake package config and "
        f"pkg-config files are in {package.development}."
    )
