"""The recipe an output was built with, as its manifest records it: what `verify` checks the
output against (not whichever recipe this splitter ships)."""

from __future__ import annotations

from pathlib import Path

from splitter.errors import ManifestError
from splitter.manifest import Manifest, digest, recipe_copy
from splitter.model import Recipe
from splitter.plan.recipe import default_recipe_path, load_recipe


def build_recipe(out: Path, manifest: Manifest) -> Recipe:
    """The recipe of `out`'s build: its copy in OUT for a --recipe build (checked against the
    manifest's sha256), else the shipped one, which must be the one the build used (an older
    manifest, which does not say, gets the shipped one). A ManifestError names the file that
    is not the recipe the build used."""
    copy = recipe_copy(out, manifest)
    if copy is not None:
        return load_recipe(copy)
    shipped = default_recipe_path()
    used = manifest.recipe
    if used is not None and digest(shipped)[0] != used.sha256:
        raise ManifestError(
            "the shipped recipe is not the one this output was built with (sha256 differs): "
            f"{shipped}\nverify it with the splitter that built it ({manifest.splitter}), or "
            "rebuild it with this one"
        )
    return load_recipe(shipped)
