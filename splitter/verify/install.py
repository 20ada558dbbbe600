"""Turn any built output (conda channel, staged trees, wheels) into an installed layout."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitter.errors import ExternalToolError, InvalidWheel, UsageError
from splitter.input.safepath import check_member_name, safe_join
from splitter.manifest import Artifact, read_manifest

# The CMake components (upstream's consumer contract) whose packages the checks install alone.
RUNTIME = "runtime"
QUANTIZED = "kernels_quantized"

INSTALL_CONDA = """
import asyncio, os, sys
import rattler
from rattler import RepoDataRecord

async def main():
    records = [await RepoDataRecord.from_package_archive(p) for p in sys.argv[2:]]
    await rattler.install(records, target_prefix=sys.argv[1], show_progress=False)

asyncio.run(main())
sys.stdout.flush()
os._exit(0)
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Installed:
    """An output installed into a scratch directory."""

    kind: str  # conda, tree or wheel
    platform: str  # the conda subdir of the artifacts installed (the manifest's)
    root: Path  # what moves as a whole in the relocation check
    libdir: Path
    cmake_prefix: Path  # what CMAKE_PREFIX_PATH points at
    sitedir: Path | None  # where `import executorch` finds the export side
    packages: tuple[str, ...]
    verdicts: tuple[dict[str, Any], ...]
    runtime: str  # the package providing the runtime component (the manifest says which)
    quantized: str  # the package providing the kernels_quantized component
    quantized_name: str = ""  # what the CMake config tells users to install for it
    install_prefix: Path | None = None  # the prefix (its bin/), when cmake_prefix is not it
    # .deb/.rpm: the dependencies dpkg or rpm found unmet, and the names of every package of
    # the output (an unmet dependency on one of those is a fault of the split)
    unmet: tuple[str, ...] = ()
    split_names: tuple[str, ...] = ()
    paths: tuple[str, ...] | None = None  # the manifest's artifacts installed (None: all)

    @property
    def home(self) -> Path:
        """The installed prefix: where a program installed beside the libraries goes."""
        return self.install_prefix or self.cmake_prefix


def install(
    out: Path,
    scratch: Path,
    only: tuple[str, ...] | None = None,
    paths: tuple[str, ...] | None = None,
) -> Installed:
    """Install the packages of `out` (all; or the artifacts `paths` of its manifest; of those,
    the plan packages in `only`) under `scratch`."""
    manifest = read_manifest(out)
    chosen = tuple(
        a
        for a in manifest.binaries
        if (paths is None or a.path in paths) and (only is None or a.package in only)
    )
    selected = tuple(a.path for a in chosen) if paths is not None else None
    kind = manifest.target
    if kind == "conan":
        raise UsageError(
            f"verify does not install Conan archives: {out}\n"
            "restore them with `conan cache restore` and build a consumer with CMakeDeps and "
            "CMakeToolchain (the README's Conan section)"
        )
    if kind == "conda":
        installed = _conda(out, scratch, chosen)
    elif kind == "wheel":
        installed = _wheel(out, scratch, chosen)
    elif kind in ("deb", "rpm"):
        installed = _distro(
            kind, out, scratch, only, manifest.provider(QUANTIZED) or "", manifest.binaries
        )
    else:
        installed = _tree(out, scratch, chosen)
    runtime = manifest.provider(RUNTIME) or ""
    quantized = manifest.provider(QUANTIZED) or ""
    return dataclasses.replace(
        installed,
        paths=selected,
        runtime=runtime,
        quantized=quantized,
        quantized_name=installed.quantized_name or quantized,
    )


def _distro(
    kind: str,
    out: Path,
    scratch: Path,
    only: tuple[str, ...] | None,
    quantized: str,
    artifacts: tuple[Artifact, ...],
) -> Installed:
    """Install OUT's .deb or .rpm files of one architecture (those of the plan packages in
    `only`: the manifest says which package each file holds) with dpkg or rpm into a scratch
    root; the library and Python packages' exclusivity records give the verdicts and the
    names, among them the development package the CMake config names for a component."""
    from splitter.verify.distro import arch_artifacts, install_packages, records

    package_of = {out / a.path: a.package for a in artifacts}
    mine = arch_artifacts(out, kind, artifacts)
    files = [out / a.path for a in mine]
    chosen = [f for f in files if only is None or package_of[f] in only]
    every = records(files, kind)
    root = scratch / "root"
    unmet = install_packages(kind, sorted(chosen), root)
    usr = root / "usr"
    libdir = next((p.parent for p in sorted(usr.rglob("libexecutorch.so"))), usr / "lib")
    site = next(iter(sorted(usr.glob("lib*/python*/*-packages"))), None)
    config = libdir / "cmake" / "executorch"
    named = [
        r.get("development_package") or r["distro_package"]
        for r in every.values()
        if r["package"] == quantized
    ]
    return Installed(
        kind=kind,
        platform=mine[0].platform,
        root=root,
        libdir=libdir,
        # CMake searches lib/<triplet> under a prefix everywhere, lib64 not on a Debian host;
        # a prefix that is the config directory itself is searched on every platform.
        cmake_prefix=usr if kind == "deb" or not config.is_dir() else config,
        install_prefix=usr,
        sitedir=site,
        packages=tuple(dict.fromkeys(package_of[f] for f in chosen)),
        verdicts=_unique([v for f, r in every.items() if f in chosen for v in r["pairs"]]),
        quantized_name=next(iter(named), ""),
        runtime="",
        quantized="",
        unmet=unmet,
        split_names=tuple(
            sorted(
                {r["distro_package"] for r in every.values()}
                | {r["development_package"] for r in every.values() if "development_package" in r}
            )
        ),
    )


