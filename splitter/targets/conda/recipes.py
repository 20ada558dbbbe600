"""Rebuild recipes for packagers' own infrastructure, generated from the plan.

`recipes/rattler-build/recipe.yaml` (v1, multi-output) and `recipes/conda-build/meta.yaml`
describe the same split as the assembled packages: the source is the wheel (URL and sha256),
and each output runs `install.sh <package>`, the replay script of splitter.targets.replay
(install-split, the one the Debian and RPM source packages run), which installs the files of
the package's install plan listed in `<package>/install.list` into $PREFIX, from the wheel or
from `<package>/generated/`, and sets the RUNPATHs with patchelf. Both recipes need only
`unzip` and `patchelf` on PATH and no channel, so they build offline. For a macOS (Mach-O)
split, the list gives each binary's upstream LC_RPATHs too; the script replaces them with
`install_name_tool` and re-signs with `codesign` (ad-hoc), so those recipes build on macOS.
"""

from __future__ import annotations

import json
from pathlib import Path

from splitter.errors import RecipeError
from splitter.model import PackagePlan, Plan
from splitter.plan.licences import licence_texts
from splitter.plan.report import verdict_json
from splitter.targets.conda.meta import conda_depends, run_exports
from splitter.targets.install import InstallPlan
from splitter.targets.replay import GENERATED, LIST, Replay, install_split, render_replay

INSTALL_SH = "install.sh"  # the replay script (splitter.targets.replay), beside each recipe
NEEDS = {False: "Needs unzip and patchelf.", True: "Needs unzip, install_name_tool and codesign."}


def source_url(plan: Plan) -> str:
    """PyPI's stable redirect URL of a wheel: /packages/<python tag>/<initial>/<name>/<file>."""
    name = plan.wheel.name
    return (
        f"https://files.pythonhosted.org/packages/{plan.wheel.python_tag}/{name[0]}/{name}/"
        f"{plan.wheel.filename}"
    )


def q(value: str) -> str:
    """A YAML scalar that no parser reinterprets (JSON strings are YAML)."""
    return json.dumps(value)


def write_support(
    plan: Plan,
    install: InstallPlan,
    directory: Path,
    folders: dict[str, str] | None = None,
    replays: dict[str, Replay] | None = None,
) -> None:
    """install.sh and, per package, its install.list and generated/ (shared by both recipes),
    from the install plan the packages were staged from (`replays`: each package's, when
    already rendered). `folders` names the support folder of each package to write (default:
    every package, in a folder named after it); a release gives each Python package one per
    Python."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / INSTALL_SH).write_text(install_split())
    (directory / INSTALL_SH).chmod(0o755)
    if folders is None:
        folders = {name: name for name in install.packages}
    for package in plan.packages:
        if package.name not in folders:
            continue
        folder = directory / folders[package.name]
        folder.mkdir(parents=True)
        replay = (replays or {}).get(package.name) or render_replay(install.of(package.name))
        for path, data, executable in replay.generated:
            target = folder / GENERATED / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o755 if executable else 0o644)
        (folder / LIST).write_text(replay.list)
        # the licence texts in the recipe's own directory, by their names: rattler-build puts
        # a license_file at its path relative to the recipe in info/licenses/, so the rebuilt
        # packages name them as the assembled ones (one name is one text: a component's, or
        # the wheel's own licence file)
        for text in licence_texts(plan, package.name):
            target = directory / text.name
            if target.exists() and target.read_bytes() != text.data:
                raise RecipeError(
                    f"two licence texts named {text.name} differ ({text.origin}): {directory}",
                    "give the wheels of one recipe the same licence files",
                )
            target.write_bytes(text.data)


def about_licence(plan: Plan, package: PackagePlan) -> list[str]:
    """The about: keys of `package`'s licence (recipe YAML, six spaces in): its SPDX
    expression and its texts, which write_support puts beside the recipe."""
    return [
        f"      license: {q(package.license)}",
        "      license_file:",
        *(f"        - {q(text.name)}" for text in licence_texts(plan, package.name)),
    ]


def run_lines(depends: list[str], siblings: set[str], pin: str) -> list[str]:
    """YAML list items of run requirements; siblings through the recipe's own exact pin."""
    lines = []
    for dep in depends:
        name = dep.split(" ", 1)[0]
        item = pin.format(name=q(name)) if name in siblings else q(dep)
        lines.append(f"        - {item}")
    return lines


def exclusive_json(plan: Plan) -> str:
    """The exclusivity verdicts as one JSON line (valid YAML flow)."""
    return json.dumps([verdict_json(v) for v in plan.exclusive], sort_keys=True)


