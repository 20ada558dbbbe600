"""Turn the WHEEL argument (a path, a requirement, or nothing) into a local wheel file."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from splitter.errors import ExternalToolError, InvalidWheel
from splitter.model import Recipe

CACHE_ENV = "SPLITTER_CACHE"


def cache_dir() -> Path:
    """Where downloaded wheels are kept: $SPLITTER_CACHE, else ~/.cache/splitter."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "splitter"
    return Path(root) / "wheels"


def resolve_input(spec: str | None, recipe: Recipe) -> Path:
    """A local .whl path for `spec`; a requirement is downloaded once with pip and cached."""
    if spec is None:
        spec = f"{recipe.project}=={recipe.default_version}"
    path = Path(spec)
    if spec.endswith(".whl") or path.exists():
        if not path.is_file():
            raise InvalidWheel(f"wheel not found: {path}")
        return path
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as exc:
        raise InvalidWheel(
            f"neither a wheel file nor a requirement ({exc}): {spec}\n"
            f"pass a .whl path or a requirement such as {recipe.project}=={recipe.default_version}"
        ) from exc
    cached = _cached(requirement)
    if cached is not None:
        return cached
    return _download(requirement)


def _cached(requirement: Requirement) -> Path | None:
    """The newest cached wheel meeting `requirement` that this interpreter can install; among
    equal versions the best-ranked tag (sys_tags order), then the first filename."""
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
        supported = [ranks[t] for t in tags if t in ranks]
        if supported:
            found.append((version, min(supported), candidate.name, candidate))
    if not found:
        return None
    newest = max(version for version, *_ in found)
    return min(c for c in found if c[0] == newest)[3]


def _download(requirement: Requirement) -> Path:
    """pip download under a lock on the cache: builds started at once share one download."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".download.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = _cached(requirement)  # another build may have fetched it while we waited
        if cached is not None:
            return cached
        moved = download_wheels(str(requirement), directory)
    found = _cached(requirement) or next(iter(moved), None)
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
