"""The co-load matrix: every pair of shipped binaries loaded into one fresh process, both orders."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitter.binaries.elf import analyse_elf, is_elf

TORCH_SONAMES = ("libtorch", "libc10")
LOADER = """
import ctypes, sys
if sys.argv[1] == "torch":
    import torch  # brings libtorch*, libc10 into the process for the extensions
for path in sys.argv[2:]:
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
print("loaded", flush=True)
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairResult:
    """One ordered load of two files."""

    first: str
    second: str
    expected: str  # "coexist" or "abort"
    outcome: str  # "coexist", "abort", "error" or "skipped"
    detail: str

    @property
    def ok(self) -> bool:
        """Skipped counts as not failed."""
        return self.outcome in (self.expected, "skipped")


def coload_items(libdir: Path, sitedir: Path | None) -> list[Path]:
    """The shipped libraries, the `_C` extension and the export plugins."""
    items = sorted(p for p in libdir.glob("*.so*") if p.is_file())
    if sitedir is not None:
        items += sorted(sitedir.glob("executorch/extension/pybindings/_C.*.so"))
        items += sorted(sitedir.glob("executorch/**/*_aot_lib.so"))
    return [p for p in items if is_elf(p.read_bytes()[:4])]


def needs_torch(path: Path) -> bool:
    """Whether loading `path` needs torch's libraries in the process first."""
    info = analyse_elf(path.name, path.read_bytes())
    return any(n.startswith(TORCH_SONAMES) or n.startswith("_C.") for n in info.needed)


def expected_outcome(first: Path, second: Path, verdicts: Iterable[dict[str, Any]]) -> str:
    """ "abort" when the metadata marks this pair in effect, else "coexist"."""
    names = {first.name, second.name}
    for verdict in verdicts:
        if {f["path"].rsplit("/", 1)[-1] for f in verdict["files"]} == names:
            return "abort" if verdict["in_effect"] else "coexist"
    return "coexist"


def load_pair(python: Path, first: Path, second: Path, torch: bool) -> tuple[str, str]:
    """Outcome and the last line of output of loading both files in that order."""
    command = [str(python), "-c", LOADER, "torch" if torch else "-", str(first), str(second)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    output = (result.stdout + result.stderr).strip()
    if result.returncode == 0:
        return "coexist", ""
    if result.returncode in (-6, 134) and "Re-registering" in output:
        line = next(x for x in output.splitlines() if "Re-registering" in x)
        return "abort", line.split("] ", 1)[-1][:160]
    return "error", (output.splitlines() or [f"exit {result.returncode}"])[-1][:200]


def coload_matrix(
    items: list[Path],
    verdicts: Iterable[dict[str, Any]],
    plain_python: Path,
    torch_python: Path | None,
    jobs: int = 2,
) -> list[PairResult]:
    """Load every pair in both orders, each in a fresh process; torch pairs need torch_python."""
    verdicts = list(verdicts)
    torch_needed = {p: needs_torch(p) for p in items}
    work = []
    for a, b in itertools.combinations(items, 2):
        for first, second in ((a, b), (b, a)):
            work.append((first, second, torch_needed[a] or torch_needed[b]))

    def run(job: tuple[Path, Path, bool]) -> PairResult:
        first, second, torch = job
        expected = expected_outcome(first, second, verdicts)
        if torch and torch_python is None:
            return PairResult(
                first=first.name,
                second=second.name,
                expected=expected,
                outcome="skipped",
                detail="needs torch: pass --python with torch",
            )
        python = torch_python if torch and torch_python is not None else plain_python
        outcome, detail = load_pair(python, first, second, torch)
        return PairResult(
            first=first.name, second=second.name, expected=expected, outcome=outcome, detail=detail
        )

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(run, work))
