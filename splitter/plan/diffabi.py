"""`splitter diff --abi`: libabigail's abidiff on each changed ELF library of a comparison."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from splitter.binaries.elf import has_debug_info
from splitter.input.payload import Payload
from splitter.model import Plan
from splitter.plan.diff import SplitDiff
from splitter.tools import need_tool, run_status


class AbiFinding(StrEnum):
    """What abidiff found on one library."""

    FAILED = "failed"  # its own error (status bits 1, 2)
    INCOMPATIBLE = "incompatible"  # an incompatible ABI change (8)
    CHANGED = "changed"  # an ABI change (4)
    NONE = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class AbiReport:
    """libabigail's abidiff on one changed ELF library: its exit status bits, its report, and
    whether the libraries carry the DWARF it needs to compare type layouts."""

    path: str
    status: int  # 0 none, 4 an ABI change, 8 (with 4) an incompatible one; 1, 2 its errors
    report: str
    debug_info: bool

    @property
    def finding(self) -> AbiFinding:
        """What abidiff's status bits say."""
        if self.status & 3:
            return AbiFinding.FAILED
        if self.status & 8:
            return AbiFinding.INCOMPATIBLE
        return AbiFinding.CHANGED if self.status & 4 else AbiFinding.NONE


def abi_reports(old: Plan, new: Plan, found: SplitDiff) -> list[AbiReport]:
    """abidiff (Debian: abigail-tools) on each changed ELF library of `found`, both copies
    read again from their wheels (verified) into a temporary directory."""
    tool = need_tool("abidiff", "abigail-tools", "diff --abi compares libraries with it")
    elf = {b.path for b in new.binaries if not b.macho}
    paths = sorted(
        {c for p in found.packages for c in p.changed if c in elf}
        | {b.path for p in found.packages for b in p.binaries if b.path in elf}
    )
    reports = []
    with (
        tempfile.TemporaryDirectory(prefix="splitter-abi-") as scratch,
        Payload(old.wheel) as before,
        Payload(new.wheel) as after,
    ):
        for index, path in enumerate(paths):
            copies = []
            for side, payload in (("old", before), ("new", after)):
                target = Path(scratch, f"{index}-{side}", Path(path).name)
                target.parent.mkdir()
                target.write_bytes(
                    payload.read(_old_path(old, new, path) if side == "old" else path)
                )
                copies.append(target)
            run = run_status([tool, str(copies[0]), str(copies[1])])
            reports.append(
                AbiReport(
                    path=path,
                    status=run.returncode,
                    report=(run.stdout + run.stderr).strip(),
                    debug_info=all(has_debug_info(c.read_bytes()) for c in copies),
                )
            )
    return reports


def _old_path(old: Plan, new: Plan, path: str) -> str:
    """`path` of the new wheel as the old wheel names it (its .dist-info has the old version)."""
    prefix = f"{new.wheel.dist_info}/"
    return f"{old.wheel.dist_info}/{path[len(prefix) :]}" if path.startswith(prefix) else path
