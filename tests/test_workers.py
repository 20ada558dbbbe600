"""The build's worker processes (splitter.targets.conda.workers): real interpreters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from splitter.targets.conda.workers import start_workers


def workers_of(parent: int) -> list[int]:
    """The spawned worker processes whose parent is `parent`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (Path("/proc") / entry / "stat").read_text()
            command = (Path("/proc") / entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in command:
            found.append(int(entry))
    return found


def test_one_worker_starts_at_once_and_another_for_a_call_that_finds_it_busy() -> None:
    pool = start_workers(2)
    try:
        first = workers_of(os.getpid())
        together = {f.result() for f in [pool.submit(_slow_pid, 0.5) for _ in range(3)]}
        both = workers_of(os.getpid())
    finally:
        pool.shutdown()
    assert len(first) == 1
    assert len(both) == 2 and together == set(both) and os.getpid() not in together


def _slow_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_shutdown_leaves_no_process() -> None:
    pool = start_workers(2)
    for future in [pool.submit(_slow_pid, 0.3) for _ in range(2)]:
        future.result()
    started = workers_of(os.getpid())
    pool.shutdown()
    assert started and not workers_of(os.getpid())


def test_ctrl_c_is_left_to_the_build() -> None:
    """SIGINT reaches the whole foreground process group: a worker ignores it (the build
    cancels what is queued and waits for what runs), and keeps answering."""
    pool = start_workers(1)
    try:
        (worker,) = {pool.submit(os.getpid).result()}
        os.kill(worker, signal.SIGINT)
        time.sleep(0.2)
        assert pool.submit(os.getpid).result() == worker
    finally:
        pool.shutdown()


def test_a_worker_whose_build_is_gone_exits() -> None:
    """A worker started by a build killed before the worker armed its death signal is an
    orphan that no signal will reach: it exits at once instead of waiting for calls."""
    code = "from splitter.targets.conda.workers import _start; _start(1); print('served')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1 and "served" not in result.stdout
