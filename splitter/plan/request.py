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
from splitter.input.fetch import is_wheel_path, machine_subdir, requested_targets
from splitter.model import Limits, Plan
from splitter.plan.facts import subdir_of_tag
from splitter.platforms import by_subdir, cpython_version, subdirs

DEFAULT = "the recipe's pin"  # what no WHEEL argument stands for


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
                Requested(spec=spec, python=t.python, tag=_wheel_tag(t.subdir)) for t in targets
            ]
    return found


def check_build_request(
    specs: Sequence[str],
    pythons: str | None,
    platforms: str | None,
    limits: Limits,
) -> None:
    """Refuse, from the arguments alone, a build the target declares it cannot make
    (`limits`): a release where it builds one wheel, a platform it does not package, several
    Pythons on one platform where it builds for one."""
    wheels = requested_wheels(specs, pythons, platforms)
    if not limits.release and len(wheels) > 1:
        raise UsageError(limits.why_not_release)
    if limits.platforms is not None:
        for wheel in wheels:
            if wheel.subdir and wheel.subdir not in limits.platforms:
                if platforms == "all":
                    raise all_platforms_refused(limits, wheel.subdir)
                raise unsupported_platform(limits, wheel.tag, wheel.describe())
    # a requirement named twice for one Python is one wheel: the release check's to refuse
    named = dict.fromkeys((w.subdir, w.python) for w in wheels if w.subdir and w.python)
    _one_python_each(limits, list(named))


def check_planned(plans: Sequence[Plan], limits: Limits) -> Sequence[Plan]:
    """The same refusals as check_build_request, of wheels already planned (a wheel path
    whose name did not tell its platform): a builder calls it before it stages anything.
    Returns `plans`."""
    if not limits.release and len(plans) > 1:
        raise UsageError(limits.why_not_release)
    for plan in plans:
        if limits.platforms is not None and plan.platform.conda_subdir not in limits.platforms:
            raise unsupported_platform(limits, plan.platform.tag, plan.wheel.filename)
    # two wheels of one Python too: one python3, one package name
    _one_python_each(
        limits, [(p.platform.conda_subdir, "{}.{}".format(*p.platform.python)) for p in plans]
    )
    return plans


def _one_python_each(limits: Limits, wheels: Sequence[tuple[str, str]]) -> None:
    """Refuse several (subdir, Python) wheels of one platform where `limits` say one."""
    if not limits.one_python_per_platform:
        return
    by_subdir: dict[str, list[str]] = {}
    for subdir, python in wheels:
        by_subdir.setdefault(subdir, []).append(python)
    for subdir, found in sorted(by_subdir.items()):
        if len(found) > 1:
            raise several_pythons(limits.target, subdir, sorted(found, key=_version_key))


def unsupported_platform(limits: Limits, tag: str, wheel: str) -> UsageError:
    """The refusal of a wheel of a platform the target does not package."""
    names = ", ".join(sorted(limits.platforms or ()))
    return UsageError(
        f"--target {limits.target} packages {names} wheels only "
        f"(the wheel's platform is {tag}): {wheel}\n{limits.advice}"
    )


def all_platforms_refused(limits: Limits, subdir: str) -> UsageError:
    """The refusal of `--platform all` by a target that packages some of the platforms."""
    chosen = [p for p in subdirs() if p in (limits.platforms or ())]
    return UsageError(
        f"--target {limits.target} packages {', '.join(chosen)} wheels only, and --platform "
        f"all names {', '.join(subdirs())}: {subdir} has no {limits.target}\n"
        f"name the platforms it packages: --platform {','.join(chosen)}"
    )


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


def _this_machine(spec: str) -> Requested:
    """A requirement fetched without --python/--platform: for this interpreter and machine."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Requested(spec=spec, python=python, tag=_wheel_tag(machine_subdir()))


def _wheel_tag(subdir: str) -> str:
    """The platform tag a wheel of `subdir` is fetched for ("" for none)."""
    platform = by_subdir(subdir)
    return platform.wheel_tag if platform else ""


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