def _conda(out: Path, scratch: Path, chosen: tuple[Artifact, ...]) -> Installed:
    packages = [out / a.path for a in chosen]
    prefix = scratch / "prefix"
    command = [sys.executable, "-c", INSTALL_CONDA, str(prefix), *map(str, packages)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ExternalToolError(
            f"py-rattler could not install the packages of {out}",
            command,
            result.returncode,
            result.stderr,
        )
    verdicts = []
    for package in packages:
        # the exclusivity record's pairs, in about.json's free-form `extra` (CEP 34 allows no
        # other file of splitter's own in info/)
        about = json.loads(conda_info_file(package, "info/about.json"))
        verdicts += about.get("extra", {}).get("process_exclusive", [])
    site = next(iter(sorted(prefix.glob("lib/python*/site-packages"))), None)
    return Installed(
        kind="conda",
        platform=platform_of(chosen),
        root=prefix,
        libdir=prefix / "lib",
        cmake_prefix=prefix,
        sitedir=site,
        packages=tuple(a.package for a in chosen),
        verdicts=_unique(verdicts),
        runtime="",
        quantized="",
    )


def conda_info_file(package: Path, name: str) -> bytes:
    """One file of a .conda's info archive (b"{}" when absent)."""
    import zstandard

    with zipfile.ZipFile(package) as archive:
        member = next(n for n in archive.namelist() if n.startswith("info-"))
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(archive.read(member))).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        extracted = tar.extractfile(name)
        return extracted.read() if extracted else b"{}"


def _wheel(out: Path, scratch: Path, chosen: tuple[Artifact, ...]) -> Installed:
    site = scratch / "site-packages"
    verdicts = []
    for item in chosen:
        verdicts += _unpack_wheel(out / item.path, site)
    return Installed(
        kind="wheel",
        platform=platform_of(chosen),
        root=site,
        libdir=site / "executorch" / "lib",
        cmake_prefix=site / "executorch",
        sitedir=site,
        packages=tuple(a.package for a in chosen),
        verdicts=_unique(verdicts),
        runtime="",
        quantized="",
    )


def _unpack_wheel(wheel: Path, site: Path) -> list[dict[str, Any]]:
    """Every member of `wheel` under `site`; a wheel with a member that could land outside it
    (or a link, which wheels cannot carry) is refused before anything is written."""
    verdicts = []
    with zipfile.ZipFile(wheel) as archive:
        members = archive.infolist()
        for info in members:
            check_member_name(info.filename)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InvalidWheel(
                    f"symlink entry in wheel (wheels cannot carry links): {info.filename}\n"
                    f"rebuild {wheel}"
                )
        for info in members:
            target = safe_join(site, info.filename)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            target.chmod((info.external_attr >> 16) & 0o777 or 0o644)
            if info.filename.endswith(".dist-info/splitter-process-exclusive.json"):
                verdicts += json.loads(archive.read(info))["pairs"]
    return verdicts


def _tree(out: Path, scratch: Path, chosen: tuple[Artifact, ...]) -> Installed:
    prefix = scratch / "prefix"
    verdicts = []
    for item in chosen:
        # A tree's artifact is its file list, beside the tree it describes.
        listing = out / item.path
        data = json.loads(listing.read_text())
        verdicts += data.get("process_exclusive", [])
        staged = listing.with_suffix("") / data["prefix"].strip("/")
        shutil.copytree(staged, prefix, dirs_exist_ok=True, symlinks=True)
    site = next(iter(sorted(prefix.glob("lib/python*/site-packages"))), None)
    site = site or next(iter(sorted(prefix.glob("lib/python3/dist-packages"))), None)
    libdir = next((p.parent for p in sorted(prefix.rglob("libexecutorch.so"))), prefix / "lib")
    return Installed(
        kind="tree",
        platform=platform_of(chosen),
        root=prefix,
        libdir=libdir,
        cmake_prefix=prefix,
        sitedir=site,
        packages=tuple(a.package for a in chosen),
        verdicts=_unique(verdicts),
        runtime="",
        quantized="",
    )


def platform_of(chosen: tuple[Artifact, ...]) -> str:
    """The one platform of the artifacts installed together (a release's environment, or a
    single wheel's output); a UsageError when they are of several."""
    found = sorted({a.platform for a in chosen})
    if len(found) != 1:
        raise UsageError(
            f"the packages installed together must be of one platform, not {found}: "
            + ", ".join(a.path for a in chosen)
        )
    return found[0]


def _unique(verdicts: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    seen: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        key = "|".join(sorted(f["path"] for f in verdict["files"]))
        seen[key] = verdict
    return tuple(seen[k] for k in sorted(seen))
