"""The conda build's worker processes: a `concurrent.futures.ProcessPoolExecutor` of fresh
interpreters (multiprocessing's spawn start), each tied to the build's life.

Spawned, not forked: a fork would copy the build's memory and threads, and a forked worker
could not be told from the build by its command line. A spawned worker imports the build's
main script again (not `python -m splitter`'s): `splitter.__main__`, which the console script
imports, keeps that cheap, and a program of its own that builds conda packages must guard
its entry point with `if __name__ == "__main__":`, as multiprocessing's spawn requires.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

from splitter.tools import die_with_parent

# What a worker imports before its first call.
WARM = ("rattler_build", "splitter.targets.conda.assemble")


def start_workers(count: int) -> ProcessPoolExecutor:
    """At most `count` worker processes. One starts now, so that its start-up (an interpreter
    and rattler-build's import) overlaps what the build does before its first package; the
    pool starts another only for a call that finds every worker busy, so a build that never
    has two packages in the workers at once (a single wheel) never pays for a second."""
    pool = ProcessPoolExecutor(
        count,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start,
        initargs=(os.getpid(),),
    )
    pool.submit(os.getpid)
    return pool


def _start(build: int) -> None:
    """A worker's start: die with the build, leave Ctrl-C to it, import what it will call.

    The death signal is armed here, after the interpreter started; a build killed before
    that has already left this worker an orphan, which PR_SET_PDEATHSIG never signals, so an
    orphan exits at once."""
    die_with_parent()
    if os.getppid() != build:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the build stops its workers itself
    for module in WARM:
        importlib.import_module(module)
    atexit.register(_leave)


def _leave() -> None:
    """A worker's end, once its pool has stopped it: its streams flushed, it leaves without
    tearing its interpreter down (rattler-build's and zstandard's modules), which the build
    waited for at the end of every build (15 ms of a single wheel's). It has nothing else to
    finish: each job's package was written before the job returned. It exits 0: the pool
    does not read its workers' exit status (a worker that dies while working breaks the
    pool, whatever its status)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
