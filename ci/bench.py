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
# Unzip, then one zstd-compressed tar per package payload, as a packager would at the minimum.
FLOOR = (
    "set -e; cd {dir}; rm -rf w ./*.zst; unzip -q {wheel} -d w; "
    "tar -C w -cf - executorch/lib/libexecutorch_kernels_quantized.so"
    " | zstd -q -{level} -T2 -o q.tar.zst; "
    "rm w/executorch/lib/libexecutorch_kernels_quantized.so; "
    "tar -C w -cf - executorch/lib executorch/include | zstd -q -{level} -T2 -o r.tar.zst; "
    "rm -r w/executorch/lib w/executorch/include; "
    "tar -C w -cf - . | zstd -q -{level} -T2 -o e.tar.zst"
)


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
    parser.add_argument("--level", type=int, default=9, help="zstd level for conda and the floor")
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
    with tempfile.TemporaryDirectory() as scratch:
        floor = best(
            ["bash", "-c", FLOOR.format(wheel=wheel, level=args.level, dir=scratch)], args.repeat
        )
    row(f"floor: unzip + tar|zstd -{args.level} -T2", floor, None, "", "")
    for target in ("conda", "tree"):
        with tempfile.TemporaryDirectory() as scratch:
            command = [
                PY,
                "-m",
                "splitter",
                "-q",
                "build",
                wheel,
                "--target",
                target,
                "-o",
                f"{scratch}/out",
            ]
            if target == "conda":
                command += ["--compression-level", str(args.level)]
            measured = best(command, args.repeat)
        base, label = (floor, "floor") if target == "conda" else (unzip, "unzip")
        target_text = "<= 1.5x floor, < 200 MB" if target == "conda" else "< 200 MB"
        row(f"splitter build --target {target}", measured, base, label, target_text)


if __name__ == "__main__":
    main()
