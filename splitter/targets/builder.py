"""The builder contract and the driver every target goes through.

A target is a `Builder`: given a release (a single wheel is a release of one) and an empty
directory, it writes its packages there and says which files are packages (`Artifact`s). The
driver, `build_output`, owns the rest, the same for every target: the staging directory beside
OUT and its atomic publish (splitter.targets.output), which replaces what the previous build of
OUT wrote and never a user's file, and the manifest (splitter.manifest) that lists the inputs,
the recipe (a copy in OUT when it is not the shipped one), every artifact with its digest, and
every file written.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from splitter import __version__
from splitter.manifest import NAME as MANIFEST
from splitter.manifest import RECIPE_COPY, SOURCE, Artifact, Manifest, RecipeUsed, digest
from splitter.model import Limits, PackagePlan, Plan, Progress, Recipe, Target
from splitter.plan.recipe import default_recipe_path
from splitter.plan.release import Release, ReleasePlanning, check_release
from splitter.targets.output import atomic_output, files_under

# what a user publishes: binary and source packages (a .dsc, its .orig.tar.gz, .debian.tar.xz)
PACKAGE_SUFFIXES = (".conda", ".whl", ".deb", ".rpm", ".conan.tgz", ".dsc", ".tar.gz", ".tar.xz")


class Builder(Protocol):
    """What every target implements."""

    @property
    def target(self) -> Target:
        """Which target this is (written into the manifest)."""
        ...

    @property
    def limits(self) -> Limits:
        """What it cannot build, asked of the request before anything is fetched."""
        ...

    def build(
        self, release: ReleasePlanning, build: Path, progress: Progress | None
    ) -> list[Artifact]:
        """Write the release's packages into the empty directory `build`; return the package
        files written, their paths relative to `build` (digests are the driver's)."""
        ...


@dataclass(frozen=True, slots=True)
class Built:
    """What a build published: OUT and its manifest."""

    out: Path
    manifest: Manifest

    @property
    def written(self) -> list[Path]:
        """Every file the build wrote into OUT, its manifest included, sorted."""
        return [self.out / f for f in sorted((*self.manifest.files, MANIFEST))]

    @property
    def artifacts(self) -> list[Path]:
        """The package files, in the manifest's order."""
        return [self.out / a.path for a in self.manifest.artifacts]


def as_release(source: Plan | Release | ReleasePlanning) -> ReleasePlanning:
    """A single wheel's plan as a release of one; a release as the planning builders take."""
    if isinstance(source, ReleasePlanning):
        return source
    if isinstance(source, Plan):
        source = check_release([source], source.recipe)
    return ReleasePlanning.of(source)


def build_output(
    builder: Builder,
    source: Plan | Release | ReleasePlanning,
    out: Path,
    progress: Progress | None = None,
) -> Built:
    """Build `source` with `builder` into OUT: staged beside it, published only when complete,
    with OUT/splitter-manifest.json."""
    release = as_release(source)
    recipe, text = recipe_used(release.recipe)
    with atomic_output(out) as build:
        artifacts = builder.build(release, build, progress)
        if recipe.copy is not None:
            (build / recipe.copy).write_bytes(text)
        manifest = make_manifest(builder.target, release.release(), artifacts, build, recipe)
        (build / MANIFEST).write_text(manifest.text(), encoding="utf-8")
    return Built(out, manifest)


def recipe_used(recipe: Recipe) -> tuple[RecipeUsed, bytes]:
    """What the manifest records of the recipe, and its bytes: a recipe other than the
    shipped one is copied into OUT, so that `verify` checks the output against its rules."""
    text = recipe.path.read_bytes()
    shipped = recipe.path.resolve() == default_recipe_path().resolve()
    used = RecipeUsed(
        # its file name: a path would record the build machine's directories (its sha256 and
        # the copy say which recipe it was)
        path=recipe.path.name,
        sha256=hashlib.sha256(text).hexdigest(),
        copy=None if shipped else RECIPE_COPY,
    )
    return used, text


def make_manifest(
    target: Target,
    release: Release,
    artifacts: list[Artifact],
    build: Path,
    recipe: RecipeUsed | None = None,
) -> Manifest:
    """The manifest of what `build` holds; every package file must be an artifact. An
    artifact's sha256 is the one its builder gives (conda: the channel index's, hashed as the
    package was finished), or else its file's."""
    files = sorted(files_under(build) - {MANIFEST})
    listed = {a.path for a in artifacts}
    unlisted = [f for f in files if f.endswith(PACKAGE_SUFFIXES) and f not in listed]
    missing = sorted(listed - set(files))
    assert not unlisted and not missing, f"builder's artifacts: {unlisted=} {missing=}"
    hashed = []
    for artifact in sorted(artifacts, key=lambda a: a.path):
        if artifact.sha256:  # the builder hashed the file as it finished it (conda's index)
            assert (build / artifact.path).stat().st_size == artifact.size, artifact
            hashed.append(artifact)
            continue
        sha256, size = digest(build / artifact.path)
        hashed.append(dataclasses.replace(artifact, sha256=sha256, size=size))
    return Manifest(
        splitter=__version__,
        target=str(target),
        inputs=release.inputs,
        artifacts=tuple(hashed),
        files=tuple(files),
        recipe=recipe,
        excluded=tuple(
            sorted(
                {(e.path, e.reason) for g in release.groups for p in g.plans for e in p.excluded}
            )
        ),
    )


def artifact(
    path: str, plan: Plan, package: PackagePlan, sha256: str = "", size: int = 0
) -> Artifact:
    """An artifact of `package`, built from `plan`'s wheel (its Python when it is a Python
    package); `sha256` and `size`: the finished file's, when its builder has hashed it."""
    python = "{}.{}".format(*plan.platform.python) if package.python else None
    return Artifact(
        path=path,
        package=package.name,
        platform=plan.platform.conda_subdir,
        python=python,
        components=package.cmake_components,
        sha256=sha256,
        size=size,
    )


def source_artifact(path: str, name: str) -> Artifact:
    """A file of the source package `name` (a .dsc and its tarballs, a .src.rpm)."""
    return Artifact(path=path, package=name, platform=SOURCE, python=None)


def single(release: Release) -> Plan | None:
    """The plan of a release of one wheel (a single wheel's build), else None."""
    plans = [p for group in release.groups for p in group.plans]
    return plans[0] if len(plans) == 1 else None
