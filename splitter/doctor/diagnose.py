"""`splitter doctor`: find ExecuTorch libraries that would meet, or do meet, in one process.

Two hazards, as ExecuTorch 1.5.1 behaves when its libraries share a process:
- two files that own a registry (two copies of libexecutorch.so): kernels land in one registry
  and the program looks in the other ("Missing operator"); if the first copy was loaded
  RTLD_GLOBAL, the second one's own kernels bind to it and abort the load ("Re-registering");
- two files that register the same operators into a registry: the second one to load aborts the
  process with "Re-registering <op>".
A file is its device and inode, so a symlink or hard link to a file already seen is not a copy.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from splitter.binaries.detect import analyse_binary, is_binary
from splitter.binaries.elf import REGISTER_KERNELS, analyse_elf, is_elf
from splitter.errors import BinaryError, DoctorError
from splitter.model import BinaryInfo, Registry
from splitter.platforms import by_binary_machine

SCHEMA = "splitter.doctor/1"
# ELF shared objects, and macOS dylibs (a macOS prefix's extension modules end in .so too)
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$|\.dylib$")


class HazardKind(StrEnum):
    """What goes wrong when two files share a process."""

    DUPLICATE_REGISTRY = "duplicate-registry"  # two copies of a registry owner
    DUPLICATE_KERNELS = "duplicate-kernels"  # two files register the same operators


@dataclass(frozen=True, slots=True, kw_only=True)
class Library:
    """A file that owns an ExecuTorch registry or registers kernels into one."""

    path: str
    soname: str
    registry: Registry
    # entries of its static Kernel tables; None when it registers kernels from code, which
    # no table shows (the count is unknown, not 0)
    operators: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Hazard:
    """Files that break each other when they share a process."""

    kind: HazardKind
    message: str
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One NEEDED entry of a closure and the file it resolves to ("" when none)."""

    source: str
    needed: str
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """What `splitter doctor` found in a prefix, a binary's NEEDED closure or a process."""

    mode: str  # "prefix", "binary" or "pid"
    target: str
    libraries: tuple[Library, ...]
    hazards: tuple[Hazard, ...]
    links: tuple[Link, ...] = ()  # binary mode only, in the order ld.so would load them
    notes: tuple[str, ...] = ()  # files skipped, and why

    @property
    def ok(self) -> bool:
        """Whether no hazard was found (the exit code)."""
        return not self.hazards

    @property
    def unresolved(self) -> tuple[Link, ...]:
        """The NEEDED entries that resolve to no file."""
        return tuple(link for link in self.links if not link.path)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data for `--json`: libraries and hazards sorted, links in load order."""
        return {"schema": SCHEMA, "ok": self.ok, **asdict(self)}


def diagnose_prefix(prefix: Path) -> Diagnosis:
    """The ExecuTorch libraries of a conda prefix or venv, and those that would clash."""
    root = prefix.resolve()
    lib = root / "lib"
    if not lib.is_dir():
        raise DoctorError(
            f"not a conda prefix or virtual environment (no lib/ directory): {prefix}"
        )
    return diagnose_dirs("prefix", str(root), [lib], sorted(lib.glob("python*/site-packages")))


def diagnose_dirs(mode: str, target: str, libdirs: list[Path], sitedirs: list[Path]) -> Diagnosis:
    """The shared objects directly in `libdirs` and anywhere under `sitedirs`: which own or use
    an ExecuTorch registry, and which would clash if loaded into one process."""
    try:
        candidates = [
            p for d in libdirs for p in sorted(d.iterdir()) if SHARED_OBJECT.search(p.name)
        ]
        for site in sitedirs:
            candidates += sorted(p for p in site.rglob("*") if SHARED_OBJECT.search(p.name))
    except OSError as exc:
        raise DoctorError(f"cannot list the prefix ({exc.strerror}): {exc.filename}") from None
    notes: list[str] = []
    found = _registry_files(candidates, notes)
    return _diagnosis(mode, target, found, "would meet if loaded into one process", notes)


def diagnose_pid(pid: int) -> Diagnosis:
    """The ExecuTorch libraries mapped into a running process, and those that clash."""
    if pid <= 0:
        raise DoctorError(f"not a process id (must be positive): {pid}")
    maps = Path(f"/proc/{pid}/maps")
    try:
        text = maps.read_text()
    except FileNotFoundError:
        raise DoctorError(f"no such process (nothing at /proc/{pid}): {pid}") from None
    except OSError as exc:
        raise DoctorError(
            f"cannot read the memory map of process {pid} ({exc.strerror}): {maps}\n"
            "run as the process's user or as root"
        ) from None
    mapped = set()
    for line in text.splitlines():
        # address perms offset dev inode path; only code mappings, so data files drop out
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "x" in fields[1] and fields[4] != "0":
            name = fields[5]
            if name.startswith("/") and not name.endswith(" (deleted)"):
                mapped.add(name)
    notes: list[str] = []
    found = _registry_files((Path(p) for p in sorted(mapped)), notes)
    return _diagnosis("pid", str(pid), found, f"do meet in process {pid}", notes)


def diagnose_binary(path: Path, search: list[Path] | None = None) -> Diagnosis:
    """The NEEDED closure of one ELF file, resolved as the dynamic loader resolves it.

    `search` stands in for LD_LIBRARY_PATH; None reads LD_LIBRARY_PATH from the environment.
    """
    binary = Path(os.path.abspath(path))
    if not binary.is_file():
        raise DoctorError(f"no such binary (nothing to diagnose): {path}")
    data, reason = _read_elf(binary)
    if data is not None and not is_elf(data):
        data, reason = None, "not an ELF file; --binary follows ld.so only"
    if data is None:
        raise DoctorError(f"cannot diagnose the binary ({reason}): {path}")
    root = analyse_elf(str(binary), data)
    if search is None:
        library_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    else:
        library_path = [str(d) for d in search]
    platform = by_binary_machine(root.machine)
    triple = None if platform is None else platform.triplet
    defaults = [f"/lib/{triple}", f"/usr/lib/{triple}"] if triple else []
    defaults += ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]

    notes: list[str] = []
    loaded = {_identity(binary): root}
    by_name = {root.soname: root} if root.soname else {}
    links: list[Link] = []
    rejected: set[str] = set()
    # Breadth first, like ld.so; each entry carries the DT_RPATH of the objects that loaded it.
    queue: deque[tuple[BinaryInfo, tuple[str, ...]]] = deque([(root, ())])
    while queue:
        info, inherited = queue.popleft()
        origin = os.path.dirname(info.path)
        # ld.so: DT_RUNPATH disables every DT_RPATH and comes after LD_LIBRARY_PATH.
        rpath = () if info.runpath else _expand(info.rpath, origin)
        if info.runpath:
            dirs = [*library_path, *_expand(info.runpath, origin), *defaults]
        else:
            dirs = [*rpath, *inherited, *library_path, *defaults]
        for name in info.needed:
            target = by_name.get(name)
            if target is None:
                target = _find(name, dirs, root.machine, loaded, rejected, notes)
            if target is not None:
                identity = _identity(Path(target.path))
                if identity not in loaded:
                    loaded[identity] = target
                    queue.append((target, (*rpath, *inherited)))
                by_name[name] = target
                if target.soname:
                    by_name.setdefault(target.soname, target)
            links.append(Link(source=info.path, needed=name, path=target.path if target else ""))
    found = [i for i in loaded.values() if i.registry]
    return _diagnosis(
        "binary", str(binary), found, f"meet when {binary} loads", notes, tuple(links)
    )


def _find(
    name: str,
    dirs: list[str],
    machine: str,
    loaded: dict[tuple[int, int], BinaryInfo],
    rejected: set[str],
    notes: list[str],
) -> BinaryInfo | None:
    """The first file called `name` in `dirs` that is an ELF for `machine`."""
    candidates = [name] if "/" in name else [os.path.join(d, name) for d in dirs]
    for candidate in map(os.path.normpath, candidates):
        if candidate in rejected or not os.path.isfile(candidate):
            continue
        known = loaded.get(_identity(Path(candidate)))
        if known is not None:  # ld.so recognises a file it has loaded by device and inode
            return known
        data, reason = _read_elf(Path(candidate))
        info = _analyse(candidate, data, reason, notes)
        if info is not None and info.machine == machine:
            return info
        rejected.add(candidate)  # ld.so skips files of another machine or class
    return None


def _expand(entries: tuple[str, ...], origin: str) -> tuple[str, ...]:
    return tuple(e.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for e in entries)


def _identity(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_dev, status.st_ino


def _read_elf(path: Path) -> tuple[bytes | None, str]:
    """The bytes of an ELF (or Mach-O) file, or None and why not."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable: {exc.strerror}"
    return (data, "") if is_binary(data) else (None, "not an ELF file")


