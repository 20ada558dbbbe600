"""The records of licences concluded file by file (splitter.plan.conclude): what a scanner
found in a file, a reviewer's conclusion and exclusion in the recipe, and what a plan
concludes for each file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Conclusion:
    """A reviewer's licence for files whose own notices do not settle it (a notice that
    mentions another licence, a file copied from another project), with the reason."""

    paths: tuple[str, ...]  # globs over wheel paths (fnmatch: `*` crosses `/`)
    license: str  # the SPDX expression the files are under
    reason: str
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Exclusion:
    """Files no package needs at run time that the packager does not ship (Debian's
    Files-Excluded): dropped from every package, listed as excluded with the reason."""

    paths: tuple[str, ...]  # globs over wheel paths (fnmatch: `*` crosses `/`)
    reason: str
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """What a licence scanner found in one file's bytes."""

    licenses: tuple[str, ...]  # each detection's SPDX expression, sorted, once each
    copyrights: tuple[str, ...]  # each copyright statement, in the file's order, once each
    scanner: str = ""  # the scanner and its version, e.g. "scancode-toolkit 32.5.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileLicence:
    """The licence concluded for one shipped file, with its evidence and its basis."""

    path: str  # wheel path
    package: str
    concluded: str  # an SPDX expression
    detected: tuple[str, ...]  # the scanner's SPDX expressions for the file ("": a binary)
    copyrights: tuple[str, ...]
    # why: "project" (its own code), "component:<name>" (a vendored tree or linked code),
    # "conclusion:<index>" (the recipe's [[license_conclusion]]), "regenerated" (no output
    # ships it as it is: splitter.plan.layout.regenerated)
    basis: str
    covered: bool = True  # every detected licence is one of the concluded expression's


@dataclass(frozen=True, slots=True, kw_only=True)
class ExcludedFile:
    """A wheel file no package ships, by the recipe's [[exclude]]."""

    path: str
    reason: str
    detected: tuple[str, ...]
