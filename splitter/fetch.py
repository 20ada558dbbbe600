"""Turn the WHEEL argument (a path, a requirement, or nothing) into a local wheel file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

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
    directory = cache_dir()
    if not directory.is_dir():
        return None
    supported = {str(t) for t in sys_tags()}
    best: list[tuple[str, Path]] = []
    for candidate in directory.glob("*.whl"):
        try:
            name, version, _, tags = parse_wheel_filename(candidate.name)
        except ValueError:
            continue
        if name != requirement.name.lower().replace("_", "-"):
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            continue
        if any(str(t) in supported for t in tags):
            best.append((str(version), candidate))
    return max(best)[1] if best else None


def _download(requirement: Requirement) -> Path:
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    before = set(directory.glob("*.whl"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(directory),
        str(requirement),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ExternalToolError(
            f"pip could not download {requirement}", command, result.returncode, result.stderr
        )
    found = _cached(requirement) or next(iter(set(directory.glob("*.whl")) - before), None)
    if found is None:
        raise InvalidWheel(f"pip downloaded no wheel for {requirement} into {directory}")
    return found