def _analyse(path: str, data: bytes | None, reason: str, notes: list[str]) -> BinaryInfo | None:
    if data is not None:
        try:
            return analyse_binary(path, data)
        except BinaryError as exc:
            reason = str(exc).removesuffix(f": {path}")
    notes.append(f"skipped ({reason}): {path}")
    return None


def _registry_files(candidates: Iterable[Path], notes: list[str]) -> list[BinaryInfo]:
    """Analyse each distinct file once; keep those that own or use an ExecuTorch registry."""
    seen: set[tuple[int, int]] = set()
    found = []
    for path in candidates:
        try:
            real = path.resolve(strict=True)
            status = real.stat()
        except (OSError, RuntimeError) as exc:  # dangling link, link loop, vanished file
            notes.append(f"skipped ({getattr(exc, 'strerror', None) or exc}): {path}")
            continue
        identity = (status.st_dev, status.st_ino)
        if not stat.S_ISREG(status.st_mode) or identity in seen:
            continue
        seen.add(identity)
        data, reason = _read_elf(real)
        # Cheap filter before parsing: torch's libraries are hundreds of MB and never match.
        if data is not None and REGISTER_KERNELS not in data:
            continue
        info = _analyse(str(real), data, reason, notes)
        if info is not None and info.registry:
            found.append(info)
            if not info.operators_known:
                notes.append(
                    f"operators unknown (registered from initializer code, no static table; "
                    f"a duplicate of them is not detected): {real}"
                )
    return found


