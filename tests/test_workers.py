"""The build's worker processes (splitter.targets.conda.workers): real interpreters, real pipes."""

from __future__ import annotations

import os
import subprocess

import dying
import pytest

from splitter.targets.conda.workers import WorkerDied, Workers


def test_every_call_answers_once_on_the_workers() -> None:
    workers = Workers(2, warm=("json",))
    try:
        answers = dict(workers.run(abs, [-3, 1, -2, 5, -8]))
        pids = set(dict(workers.run(_pid, list(range(6)))).values())
    finally:
        workers.close()
    assert answers == {0: 3, 1: 1, 2: 2, 3: 5, 4: 8}
    assert len(pids) == 2 and os.getpid() not in pids


def _pid(_: object) -> int:
    return os.getpid()


def test_the_calling_process_takes_jobs_while_the_workers_are_busy() -> None:
    workers = Workers(1, warm=("json",))
    try:
        answered = list(workers.run(_slow_pid, [0.5, 0.0, 0.0], local=True))
    finally:
        workers.close()
    by_index = dict(answered)
    assert sorted(by_index) == [0, 1, 2] and len(answered) == 3
    assert by_index[0] != os.getpid()  # the first (largest) job went to the worker
    assert by_index[1] == by_index[2] == os.getpid()  # the build did the rest meanwhile
    assert [index for index, _ in answered] == [1, 2, 0]


def test_a_worker_that_finishes_gets_the_next_job_before_the_build_takes_one() -> None:
    """Jobs of equal length, one worker and the build: the worker, done with its first job
    while the build works on the second, takes the third, so each does about half. (Looking
    at the workers only once the build had nothing left to take gave the worker one job.)"""
    workers = Workers(1, warm=("json",))
    try:
        done = dict(workers.run(_slow_pid, [0.3] * 6, local=True))
    finally:
        workers.close()
    worker_jobs = sum(pid != os.getpid() for pid in done.values())
    assert sorted(done) == list(range(6))
    assert 2 <= worker_jobs <= 4, done


def test_the_build_takes_a_queued_call_no_worker_has_taken_and_never_a_running_one() -> None:
    """`take` runs a submitted call in the build while the worker is busy; the worker then
    skips it (each call runs once), and a call the worker already runs cannot be taken."""
    workers = Workers(1, warm=("json",))
    try:
        busy = workers.submit(_slow_pid, 0.5)
        queued = workers.submit(_slow_pid, 0.0)
        after = workers.submit(_slow_pid, 0.0)
        while not busy.running():
            pass
        assert not workers.take(busy)  # the worker has it
        assert workers.take(queued)
        assert queued.result() == os.getpid()
        assert not workers.take(queued)  # done: not run twice
        worker = busy.result()
        assert worker != os.getpid() and after.result() == worker
    finally:
        workers.close()


def test_no_worker_means_the_build_does_everything() -> None:
    workers = Workers(0, warm=("json",))
    assert set(dict(workers.run(_pid, [0, 1, 2], local=True)).values()) == {os.getpid()}
    workers.close()


def _slow_pid(seconds: float) -> int:
    import time

    time.sleep(seconds)
    return os.getpid()


def test_an_exception_in_a_worker_is_raised_in_the_build() -> None:
    workers = Workers(1, warm=("json",))
    try:
        with pytest.raises(OSError) as raised:
            list(workers.run(dying.disk_full, [None]))
    finally:
        workers.kill()
    assert raised.value.errno == 28 and raised.value.filename == "/out/linux-64/x.conda"


def test_a_killed_worker_is_reported_not_waited_for() -> None:
    workers = Workers(2, warm=("json",))
    try:
        with pytest.raises(WorkerDied, match="signal 9"):
            list(workers.run(dying.killed, [None, None]))
    finally:
        workers.kill()


def test_close_leaves_no_process() -> None:
    workers = Workers(2, warm=("json",))
    pids = set(dict(workers.run(_pid, [0, 1])).values())
    workers.close()
    for pid in pids:
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_shrink_lets_the_surplus_workers_exit() -> None:
    workers = Workers(2, warm=("json",))
    try:
        started = set(dict(workers.run(_slow_pid, [0.3, 0.3])).values())
        workers.shrink(1)
        kept = set(dict(workers.run(_pid, list(range(4)))).values())
    finally:
        workers.close()
    assert len(started) == 2 and len(kept) == 1 and kept < started
    (gone,) = started - kept
    assert subprocess.run(["kill", "-0", str(gone)], capture_output=True).returncode != 0