def rattler_head(plan: Plan, origin: str, *comments: str) -> list[str]:
    """The top of a v1 recipe: where it comes from and the tools it needs, then the schema,
    the context and the recipe's name and version."""
    return [
        f"# {origin} {NEEDS[bool(plan.platform.macos)]}",
        *(f"# {comment}" for comment in comments),
        "schema_version: 1",
        "",
        "context:",
        f"  version: {q(plan.wheel.version)}",
        "",
        "recipe:",
        f"  name: {q(plan.wheel.name + '-split')}",
        "  version: ${{ version }}",
        "",
    ]


def render_rattler_recipe(plan: Plan, builds: dict[str, str], url: str) -> str:
    """A v1 multi-output recipe.yaml describing the same split."""
    lines = [
        *rattler_head(plan, f"Generated by splitter from {plan.wheel.filename}."),
        "source:",
        f"  url: {q(url)}",
        f"  sha256: {q(plan.wheel.sha256)}",
        f"  file_name: {q(plan.wheel.filename)}",
        "",
        "build:",
        "  number: 0",
        "",
        "outputs:",
    ]
    for package in plan.packages:
        depends = conda_depends(plan, package, builds)
        siblings = {d.name for d in package.depends}
        lines += [
            "  - package:",
            f"      name: {q(package.name)}",
            "      version: ${{ version }}",
            "    build:",
            f"      string: {q(builds[package.name])}",
            "      script:",
            f"        - bash ${{{{ RECIPE_DIR }}}}/install.sh {package.name}",
            "      dynamic_linking:",
            "        binary_relocation: false",
            "    requirements:",
            "      run:",
        ]
        lines += run_lines(depends, siblings, "${{{{ pin_subpackage({name}, exact=True) }}}}")
        exports = run_exports(package)
        if exports:
            lines += [
                "      run_exports:",
                "        weak:",
                f"          - ${{{{ pin_subpackage({q(package.name)}, upper_bound='x.x.x') }}}}",
            ]
        lines += [
            "    about:",
            f"      summary: {q(package.summary)}",
            *about_licence(plan, package),
            f"      homepage: {q(plan.wheel.home)}",
        ]
    lines += [
        "",
        "extra:",
        f"  process_exclusive: {exclusive_json(plan)}",
    ]
    return "\n".join(lines) + "\n"


def render_conda_build_meta(plan: Plan, builds: dict[str, str], url: str) -> str:
    """A conda-build meta.yaml describing the same split."""
    lines = [
        f"# Generated by splitter from {plan.wheel.filename}. {NEEDS[bool(plan.platform.macos)]}",
        "package:",
        f"  name: {q(plan.wheel.name + '-split')}",
        f"  version: {q(plan.wheel.version)}",
        "",
        "source:",
        f"  url: {q(url)}",
        f"  sha256: {q(plan.wheel.sha256)}",
        f"  fn: {q(plan.wheel.filename)}",
        "",
        "build:",
        "  number: 0",
        "",
        "outputs:",
    ]
    for package in plan.packages:
        siblings = {d.name for d in package.depends}
        lines += [
            f"  - name: {q(package.name)}",
            f"    version: {q(package.version)}",
            f"    script: install.sh {package.name}",
            "    build:",
            f"      string: {q(builds[package.name])}",
            "      binary_relocation: false",
        ]
        exports = run_exports(package)
        if exports:
            lines += [
                "      run_exports:",
                "        weak:",
                f"          - {{{{ pin_subpackage({q(package.name)}, max_pin='x.x.x') }}}}",
            ]
        lines += ["    requirements:", "      run:"]
        lines += run_lines(
            conda_depends(plan, package, builds),
            siblings,
            "{{{{ pin_subpackage({name}, exact=True) }}}}",
        )
        lines += [
            "    about:",
            f"      summary: {q(package.summary)}",
            *about_licence(plan, package),
            f"      home: {q(plan.wheel.home)}",
        ]
    lines += [
        "",
        "extra:",
        f"  process_exclusive: {exclusive_json(plan)}",
    ]
    return "\n".join(lines) + "\n"


def write_recipes(
    plan: Plan, install: InstallPlan, out: Path, builds: dict[str, str], url: str | None = None
) -> None:
    """Write OUT/rattler-build/ and OUT/conda-build/ (each self-contained)."""
    url = url or source_url(plan)
    replays = {name: render_replay(install.of(name)) for name in install.packages}
    for name, render, filename in (
        ("rattler-build", render_rattler_recipe, "recipe.yaml"),
        ("conda-build", render_conda_build_meta, "meta.yaml"),
    ):
        directory = out / name
        write_support(plan, install, directory, replays=replays)
        (directory / filename).write_text(render(plan, builds, url))
