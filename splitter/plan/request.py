"""What the command line asks for, judged from the arguments alone: the wheels that the WHEEL
arguments and --python/--platform name (a path's CPython and platform read from its file
name), so that a combination no command can serve is refused before anything is fetched or
read, not after every wheel is downloaded and planned."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from splitter.errors import UsageError
from splitter.input.fetch import (
    ALL_PLATFORMS,
    PLATFORMS,
    is_wheel_path,
    machine_subdir,
    requested_targets,
)
from splitter.model import CondaBackend
from splitter.plan.facts import linux_only, subdir_of_tag
from splitter.platforms import cpython_version

DEFAULT = "the recipe's pin"  # what no WHEEL argument stands for
DISTRO_TARGETS = ("deb", "rpm")


@dataclass(frozen=True, slots=True, kw_only=True)
class Requested:
    """One wheel the arguments name, as far as they tell without reading it."""

    spec: str  # the WHEEL argument (a path or a requirement), or DEFAULT
    python: str  # "3.12"; "" when a file name does not say
    tag: str  # the platform tag (manylinux_2_28_x86_64); "" when not known

    @property
    def subdir(self) -> str:
        """The conda subdir of its platform ("" when not known)."""
        return subdir_of_tag(self.tag) if self.tag else ""

    @property
    def is_path(self) -> bool:
        """Whether the argument names a wheel file (else a requirement is fetched)."""
        return self.spec != DEFAULT and is_wheel_path(self.spec)

    def label(self) -> str:
        """A wheel file's name, or a requirement's CPython and platform: 3.11 linux-64."""
        return Path(self.spec).name if self.is_path else f"{self.python} {self.subdir}"

    def describe(self) -> str:
        """The path, or the requirement with the CPython and platform it is fetched for."""
        if self.is_path:
            return self.spec
        return f"{self.spec} for CPython {self.python} on {self.subdir or self.tag}"


def requested_wheels(
    specs: Sequence[str], pythons: str | None, platforms: str | None
) -> list[Requested]:
    """The wheels the arguments name, one per wheel splitter.input.fetch.resolve_inputs will
    fetch or open: a path as it is, a requirement (none: the recipe's pin) once per target of
    --python/--platform, or, without them, for this interpreter and machine."""
    if pythons is None and platforms is None:
        named = [_from_path(s) if is_wheel_path(s) else _this_machine(s) for s in specs]
        return named or [_this_machine(DEFAULT)]
    targets = requested_targets(pythons, platforms)
    found: list[Requested] = []
    for spec in specs or [DEFAULT]:
        if is_wheel_path(spec):
            found.append(_from_path(spec))
        else:
            found += [
                Requested(spec=spec, python=t.python, tag=PLATFORMS[t.subdir]) for t in targets
            ]
    return found


def check_build_request(
    specs: Sequence[str],
    pythons: str | None,
    platforms: str | None,
    target: str,
    backend: CondaBackend,
) -> None:
    """Refuse, from the arguments alone, a build no target can make: a release with a conda
    backend other than assemble, or a deb/rpm of a platform without one or of several
    Pythons on one platform."""
    wheels = requested_wheels(specs, pythons, platforms)
    if target == "conda" and backend != CondaBackend.ASSEMBLE and len(wheels) > 1:
        raise release_backend(backend)
    if target not in DISTRO_TARGETS:
        return
    for wheel in wheels:
        if wheel.subdir and not wheel.subdir.startswith("linux-"):  # osx-arm64
            if platforms == "all":
                raise all_platforms_linux_only(target)
            raise linux_only(target, wheel.tag, wheel.describe())
    by_subdir: dict[str, list[str]] = {}
    for wheel in wheels:
        if wheel.subdir and wheel.python:
            by_subdir.setdefault(wheel.subdir, [])
            if wheel.python not in by_subdir[wheel.subdir]:
                by_subdir[wheel.subdir].append(wheel.python)
    for subdir, found in sorted(by_subdir.items()):
        if len(found) > 1:
            raise several_pythons(target, subdir, sorted(found, key=_version_key))


def check_plan_request(
    specs: Sequence[str],
    pythons: str | None,
    platforms: str | None,
    graph: bool,
    why: str | None,
) -> None:
    """Refuse, from the arguments alone, what `splitter plan` shows for one wheel only (the
    graph, --why) asked of a release."""
    wheels = requested_wheels(specs, pythons, platforms)
    if len(wheels) < 2:
        return
    option = "--why" if why is not None else "--graph" if graph else None
    if option is not None:
        named = ", ".join(w.label() for w in wheels)
        raise UsageError(
            f"{option} shows one wheel, not a release (the WHEEL arguments and --python/"
            f"--platform name {len(wheels)} wheels): {named}\n"
            "give one wheel: one WHEEL, and one --python and --platform at most"
        )


def several_pythons(target: str, subdir: str, pythons: Sequence[str]) -> UsageError:
    """The refusal of a deb or rpm release of several Pythons on one platform."""
    return UsageError(
        f"--target {target} builds for one Python per platform (the distribution's "
        f"python3), not {len(pythons)} ({', '.join(pythons)}) for {subdir}\n"
        f"give one --python (your distribution's, e.g. --python 3.11)"
    )


def all_platforms_linux_only(target: str) -> UsageError:
    """The refusal of a deb or rpm of `--platform all`, which names macOS too."""
    linux = ",".join(p for p in ALL_PLATFORMS if p.startswith("linux-"))
    return UsageError(
        f"--target {target} packages Linux wheels only, and --platform all names "
        f"{', '.join(ALL_PLATFORMS)}: osx-arm64 has no {target}\n"
        f"name the Linux platforms: --platform {linux}"
    )


def release_backend(backend: CondaBackend) -> UsageError:
    """The refusal of a conda release by a backend other than assemble."""
    return UsageError(
        f"a release is packaged with --backend assemble, not {backend}: its "
        "rattler-build recipe (a variant per Python) is written under OUT/recipes/<subdir>/ "
        "for a rebuild"
    )


def _this_machine(spec: str) -> Requested:
    """A requirement fetched without --python/--platform: for this interpreter and machine."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Requested(spec=spec, python=python, tag=PLATFORMS.get(machine_subdir(), ""))


def _from_path(spec: str) -> Requested:
    """A wheel file's CPython and platform, from its name alone; unknown ("") when the name
    is not a wheel's or names several (reading the wheel reports that properly)."""
    try:
        _, _, _, tags = parse_wheel_filename(Path(spec).name)
    except InvalidWheelFilename:
        return Requested(spec=spec, python="", tag="")
    pairs = {(_python_of(t.interpreter), t.platform) for t in tags}
    if len(pairs) != 1:
        return Requested(spec=spec, python="", tag="")
    ((python, tag),) = pairs
    return Requested(spec=spec, python=python, tag=tag)


def _python_of(interpreter: str) -> str:
    """cp312 -> 3.12; "" for anything but a CPython tag."""
    return cpython_version(interpreter)


def _version_key(python: str) -> tuple[int, ...]:
    return tuple(int(part) for part in python.split("."))
