"""Turn the WHEEL argument (a path, a requirement, or nothing) into a local wheel file."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from splitter.errors import ExternalToolError, InvalidWheel
from splitter.model import Recipe
from splitter.platforms import (
    MANYLINUX,
    by_machine,
    by_subdir,
    by_wheel_tag,
    cpython_tag,
    subdirs,
)

CACHE_ENV = "SPLITTER_CACHE"


def machine_subdir() -> str:
    """The conda subdir of the Linux machine splitter runs on ("" when splitter builds none
    for it, or on another system)."""
    if not sys.platform.startswith("linux"):
        return ""
    found = by_machine(os.uname().machine, MANYLINUX)
    return "" if found is None else found.subdir


def cache_root() -> Path:
    """splitter's cache: $SPLITTER_CACHE, else ~/.cache/splitter."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "splitter")


def cache_dir() -> Path:
    """Where downloaded wheels are kept: wheels/ in the cache."""
    return cache_root() / "wheels"


# What `--python all` and `--platform all` mean: the CPython versions and platforms whose
# wheels splitter splits as one release: every platform it splits (splitter.platforms; the
# shipped recipe's rules cover manylinux and macosx). deb and rpm are Linux-only: request.py
# refuses them with `all` before anything is fetched.
ALL_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


@dataclass(frozen=True, slots=True)
class WheelTarget:
    """One CPython version on one platform (a conda subdir), to fetch a wheel for."""

    python: str  # "3.12"
    subdir: str  # "linux-64"

    def accepts(self, tag: Tag) -> bool:
        """Whether a wheel tagged `tag` is this target's: its CPython ABI on a manylinux (or
        macosx) tag of its machine."""
        cp = cpython_tag(self.python)
        platform = by_wheel_tag(tag.platform)
        return (
            tag.interpreter == cp
            and tag.abi == cp
            and platform is not None
            and platform.subdir == self.subdir
        )

    def pip_options(self) -> tuple[str, ...]:
        """pip download's options that select this target's wheel."""
        cp = cpython_tag(self.python)
        found = by_subdir(self.subdir)
        assert found is not None, self.subdir  # wheel_targets checked it
        platform = ("--platform", found.wheel_tag)
        return (*platform, "--python-version", self.python, "--implementation", "cp", "--abi", cp)


def wheel_targets(pythons: str, platforms: str) -> list[WheelTarget]:
    """The targets `--python 3.10,3.12|all` and `--platform linux-64,...|all` name."""
    chosen_pythons = ALL_PYTHONS if pythons == "all" else tuple(pythons.split(","))
    chosen_platforms = subdirs() if platforms == "all" else tuple(platforms.split(","))
    for python in chosen_pythons:
        if python not in ALL_PYTHONS:
            raise InvalidWheel(
                f"--python names a CPython splitter has no wheels for: {python}; "
                f"use {', '.join(ALL_PYTHONS)} or all"
            )
    for platform in chosen_platforms:
        if by_subdir(platform) is None:
            raise InvalidWheel(
                f"--platform names a platform splitter cannot split yet: {platform}; "
                f"use {', '.join(subdirs())} or all"
            )
    return [WheelTarget(p, s) for s in chosen_platforms for p in chosen_pythons]


