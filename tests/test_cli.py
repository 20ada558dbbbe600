"""The CLI as a packager meets it in a pipe or a CI log: a summary with whole names and paths,
-q silent, --version."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import run_splitter

PACKAGES = ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")


def test_version() -> None:
    result = run_splitter("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"splitter {importlib.metadata.version('splitter')}\n"


def test_help_shows_flags_as_flags() -> None:
    """Boolean options read as flags in --help (no `<bool>` value), and every choice of an
    option with choices is listed."""
    result = run_splitter("build", "--help")
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert any(line.startswith("--guard ") for line in lines)
    assert "<assemble|rattler-build|conda-build>" in result.stdout


@pytest.mark.integration
@pytest.mark.parametrize("target", ["wheel", "tree"])
def test_build_summary_survives_a_pipe(real_wheel: Path, tmp_path: Path, target: str) -> None:
    """Piped, the build ends with a row per package (whole names, whole file names), the
    output directory and the next command; nothing is cut with an ellipsis, and every path
    the next command names exists."""
    out = tmp_path / "out"
    result = run_splitter("build", str(real_wheel), "-t", target, "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "…" not in result.stdout
    for name in PACKAGES:
        assert any(f" {name} " in line for line in lines), name
    built = sorted(p.name for p in out.iterdir() if p.suffix == ".whl" or p.is_dir())
    for name in built:
        assert any(name in line for line in lines), name
    assert f"output: {out}" in lines
    (step,) = [line for line in lines if line.startswith("next: ")]
    if target == "wheel":
        named = step.removeprefix("next: pip install ").split()
        assert len(named) == 3 and all(Path(p).is_file() for p in named)


@pytest.mark.integration
@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_build_lists_every_file(real_wheel: Path, tmp_path: Path, where: str) -> None:
    """-v (before or after the subcommand): after the summary, every file written, one whole
    path per line, each of which exists; together exactly the output directory's files."""
    out = tmp_path / "out"
    args = ["build", str(real_wheel), "-t", "tree", "-o", str(out)]
    result = run_splitter(*(["-v", *args] if where == "before" else [*args, "-v"]))
    assert result.returncode == 0, result.stderr
    listed = [line for line in result.stdout.splitlines() if line.startswith(str(out) + "/")]
    assert sorted(listed) == sorted(str(p) for p in out.rglob("*") if not p.is_dir())


@pytest.mark.integration
def test_quiet_build_prints_nothing(real_wheel: Path, tmp_path: Path) -> None:
    """-q after the subcommand: no summary, no progress, exit 0, the output written."""
    out = tmp_path / "out"
    result = run_splitter("build", str(real_wheel), "-t", "wheel", "-o", str(out), "-q")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert len(list(out.glob("*.whl"))) == 3


@pytest.mark.integration
def test_plan_tables_keep_whole_names_in_a_pipe(real_wheel: Path) -> None:
    result = run_splitter("plan", str(real_wheel))
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    for name in PACKAGES:
        assert f" {name} " in result.stdout


@pytest.mark.integration
@pytest.mark.parametrize("form", ["dot", "mermaid"])
def test_plan_graph(real_wheel: Path, tmp_path: Path, form: str) -> None:
    """`plan --graph` is DOT that Graphviz's own dot renders, naming the three packages and
    the process-exclusive pair; `--graph-format mermaid` is a Mermaid flowchart of the same."""
    import html
    import shutil

    args = ("--graph",) if form == "dot" else ("--graph-format", "mermaid")
    result = run_splitter("plan", str(real_wheel), *args)
    assert result.returncode == 0, result.stderr
    if form == "mermaid":
        assert result.stdout.startswith("flowchart LR\n")
        assert all(f'["{name}"]' in result.stdout for name in PACKAGES)
        assert '-. "process-exclusive: not in effect" .-' in result.stdout
        return
    dot = shutil.which("dot")
    assert dot, "Graphviz's dot is not installed (.ci/run installs Debian's graphviz)"
    rendered = subprocess.run(
        [dot, "-Tsvg"], input=result.stdout, capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    svg = html.unescape(rendered.stdout)
    assert all(f">{name}</text>" in svg for name in PACKAGES)
    assert ">process-exclusive: not in effect</text>" in svg
    assert ">libquantized_ops_aot_lib.so</text>" in svg
    assert ">libexecutorch_kernels_quantized.so</text>" in svg


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_build_in_an_80_column_terminal(real_wheel: Path, tmp_path: Path) -> None:
    """A build in an 80-column tmux pane: the progress line moves while the packages are
    packed (no packing line stays the same for more than a second and a half of captures), and
    the summary ends with every package name and file name whole on one line.

    Compression level 15 keeps packing busy long enough, even on a fast machine, for the
    captures to see it move (at level 3 a fast machine packs before a second capture)."""
    out, log = tmp_path / "out", tmp_path / "status"
    command = (
        f"{sys.executable} -m splitter build -t conda --compression-level 15 -o {out} "
        f"{real_wheel}; echo $? > {log}; sleep 60"
    )
    session = f"splitter-test-{os.getpid()}"
    tmux = ["tmux", "-L", session]
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "50", command], check=True)
    try:
        frames = []
        deadline = time.monotonic() + 300
        while not log.exists() and time.monotonic() < deadline:
            pane = subprocess.run(
                [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
            ).stdout
            frames.append((time.monotonic(), pane))
            time.sleep(0.25)
        final = subprocess.run(
            [*tmux, "capture-pane", "-p", "-S", "-50"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    assert log.read_text().strip() == "0", final
    packing = [
        (at, pane.splitlines()[0])
        for at, pane in frames
        if pane.strip() and "packing" in pane.splitlines()[0]
    ]
    assert len({line for _, line in packing}) >= 2, packing  # the line changed while packing
    start, current = packing[0]  # when the current unchanged line was first captured
    for at, line in packing[1:]:
        if line != current:
            start, current = at, line
        assert at - start <= 1.5, f"the progress line froze: {line}"
    lines = final.splitlines()
    built = sorted(p.name for p in (out / "linux-64").glob("*.conda"))
    assert len(built) == 3
    for name in built:
        assert any(line.strip() == f"file: {name}" for line in lines), final
    for package in PACKAGES:
        assert any(line.startswith(f"{package} ") for line in lines), final
    assert all(len(line) <= 80 for line in lines)
