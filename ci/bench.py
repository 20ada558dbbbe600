"""Benchmarks: print timings of splitter commands beside baselines measured in the same run.

Usage: python ci/bench.py [WHEEL] [--repeat N]

Each command runs in a fresh subprocess; its wall time (best of N) and peak RSS (from wait4) are
printed beside a baseline, as a ratio. Targets are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable


def run(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS in MB of one subprocess run."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(
            f"benchmark command failed: {' '.join(command)}\n{process.stderr.read().decode()}"
        )  # type: ignore[union-attr]
    return elapsed, usage.ru_maxrss / 1024


def best(command: list[str], repeat: int, cwd: Path | None = None) -> tuple[float, float]:
    """Best wall time and worst peak memory over `repeat` runs."""
    results = [run(command, cwd) for _ in range(repeat)]
    return min(r[0] for r in results), max(r[1] for r in results)


def row(
    label: str,
    measured: tuple[float, float],
    baseline: tuple[float, float] | None,
    base_label: str,
    target: str,
) -> None:
    """Print one line: time, memory, ratio against the baseline, target."""
    seconds, memory = measured
    ratio = f"{seconds / baseline[0]:5.2f}x {base_label} ({baseline[0]:.2f} s)" if baseline else ""
    print(f"{label:<34} {seconds:7.2f} s  {memory:7.1f} MB peak  {ratio:<40} target: {target}")


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheel", nargs="?", default="executorch==1.5.1")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wheel = args.wheel
    if not wheel.endswith(".whl"):
        from splitter.fetch import resolve_input
        from splitter.recipe import load_recipe

        wheel = str(resolve_input(wheel, load_recipe()))
    print(f"input: {wheel} ({Path(wheel).stat().st_size / 1e6:.1f} MB), best of {args.repeat}")
    listing = best(
        [PY, "-c", f"import zipfile; zipfile.ZipFile({wheel!r}).infolist()"], args.repeat
    )
    row("list the zip (baseline)", listing, None, "", "")
    with tempfile.TemporaryDirectory() as scratch:
        unzip = best(["unzip", "-q", "-o", wheel, "-d", scratch], args.repeat)
    row("unzip (baseline)", unzip, None, "", "")
    plan = best([PY, "-m", "splitter", "-q", "plan", wheel, "--json"], args.repeat)
    row("splitter plan --json", plan, listing, "list", "well under 2 s, < 200 MB")


if __name__ == "__main__":
    main()