def requested_targets(pythons: str | None, platforms: str | None) -> list[WheelTarget]:
    """The targets --python and --platform name, each defaulting to this interpreter's
    CPython and this machine's platform."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return wheel_targets(pythons or here, platforms or machine_subdir())


def is_wheel_path(spec: str) -> bool:
    """Whether a WHEEL argument names a file (a .whl, or anything that exists), not a
    requirement."""
    return spec.endswith(".whl") or Path(spec).exists()


def resolve_inputs(
    specs: list[str], recipe: Recipe, pythons: str | None, platforms: str | None
) -> list[Path]:
    """Local wheels for the WHEEL arguments: paths as they are; a requirement (or none: the
    recipe's pin) is fetched for this interpreter and machine, or, with --python/--platform,
    for each CPython and platform they name."""
    if pythons is None and platforms is None:
        return (
            [resolve_input(spec, recipe) for spec in specs]
            if specs
            else [resolve_input(None, recipe)]
        )
    targets = requested_targets(pythons, platforms)
    found: list[Path] = []
    for spec in specs or [f"{recipe.project}=={recipe.default_version}"]:
        if is_wheel_path(spec):
            found.append(resolve_input(spec, recipe))
            continue
        requirement = _requirement(spec, recipe)
        for target in targets:
            found.append(_cached(requirement, target) or _download(requirement, target))
    return found


def resolve_input(spec: str | None, recipe: Recipe) -> Path:
    """A local .whl path for `spec`; a requirement is downloaded once with pip and cached."""
    if spec is None:
        spec = f"{recipe.project}=={recipe.default_version}"
    path = Path(spec)
    if is_wheel_path(spec):
        if not path.is_file():
            raise InvalidWheel(f"wheel not found: {path}")
        return path
    requirement = _requirement(spec, recipe)
    cached = _cached(requirement)
    if cached is not None:
        return cached
    return _download(requirement)


def _requirement(spec: str, recipe: Recipe) -> Requirement:
    try:
        return Requirement(spec)
    except InvalidRequirement as exc:
        raise InvalidWheel(
            f"neither a wheel file nor a requirement ({exc}): {spec}\n"
            f"pass a .whl path or a requirement such as {recipe.project}=={recipe.default_version}"
        ) from exc


def _cached(requirement: Requirement, target: WheelTarget | None = None) -> Path | None:
    """The newest cached wheel meeting `requirement` that this interpreter (or `target`) can
    install; among equal versions the best-ranked tag (sys_tags order), then the filename."""
    directory = cache_dir()
    if not directory.is_dir():
        return None
    ranks: dict[Tag, int] = {}
    for rank, tag in enumerate(sys_tags()):
        ranks.setdefault(tag, rank)
    wanted = canonicalize_name(requirement.name)
    found: list[tuple[Version, int, str, Path]] = []
    for candidate in directory.glob("*.whl"):
        try:
            name, version, _, tags = parse_wheel_filename(candidate.name)
        except ValueError:
            continue
        if name != wanted or not requirement.specifier.contains(version, prereleases=True):
            continue
        if target is not None:
            supported = [0 for t in tags if target.accepts(t)]
        else:
            supported = [ranks[t] for t in tags if t in ranks]
        if supported:
            found.append((version, min(supported), candidate.name, candidate))
    if not found:
        return None
    newest = max(version for version, *_ in found)
    return min(c for c in found if c[0] == newest)[3]


def _download(requirement: Requirement, target: WheelTarget | None = None) -> Path:
    """pip download under a lock on the cache: builds started at once share one download."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".download.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = _cached(requirement, target)  # another build may have fetched it meanwhile
        if cached is not None:
            return cached
        options = target.pip_options() if target is not None else ()
        moved = download_wheels(str(requirement), directory, options)
    found = _cached(requirement, target) or next(iter(moved), None)
    if found is None:
        raise InvalidWheel(f"pip downloaded no wheel for {requirement} into {directory}")
    return found


def download_wheels(requirement: str, directory: Path, options: tuple[str, ...] = ()) -> list[Path]:
    """`pip download --no-deps` into a temporary directory beside `directory`, each wheel moved
    in when complete: a reader of `directory` never sees half a wheel."""
    with tempfile.TemporaryDirectory(prefix=".download-", dir=directory) as temporary:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            temporary,
            *options,
            requirement,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            message = f"pip could not download {requirement}"
            raise ExternalToolError(message, command, result.returncode, result.stderr)
        moved = []
        for wheel in sorted(Path(temporary).glob("*.whl")):
            os.replace(wheel, directory / wheel.name)
            moved.append(directory / wheel.name)
    return moved