def _diagnosis(
    mode: str,
    target: str,
    found: list[BinaryInfo],
    where: str,
    notes: list[str],
    links: tuple[Link, ...] = (),
) -> Diagnosis:
    libraries = tuple(
        Library(
            path=i.path,
            soname=i.soname,
            registry=i.registry,
            operators=len(i.et_operators) if i.operators_known else None,
        )
        for i in sorted(found, key=lambda i: i.path)
    )
    return Diagnosis(
        mode=mode,
        target=target,
        libraries=libraries,
        hazards=tuple(sorted(find_hazards(found, where), key=lambda h: (h.kind, h.files))),
        links=links,
        notes=tuple(notes),
    )


def find_hazards(found: list[BinaryInfo], where: str) -> list[Hazard]:
    """Registry owners shipped twice, and distinct files registering the same operators."""
    hazards = []
    owners: dict[str, list[BinaryInfo]] = defaultdict(list)
    for info in found:
        if info.registry is Registry.OWNS:
            owners[info.provides].append(info)
    for name, copies in sorted(owners.items()):
        if len(copies) > 1:
            files = tuple(sorted(i.path for i in copies))
            count = "two" if len(files) == 2 else str(len(files))
            # ExecuTorch 1.5.1: after a copy loaded RTLD_GLOBAL, the next copy's own kernels
            # bind to the first registry and abort; after RTLD_LOCAL both load silently.
            hazards.append(
                Hazard(
                    kind=HazardKind.DUPLICATE_REGISTRY,
                    message=f"{count} copies of {name} {where}: kernels registered into one are "
                    "invisible to the other (Missing operator at run time; after an RTLD_GLOBAL "
                    f"load the next copy aborts with 'Re-registering'): {', '.join(files)}\n"
                    "keep one copy: remove the package that ships the other",
                    files=files,
                )
            )
    registering = sorted((i for i in found if i.et_operators), key=lambda i: i.path)
    for index, first in enumerate(registering):
        for second in registering[index + 1 :]:
            if first.registry is second.registry is Registry.OWNS:
                continue  # reported as duplicate-registry
            common = sorted(set(first.et_operators) & set(second.et_operators))
            if common:
                hazards.append(
                    Hazard(
                        kind=HazardKind.DUPLICATE_KERNELS,
                        # The abort names the first shared entry in table order, not common[0].
                        message=f"{first.path} and {second.path} both register {len(common)} "
                        f"ExecuTorch operators (e.g. {common[0]}) and {where}: loading both "
                        "aborts with 'Re-registering <operator>'\n"
                        "keep one of them: remove the package that ships the other",
                        files=(first.path, second.path),
                    )
                )
    return hazards
