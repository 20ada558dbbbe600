"""The recipe backends (`--backend rattler-build`, `conda-build`): a single wheel's generated
recipes (splitter.targets.conda.recipes) built by that tool, offline, from the local wheel,
and the channel indexed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from splitter.errors import ExternalToolError
from splitter.manifest import Artifact
from splitter.model import CondaBackend
from splitter.plan.release import ReleasePlanning
from splitter.plan.request import check_planned
from splitter.targets.builder import artifact
from splitter.targets.conda.channel import index_channel
from splitter.targets.conda.meta import build_string
from splitter.targets.conda.options import DEFAULT_LEVEL, CondaOptions, stage_prefix
from splitter.targets.conda.recipes import write_recipes
from splitter.targets.scratch import scratch_dir
from splitter.targets.stage import Progress


def build_from_recipes(
    release: ReleasePlanning, build: Path, progress: Progress | None, options: CondaOptions
) -> list[Artifact]:
    """`--backend rattler-build` or `conda-build`: the generated recipes of one wheel, built
    by that tool from the local wheel (offline)."""
    backend = options.backend
    (plan,) = check_planned(list(release.plans(progress)), options.limits)
    subdir = plan.platform.conda_subdir
    builds = {p.name: build_string(plan, p) for p in plan.packages}
    with scratch_dir(sum(p.bytes for p in plan.packages)) as work:
        staged = stage_prefix(plan, work, options, progress)
        write_recipes(plan, staged.install, build / "recipes", builds)
        (build / subdir).mkdir()
        local = work / "local-recipes"
        write_recipes(plan, staged.install, local, builds, url=plan.wheel.path.as_uri())
        build_recipe(local / backend, backend, build / subdir, work, options.compression_level)
        index_channel(build, subdir)
    return [
        artifact(f"{subdir}/{p.name}-{p.version}-{builds[p.name]}.conda", plan, p)
        for p in plan.packages
    ]


def build_recipe(
    source: Path, backend: CondaBackend, directory: Path, work: Path, level: int = DEFAULT_LEVEL
) -> None:
    """Build the rendered recipe directory `source` with `backend`, offline, into `directory`."""
    name = "recipe.yaml" if backend == CondaBackend.RATTLER_BUILD else "meta.yaml"
    scripts = sysconfig.get_path("scripts")
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    if backend == CondaBackend.RATTLER_BUILD:
        code = (
            "import sys\n"
            "from rattler_build import Stage0Recipe\n"
            "Stage0Recipe.from_file(sys.argv[1]).run_build(output_dir=sys.argv[2], channels=[],"
            " no_include_recipe=True, package_format=sys.argv[3])\n"
        )
        command = [
            sys.executable,
            "-c",
            code,
            str(source / name),
            str(work / "rattler-out"),
            f"conda:{level}",
        ]
        built = work / "rattler-out" / directory.name
    else:
        command = [
            "conda-build",
            str(source),
            "--output-folder",
            str(work / "cb-out"),
            "--no-anaconda-upload",
            "--override-channels",
        ]
        built = work / "cb-out" / directory.name
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise ExternalToolError(
            f"{backend} could not build the generated recipe",
            command,
            result.returncode,
            result.stderr + result.stdout,
        )
    for package in sorted(built.glob("*.conda")) + sorted(built.glob("*.tar.bz2")):
        shutil.copy2(package, directory / package.name)
