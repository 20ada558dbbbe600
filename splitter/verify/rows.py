"""The rows `splitter verify` reports: their names (one table), their verdicts and the record
each row is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from splitter.model import Only


class Row(StrEnum):
    """The name of each kind of row (the report's `check` column)."""

    CO_LOAD = "co-load"
    MODEL_CXX = "model (C++)"
    MISSING_COMPONENT = "missing component"
    RELOCATION = "relocation"
    MODEL_PYTHON = "model (Python)"
    DEPENDS = "depends"
    RELEASE = "release"  # an environment of a release this machine does not check
    SIGNATURE = "signature"
    RESOLUTION = "resolution"
    KERNELS = "kernels"
    TOGETHER = "together"
    CMAKE_DARWIN = "cmake (Darwin, no compiler)"
    SBOM = "sbom"
    HEADERS = "headers"


# What a row expects, for the rows whose expectation does not depend on the output.
EXPECTED: dict[str, str] = {
    Row.CO_LOAD: "each pair loads as the metadata says",
    Row.MODEL_CXX: "identical output",
    Row.MISSING_COMPONENT: "configure fails",
    Row.RELOCATION: "runs after a move",
    Row.MODEL_PYTHON: "identical output",
    Row.RELEASE: "all",
}
CHECKS = tuple(Only)
# The rows of an output whose programs cannot run here, by --only name.
FOREIGN: dict[str, tuple[Row, ...]] = {
    Only.CO_LOAD: (Row.CO_LOAD,),
    Only.CMAKE: (Row.MODEL_CXX, Row.MISSING_COMPONENT),
    Only.RELOCATION: (Row.RELOCATION,),
    Only.PYTHON: (Row.MODEL_PYTHON,),
}


class Status(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # could not run here; the detail says why


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One row of the report."""

    check: str
    subject: str
    expected: str
    outcome: str
    status: Status
    detail: str = ""


def skipped(check: Row, expected: str, reason: str, subject: str = "-") -> Check:
    """A check that could not run here, with the reason."""
    return Check(
        check=check,
        subject=subject,
        expected=expected,
        outcome="skipped",
        status=Status.SKIP,
        detail=reason,
    )
