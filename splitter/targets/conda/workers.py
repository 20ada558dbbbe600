"""The conda build's worker processes: a `concurrent.futures.ProcessPoolExecutor` of fresh
interpreters (multiprocessing's spawn start), each tied to the build's life.

Spawned, not forked: a fork would copy the build's memory and threads, and a forked worker
could not be told from the build by its command line. A spawned worker imports the build's
main script again (not `python -m splitter`'s): `splitter.__main__`, which the console script
imports, keeps that cheap, and a program of its own that builds conda packages must guard
its entry point with `if __name__ == "__main__":`, as multiprocessing's spawn requires.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
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
