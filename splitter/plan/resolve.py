"""The core's entry from a request to what is planned: the WHEEL arguments and --python/
--platform resolved into wheel files (fetched when not cached), the recipe loaded once, and
the plan made: one wheel gives its Plan; several give a ReleasePlanning, which a build plans
wheel by wheel as it goes and `splitter plan` plans at once into a Release (a single wheel is
a release of one to every builder: splitter.targets.builder.as_release).

The CLI only parses the request and draws the progress this module reports."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from splitter.input.fetch import resolve_input, resolve_inputs
from splitter.input.zipread import open_archive
from splitter.model import Plan, Progress, Recipe
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.release import Release, ReleasePlanning, planned

RESOLVING = "resolving the wheel (pip download when not cached)"
RESOLVING_MANY = "resolving the wheels (pip download when not cached)"
PLANNING_RELEASE = "planning the release"
SCANNING_STAGE = "scan"  # splitter.input.scan's progress reports
SCANNING = "scanning the files the recipe's licence scan does not hold (licensecheck)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What the command line asks to plan or build."""

    wheels: tuple[str, ...] = ()  # wheel paths or requirements; none: the recipe's pin
    recipe: Path | None = None  # None: the shipped recipe
    python: str | None = None  # --python: 3.10,3.12 or all
    platform: str | None = None  # --platform: linux-64,... or all

    @property
    def single(self) -> bool:
        """Whether the request names one wheel without asking for several Pythons or
        platforms (then no release is formed, even before resolving)."""
        return len(self.wheels) <= 1 and self.python is None and self.platform is None


def open_request(request: Request, progress: Progress | None = None) -> Plan | ReleasePlanning:
    """What a build takes: the plan of one wheel, or the release the wheels form, not yet
    planned (a release build plans each wheel as it goes)."""
    recipe = load_recipe(request.recipe)
    if request.single:
        return _plan_one(request.wheels[0] if request.wheels else None, recipe, progress)
    if progress is not None:
        progress(RESOLVING_MANY, 0, 0)
    paths = resolve_inputs(list(request.wheels), recipe, request.python, request.platform)
    if len(paths) == 1:
        return _plan_one(str(paths[0]), recipe, progress)
    return ReleasePlanning(paths, recipe)


def plan_request(request: Request, progress: Progress | None = None) -> Plan | Release:
    """What `splitter plan` and `splitter diff` show: the plan of one wheel, or every wheel
    of the release planned and checked to form one."""
    opened = open_request(request, progress)
    if isinstance(opened, ReleasePlanning):
        if progress is not None:
            progress(PLANNING_RELEASE, 0, 0)
        return planned(opened, progress)
    return opened


def plans_of(result: Plan | Release) -> list[Plan]:
    """The plans of one wheel or of a release's wheels."""
    return [result] if isinstance(result, Plan) else [p for g in result.groups for p in g.plans]


def _plan_one(spec: str | None, recipe: Recipe, progress: Progress | None) -> Plan:
    """Resolve one WHEEL argument and plan it, reporting the members read of the whole."""
    if progress is None:
        return make_plan(resolve_input(spec, recipe), recipe)
    progress(RESOLVING, 0, 0)
    path = resolve_input(spec, recipe)
    label = f"verifying and analysing {path.name}"
    total = len(_member_names(path))
    progress(label, 0, total)

    def report(stage: str, done: int, scanned: int) -> None:
        if stage == SCANNING_STAGE:
            progress(SCANNING, done, scanned)
        else:
            progress(label, done, total)

    return make_plan(path, recipe, report)


def _member_names(path: Path) -> list[str]:
    """Member names of a zip, for a progress total; empty when it cannot be read (the plan
    reports that properly)."""
    try:
        archive = open_archive(path, keep=True)  # the plan's reading takes it again
        return [n for n in archive.namelist() if not n.endswith("/")]
    except (OSError, zipfile.BadZipFile):
        return []


def request_wheels(request: Request) -> tuple[Recipe, list[Path]]:
    """The recipe and the wheel files a request names (fetched when not cached), for the
    licence review, which reads wheels the plan may still refuse."""
    recipe = load_recipe(request.recipe)
    if request.single:
        return recipe, [resolve_input(request.wheels[0] if request.wheels else None, recipe)]
    return recipe, resolve_inputs(list(request.wheels), recipe, request.python, request.platform)
