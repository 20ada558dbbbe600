"""The conda build's worker processes: plain interpreters fed pickled calls over a pipe.

Not multiprocessing: its spawn start re-runs the build's main script in every worker (for
the console script, an import of the whole CLI that competes with the build for the cores)
and starts a resource tracker process, one more process resident through the build's memory
peak. A worker here runs `serve`, which reads (function, argument) pairs pickled on stdin and
writes each result pickled on stdout; its stderr is the build's.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import IO, Any

from splitter.tools import die_with_parent

HEADER = struct.Struct("<Q")
# The build's sys.path, not the worker's own: splitter may be importable only through it.
SERVE = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[2])\n"
    "from splitter.targets.conda.workers import serve\n"
    "serve(int(sys.argv[1]), sys.argv[3:])\n"
)


class WorkerDied(Exception):
    """A worker process ended without answering (killed, or out of memory)."""

    def __init__(self, pid: int, returncode: int) -> None:
        self.pid, self.returncode = pid, returncode
        how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        super().__init__(f"worker process {pid} ended without answering ({how})")


class Workers:
    """`count` worker processes, started at once so their start-up (and the import of
    the modules in `warm`) overlaps the build's own work.

    Calls wait in one queue; each process has a thread that takes the next call whenever its
    process is free, sends it and waits for the answer (holding no GIL while it waits). So a
    worker that finishes gets the next call at once, whoever queued it, and calls can be
    queued while the build does something else (`submit`: a release's pipeline) or in a batch
    (`run`)."""

    def __init__(self, count: int, warm: tuple[str, ...]) -> None:
        command = [sys.executable, "-c", SERVE, str(os.getpid()), json.dumps(sys.path), *warm]
        self._processes: list[subprocess.Popen[bytes]] = []
        for _ in range(count):
            self._processes.append(
                subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            )
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call
        self._retired: list[subprocess.Popen[bytes]] = []  # their thread took a stop
        self._queued: dict[int, _Call] = {}  # submitted calls no worker has taken yet

    def submit(self, function: Callable[[Any], Any], argument: Any) -> Future[Any]:
        """Queue `function(argument)` for the next free worker; its answer (or the exception
        it raised, or WorkerDied) arrives in the future. Without workers it runs here, now."""
        future: Future[Any] = Future()
        if not self._processes:
            _call_here(future, function, argument)
            return future
        self._start()
        call = _Call(future, function, argument)
        with self._lock:
            self._queued[id(future)] = call
        self._calls.put(call)
        return future

    def take(self, future: Future[Any]) -> bool:
        """Run a submitted call here, in the calling process, if no worker has taken it yet
        (False if one has, or it is done): the build packs a queued package rather than wait
        for a busy worker. Whoever takes a call first runs it, never both."""
        if not self._claim(future):
            return False
        with self._lock:
            call = self._queued.pop(id(future))
        _run(future, call.function, call.argument)
        return True

    def _claim(self, future: Future[Any]) -> bool:
        """Mark a queued call as taken (by a worker's thread or by `take`), under the lock
        both take it with; False if it was taken or cancelled before."""
        with self._lock:
            if future.running() or future.done():
                return False
            return future.set_running_or_notify_cancel()

    def run(
        self, function: Callable[[Any], Any], arguments: list[Any], local: bool = False
    ) -> Iterator[tuple[int, Any]]:
        """Call `function` on each argument, in list order on the next free worker; yield
        (index, result) as calls finish. A call that raised re-raises here. With `local`, the
        calling process is one more worker: it takes the next argument whenever every worker
        is busy (one process fewer for the same parallelism)."""
        if not self._processes:
            for index, argument in enumerate(arguments):
                yield index, function(argument)
            return
        self._start()
        calls = [_Call(Future(), function, argument) for argument in arguments]
        indices = {id(call.future): index for index, call in enumerate(calls)}
        # With `local`, a call is queued only for an idle worker and the caller takes the
        # next one when none is idle: so a worker that finishes gets the next call before
        # the caller takes one, and the caller never takes a call a worker was about to.
        todo = list(calls) if local else []
        for call in [] if local else calls:
            self._calls.put(call)
        pending = {call.future for call in calls}
        while pending:
            while todo and not self._all_busy():
                self._calls.put(todo.pop(0))
            if todo:
                call = todo.pop(0)
                _call_here(call.future, call.function, call.argument)
            else:
                wait(pending, return_when=FIRST_COMPLETED)
            for future in [f for f in pending if f.done()]:
                pending.discard(future)
                yield indices[id(future)], future.result()

    def _all_busy(self) -> bool:
        """Whether every idle worker has a queued call to take (a thread that has just taken
        one may still count as idle: then one call too many waits in the queue)."""
        with self._lock:
            return self._idle <= self._calls.qsize()

    def _start(self) -> None:
        """The threads, started at the first call (so `shrink` before it just closes)."""
        if self._threads:
            return
        for process in self._processes:
            thread = threading.Thread(target=self._feed, args=(process,), daemon=True)
            thread.start()
            self._threads.append(thread)
        while not self._all_idle():  # so that `run` does not take the first call itself
            time.sleep(0.0005)

    def _all_idle(self) -> bool:
        with self._lock:
            return self._idle == len(self._threads)

    def _feed(self, process: subprocess.Popen[bytes]) -> None:
        """A thread's loop: the next call to its process, until a stop (None) arrives."""
        while True:
            with self._lock:
                self._idle += 1
            call = self._calls.get()
            with self._lock:
                self._idle -= 1
            if call is None:
                with self._lock:
                    self._retired.append(process)
                return
            if not self._claim(call.future):
                continue  # cancelled, or taken by the build (`take`)
            with self._lock:
                self._queued.pop(id(call.future), None)
            try:
                _send(_pipe(process.stdin), (call.function, call.argument))
                answer = _receive(_pipe(process.stdout))
            except OSError:
                answer = None
            if answer is None:
                call.future.set_exception(WorkerDied(process.pid, process.wait()))
                continue
            failed, result = answer
            if failed:
                call.future.set_exception(result)
            else:
                call.future.set_result(result)

    @property
    def count(self) -> int:
        """How many worker processes there are (the build's own not counted)."""
        return len(self._processes)

    def shrink(self, count: int) -> None:
        """Let all but `count` workers exit (a build with fewer jobs than workers)."""
        surplus = len(self._processes) - max(count, 0)
        if surplus <= 0:
            return
        if not self._threads:
            surplus_processes, self._processes = self._processes[count:], self._processes[:count]
            _close(surplus_processes)
            return
        for _ in range(surplus):
            self._calls.put(None)
        while True:  # the threads that took a stop, whichever they are
            with self._lock:
                if len(self._retired) >= surplus:
                    break
            time.sleep(0.001)
        with self._lock:
            gone, self._retired = self._retired, []
        self._processes = [p for p in self._processes if p not in gone]
        self._threads = [t for t in self._threads if t.is_alive()]
        _close(gone)

    def close(self) -> None:
        """Let idle workers exit; kill any still busy (the build failed). Calls still queued
        are cancelled."""
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                call.future.cancel()
        with self._lock:
            self._queued.clear()
        for _ in self._threads:
            self._calls.put(None)
        _close(self._processes)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def kill(self) -> None:
        """Stop every worker now."""
        for worker in self._processes:
            with contextlib.suppress(OSError):
                worker.kill()
        self.close()


@dataclass(frozen=True, slots=True)
class _Call:
    future: Future[Any]
    function: Callable[[Any], Any]
    argument: Any


def _call_here(future: Future[Any], function: Callable[[Any], Any], argument: Any) -> None:
    if future.set_running_or_notify_cancel():
        _run(future, function, argument)


def _run(future: Future[Any], function: Callable[[Any], Any], argument: Any) -> None:
    """Call `function(argument)` for a future marked running; its result or exception."""
    try:
        future.set_result(function(argument))
    except Exception as exc:
        future.set_exception(exc)


def _close(processes: list[subprocess.Popen[bytes]]) -> None:
    """Close the workers' requests, so idle ones exit; kill any still busy after 5 s."""
    for worker in processes:
        with contextlib.suppress(OSError):
            _pipe(worker.stdin).close()
    for worker in processes:
        try:
            worker.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        with contextlib.suppress(OSError):
            _pipe(worker.stdout).close()


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    assert stream is not None  # every worker is started with both pipes
    return stream


def _send(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def serve(build: int, warm: list[str]) -> None:
    """A worker's loop: die with the build, then answer calls until stdin closes.

    The death signal is armed here, after the interpreter started; a build killed before
    that has already left this worker an orphan, which PR_SET_PDEATHSIG never signals, so an
    orphan exits at once."""
    die_with_parent()
    if os.getppid() != build:
        os._exit(1)
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints of a library go to stderr, not into the answers
    for module in warm:
        importlib.import_module(module)

    while (call := _receive(requests)) is not None:
        function, argument = call
        try:
            answer = (False, function(argument))
        except Exception as exc:
            # The worker's traceback, for a bug report.
            exc.add_note(f"in worker {os.getpid()}:\n{traceback.format_exc()}")
            answer = (True, exc)
        try:
            _send(answers, answer)
        except (pickle.PicklingError, TypeError, AttributeError):
            _send(answers, (True, RuntimeError(traceback.format_exc())))
    # The build waits for its workers to exit: skip the interpreter's teardown (freeing every
    # module only to exit), with every answer sent and nothing left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
