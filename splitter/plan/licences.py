"""What each package is licensed under, from what it holds: the project's own licence (the
wheel's License-Expression) and the licence of every third-party component found in one of
its files (splitter.plan.thirdparty), as one SPDX expression; and the licence texts that go
with it, under the file names every format ships them as."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from splitter.errors import LicenceError
from splitter.model import ComponentFound, Plan, ThirdParty
from splitter.plan.recipethird import terms

UNKNOWN = "LicenseRef-unknown"  # a wheel that states no licence: say so, do not guess


@dataclass(frozen=True, slots=True, kw_only=True)
class LicenceText:
    """One licence text a package ships: its file name (unique in the package), whose it is
    (a component's name, or "" for the project's own), and where it was copied from."""

    name: str
    component: str
    origin: str  # the wheel member, or the recipe-relative copy and its upstream
    data: bytes


def held_components(
    components: tuple[ThirdParty, ...], found: Iterable[ComponentFound], package: str
) -> tuple[str, ...]:
    """The components found in `package`'s files, in recipe order."""
    mine = {f.component for f in found if f.package == package}
    return tuple(c.name for c in components if c.name in mine)


def expression(project: str, components: tuple[ThirdParty, ...], names: Iterable[str]) -> str:
    """The SPDX expression of code under `project`'s licence holding the components `names`:
    the project's licence, then each component's in recipe order, each licence once, joined
    by AND (every one of them applies to the whole)."""
    chosen = set(names)
    terms: list[str] = [project or UNKNOWN]
    for component in components:
        if component.name in chosen and component.license not in terms:
            terms.append(component.license)
    return " AND ".join(_term(t, len(terms)) for t in terms)


def _term(licence: str, count: int) -> str:
    """A licence as one operand of AND: an expression of several (OR, AND) in parentheses."""
    compound = " OR " in licence or " AND " in licence
    return f"({licence})" if compound and count > 1 else licence


def licence_texts(plan: Plan, package: str) -> tuple[LicenceText, ...]:
    """The licence texts `package` ships: the wheel's own licence files (under their own
    names); for each third-party component it holds, that component's text (and NOTICE) as
    copied from upstream, named `<component>-<file>` as the recipe keeps them; and for every
    other licence of its expression, its standard text (`<id>.txt`, licenses/spdx/ beside the
    recipe); each as its source has it, byte for byte."""
    texts = [
        LicenceText(name=member.rsplit("/", 1)[-1], component="", origin=member, data=data)
        for member, data in zip(plan.wheel.license_files, plan.wheel.license_texts, strict=True)
    ]
    spec = plan.package(package)
    chosen = set(spec.third_party)
    # the project's licence: its texts are the wheel's own (a wheel that states none is
    # LicenseRef-unknown, which has no text to ship)
    covered = set(terms(plan.wheel.license or UNKNOWN))
    for component in plan.recipe.third_party:
        if component.name not in chosen:
            continue
        covered.update(terms(component.license))
        texts.append(_copied(component, component.license_file, component.license_text))
        if component.notice_file:
            texts.append(_copied(component, component.notice_file, component.notice_text))
    standard = dict(plan.recipe.standard_texts)
    for term in terms(spec.license):
        if term in covered:
            continue
        for part in term.split(" WITH "):
            if part in covered or any(t.name == f"{part}.txt" for t in texts):
                continue
            if part not in standard:
                raise LicenceError(
                    f"no text for {part} (in {package}'s licence {spec.license}): "
                    f"{plan.recipe.path.parent / 'licenses' / 'spdx' / f'{part}.txt'}\n"
                    "copy the licence's standard text there byte for byte (licenses/spdx/SOURCE "
                    "says where the others come from)"
                )
            texts.append(
                LicenceText(
                    name=f"{part}.txt",
                    component="",
                    origin=f"licenses/spdx/{part}.txt (the licence's standard text)",
                    data=standard[part],
                )
            )
    return tuple(texts)


def _copied(component: ThirdParty, local: str, data: bytes) -> LicenceText:
    return LicenceText(
        name=local.rsplit("/", 1)[-1],
        component=component.name,
        origin=(
            f"{local} (https://github.com/{component.license_repo}"
            f"/blob/{component.license_revision}/{component.license_path})"
        ),
        data=data,
    )
