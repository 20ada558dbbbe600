"""The conda build's worker processes: plain interpreters fed pickled calls over a pipe.

Not multiprocessing: its spawn start re-runs the build's main script in every worker (for
the console script, an import of the whole CLI that competes with the build for the cores)
and starts a resource tracker process, one more process resident through the build's memory
peak. A worker here runs `serve`, which reads (function, argument) pairs pickled on stdin and
writes each result pickled on stdout; its stderr is the build's.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import IO, Any

HEADER = struct.Struct("<Q")
# The build's sys.path, not the worker's own: splitter may be importable only through it.
SERVE = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[2])\n"
    "from splitter.targets.workers import serve\n"
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
    the modules in `warm`) overlaps the build's own work."""

    def __init__(self, count: int, warm: tuple[str, ...]) -> None:
        command = [sys.executable, "-c", SERVE, str(os.getpid()), json.dumps(sys.path), *warm]
        self._processes: list[subprocess.Popen[bytes]] = []
        for _ in range(count):
            self._processes.append(
                subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            )

    def run(
        self, function: Callable[[Any], Any], arguments: list[Any], local: bool = False
    ) -> Iterator[tuple[int, Any]]:
        """Call `function` on each argument, in list order on the next free worker; yield
        (index, result) as calls finish. A call that raised re-raises here. With `local`, the
        calling process is one more worker: it takes the next argument whenever every worker
        is busy (one process fewer for the same parallelism)."""
        free = list(self._processes)
        busy: dict[int, int] = {}  # worker pid -> argument index
        todo = list(enumerate(arguments))
        with selectors.DefaultSelector() as selector:
            while todo or busy:
                while todo and free:
                    worker = free.pop(0)
                    index, argument = todo.pop(0)
                    _send(_pipe(worker.stdin), (function, argument))
                    busy[worker.pid] = index
                    selector.register(_pipe(worker.stdout), selectors.EVENT_READ, worker)
                # A worker that finished gets the next argument before the caller takes
                # one: the caller's call blocks this loop, so looking only afterwards would
                # leave the worker idle for all the arguments the caller works through.
                ready = selector.select(timeout=0 if local and todo else None)
                if not ready:
                    index, argument = todo.pop(0)
                    yield index, function(argument)
                    continue
                for key, _ in ready:
                    worker = key.data
                    selector.unregister(key.fileobj)
                    answer = _receive(_pipe(worker.stdout))
                    if answer is None:
                        raise WorkerDied(worker.pid, worker.wait())
                    index = busy.pop(worker.pid)
                    free.append(worker)
                    failed, result = answer
                    if failed:
                        raise result
                    yield index, result

    @property
    def count(self) -> int:
        """How many worker processes there are (the build's own not counted)."""
        return len(self._processes)

    def shrink(self, count: int) -> None:
        """Let all but `count` workers exit (a build with fewer jobs than workers)."""
        surplus, self._processes = self._processes[count:], self._processes[:count]
        _close(surplus)

    def close(self) -> None:
        """Let idle workers exit; kill any still busy (the build failed)."""
        _close(self._processes)

    def kill(self) -> None:
        """Stop every worker now."""
        for worker in self._processes:
            with contextlib.suppress(OSError):
                worker.kill()
        self.close()


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


def die_with_parent() -> None:
    """In a child: get SIGKILL when the build that started it dies (PR_SET_PDEATHSIG), so a
    killed build leaves no helper process writing into its temporary directories."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
