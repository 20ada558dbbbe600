"""The output manifest: what a `splitter build` wrote into OUT, read back by everything after it.

Every build writes OUT/splitter-manifest.json. It names the target, the input wheels, every
package file (an artifact: its package, platform, Python and digest) and every file the build
wrote, and the recipe it used (with a copy in OUT when it was not the shipped one, which
`verify` checks the output against). The build summary, `verify` and `doctor --output` read it
instead of guessing packages, platforms and Pythons back from file names; the next build into
the same OUT replaces exactly the files it lists and refuses to overwrite any other (a file the
user keeps there).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitter.errors import ManifestError

NAME = "splitter-manifest.json"
# Schema 1 grows by optional keys: an older manifest (no "recipe") still reads, and an older
# splitter reads this one.
SCHEMA = "splitter.manifest/1"
# the platform of a source package's artifacts (.dsc and its tarballs, .src.rpm): they
# rebuild the binary packages of every platform and install nothing themselves
SOURCE = "source"
RECIPE_COPY = "splitter-recipe.toml"  # a --recipe build's recipe, in OUT


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifact:
    """A package file in OUT (a tree's: its `<package>.json` file list)."""

    path: str  # relative to OUT, POSIX
    package: str  # the plan's package name (executorch-runtime), whatever the file is called
    platform: str  # the conda subdir of its platform (linux-64, osx-arm64)
    python: str | None  # "3.11" for a Python package's build, None when Python-independent
    components: tuple[str, ...] = ()  # the CMake components the package provides
    sha256: str = ""
    size: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipeUsed:
    """The recipe a build used."""

    path: str  # its file name (--recipe's, or the shipped executorch.toml)
    sha256: str
    copy: str | None  # its copy in OUT (relative, POSIX) for a --recipe build; None: shipped

    def to_json(self) -> dict[str, Any]:
        """The manifest's "recipe" object."""
        return {"path": self.path, "sha256": self.sha256, "copy": self.copy}


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """OUT/splitter-manifest.json as a record."""

    splitter: str  # the version that wrote it
    target: str  # conda, wheel, tree, deb, rpm
    inputs: tuple[tuple[str, str], ...]  # (file name, sha256) of every input wheel, sorted
    artifacts: tuple[Artifact, ...]
    files: tuple[str, ...]  # every file written, relative to OUT, sorted (this one excluded)
    recipe: RecipeUsed | None = None  # None: written before manifests recorded it
    # (wheel path, reason) of every input's file the recipe excludes from every package
    excluded: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON document (keys in the documented order)."""
        return {
            "schema": SCHEMA,
            "splitter": self.splitter,
            "target": self.target,
            **({} if self.recipe is None else {"recipe": self.recipe.to_json()}),
            "inputs": [{"filename": name, "sha256": sha} for name, sha in self.inputs],
            "artifacts": [
                {
                    "path": a.path,
                    "package": a.package,
                    "platform": a.platform,
                    "python": a.python,
                    "components": list(a.components),
                    "sha256": a.sha256,
                    "size": a.size,
                }
                for a in self.artifacts
            ],
            "files": list(self.files),
            "excluded": [{"path": path, "reason": reason} for path, reason in self.excluded],
        }

    def text(self) -> str:
        """The file's bytes, as text: stable for the same build."""
        return json.dumps(self.to_json(), indent=1) + "\n"

    def provider(self, component: str) -> str | None:
        """The package that provides a CMake component (runtime, kernels_quantized), if any."""
        found = sorted({a.package for a in self.artifacts if component in a.components})
        return found[0] if found else None

    @property
    def binaries(self) -> tuple[Artifact, ...]:
        """The artifacts that install (every one but a source package's files)."""
        return tuple(a for a in self.artifacts if a.platform != SOURCE)

    def packages(self, platform: str | None = None) -> tuple[str, ...]:
        """The package names of the binary artifacts (of one platform), sorted and unique."""
        return tuple(sorted({a.package for a in self.binaries if platform in (None, a.platform)}))


def digest(path: Path) -> tuple[str, int]:
    """(sha256, size) of a file, read in blocks."""
    sha = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            sha.update(block)
            size += len(block)
    return sha.hexdigest(), size


def read_manifest(out: Path) -> Manifest:
    """OUT's manifest; a ManifestError names the file and what to do when it is missing or
    not one splitter wrote."""
    path = out / NAME
    if not path.is_file():
        raise ManifestError(
            f"not a splitter output (no {NAME}): {out}\n"
            "point at the -o directory of `splitter build` (rebuild it if an older splitter "
            "wrote it)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, not {SCHEMA!r}")
        return Manifest(
            splitter=str(data["splitter"]),
            target=str(data["target"]),
            inputs=tuple((str(i["filename"]), str(i["sha256"])) for i in data["inputs"]),
            artifacts=tuple(
                Artifact(
                    path=str(a["path"]),
                    package=str(a["package"]),
                    platform=str(a["platform"]),
                    python=None if a["python"] is None else str(a["python"]),
                    components=tuple(str(c) for c in a["components"]),
                    sha256=str(a["sha256"]),
                    size=int(a["size"]),
                )
                for a in data["artifacts"]
            ),
            files=tuple(str(f) for f in data["files"]),
            recipe=_recipe(data.get("recipe")),
            excluded=tuple((str(e["path"]), str(e["reason"])) for e in data.get("excluded", ())),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ManifestError(
            f"unreadable manifest ({exc}): {path}\nrebuild the output with `splitter build`"
        ) from exc


def _recipe(data: Any) -> RecipeUsed | None:
    """The manifest's "recipe" object as a record (None when absent: an older manifest)."""
    if data is None:
        return None
    copy = data["copy"]
    return RecipeUsed(
        path=str(data["path"]),
        sha256=str(data["sha256"]),
        copy=None if copy is None else str(copy),
    )


def recipe_copy(out: Path, manifest: Manifest) -> Path | None:
    """The copy in OUT of the recipe a --recipe build used, checked against the sha256 the
    manifest recorded (a ManifestError names it when missing or changed); None when the build
    used the shipped recipe, or its manifest does not say."""
    used = manifest.recipe
    if used is None or used.copy is None:
        return None
    path = out / used.copy
    if not path.is_file():
        problem = "is missing"
    elif digest(path)[0] != used.sha256:
        problem = "has changed since the build (sha256 differs)"
    else:
        return path
    raise ManifestError(
        f"the recipe this output was built with {problem}: {path}\n"
        f"verify checks an output against the recipe it was built with ({used.path} when "
        f"built, sha256 {used.sha256}, per {out / NAME}); rebuild it with `splitter build`"
    )


def check_artifacts(out: Path, manifest: Manifest) -> None:
    """Refuse (naming each file) an artifact that is missing or whose sha256 or size is not
    the manifest's: an output altered after its build is not verified or diagnosed."""
    problems = []
    for artifact in manifest.artifacts:
        path = out / artifact.path
        if not path.is_file():
            problems.append(f"  missing: {path}")
            continue
        if digest(path) != (artifact.sha256, artifact.size):
            problems.append(f"  changed since the build (sha256 differs): {path}")
    if problems:
        raise ManifestError(
            f"the output is not what splitter built ({len(problems)} file(s), per {out / NAME}):\n"
            + "\n".join(problems)
            + "\nrebuild it with `splitter build`"
        )
