"""The licence texts a package must carry, derived here from the plan's findings and the
recipe's files, not from splitter's own licence_texts: the wheel's own licence files; the text
(and NOTICE) of every component found in the package's files, as recipes/licenses keeps them;
and the standard text (recipes/licenses/spdx/<id>.txt) of every other licence and exception
license-expression finds in the package's expression."""

from __future__ import annotations

import zipfile
from pathlib import Path

from license_expression import get_spdx_licensing  # type: ignore[import-untyped]

from splitter.model import Plan

LICENSES = Path(__file__).resolve().parents[1] / "recipes" / "licenses"


def expected_texts(plan: Plan, package: str) -> dict[str, bytes]:
    """File name -> bytes of every licence text `package` ships."""
    licensing = get_spdx_licensing()
    held = {f.component for f in plan.third_party if f.package == package}
    texts = {}
    with zipfile.ZipFile(plan.wheel.path) as wheel:
        for member in plan.wheel.license_files:
            texts[member.rsplit("/", 1)[-1]] = wheel.read(member)
    covered = set(licensing.license_keys(licensing.parse(plan.wheel.license)))
    for component in plan.recipe.third_party:
        if component.name not in held:
            continue
        covered |= set(licensing.license_keys(licensing.parse(component.license)))
        copy = LICENSES / f"{component.name}-{component.license_path.rsplit('/', 1)[-1]}"
        texts[copy.name] = copy.read_bytes()
        if component.notice_file:
            notice = LICENSES / component.notice_file.rsplit("/", 1)[-1]
            texts[notice.name] = notice.read_bytes()
    concluded = [f.concluded for f in plan.licences if f.package == package]
    for expression in concluded:
        for key in licensing.license_keys(licensing.parse(expression)):
            if key not in covered:
                texts[f"{key}.txt"] = (LICENSES / "spdx" / f"{key}.txt").read_bytes()
    return texts
