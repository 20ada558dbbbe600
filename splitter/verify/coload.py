"""The co-load matrix: every pair of shipped binaries loaded into one fresh process, both orders."""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from splitter.binaries.elf import analyse_elf, is_elf
from splitter.tools import die_with_parent
from splitter.verify.emulate import Emulator

TORCH_SONAMES = ("libtorch", "libc10")
TIMEOUT = 300  # seconds one load may take before it counts as an error
# A loader interpreter: imports torch once (if asked), then for each JSON list of paths on
# stdin forks a child that loads them in order, with its output in a file of its own, and
# answers [exit code, output]. The child ends through libc exit(), so the libraries' static
# destructors run as at the end of a fresh process. Forking from a warm interpreter instead
# of starting one per pair imports torch once per loader, not once per pair: the import is
# most of the cost of a fresh interpreter.
LOADER = """
import ctypes, json, os, signal, sys, tempfile
if sys.argv[1] == "torch":
    import torch  # brings libtorch*, libc10 into the process for the extensions
libc = ctypes.CDLL(None)
answer = sys.stdout
print("ready", file=answer, flush=True)
for line in sys.stdin:
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            signal.alarm(int(sys.argv[2]))
            try:
                for path in json.loads(line):
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except BaseException as exc:
                os.write(2, f"{type(exc).__name__}: {exc}\\n".encode())
                os._exit(1)
            os.write(1, b"loaded\\n")
            libc.exit(0)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        log.seek(0)
        output = log.read().decode(errors="replace")
    print(json.dumps([code, output]), file=answer, flush=True)
"""


class Loader:
    """One loader interpreter (with or without torch) and the pipe to it."""

    def __init__(self, python: Path, torch: bool) -> None:
        self.torch = torch
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [str(python), "-c", LOADER, "torch" if torch else "-", str(TIMEOUT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            preexec_fn=die_with_parent,
        )
        self.ready = self._read() == "ready"

    def _read(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def load(self, paths: list[Path]) -> tuple[int, str]:
        """Exit code and output of a child that loaded `paths` in order."""
        assert self.process.stdin is not None
        if self.ready:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.write(json.dumps([str(p) for p in paths]) + "\n")
                self.process.stdin.flush()
                answer = self._read()
                if answer:
                    code, output = json.loads(answer)
                    return int(code), str(output)
        self.ready = False
        self.log.seek(0)
        return -1, "the loader interpreter failed: " + self.log.read().decode(errors="replace")

    def close(self) -> None:
        """End the interpreter (EOF on its stdin), killing it if it does not end."""
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


class Loaders:
    """Up to `jobs` loader interpreters of each kind, started when first needed."""

    def __init__(self, pythons: dict[bool, Path], jobs: int) -> None:
        self.pythons = pythons
        self.jobs = jobs
        self.idle: dict[bool, queue.SimpleQueue[Loader]] = {
            True: queue.SimpleQueue(),
            False: queue.SimpleQueue(),
        }
        self.started: list[Loader] = []
        self.lock = threading.Lock()

    def load(self, paths: list[Path], torch: bool) -> tuple[int, str]:
        """Load `paths` in a fresh child of a loader of that kind."""
        with self.lock:
            start = sum(1 for x in self.started if x.torch == torch) < self.jobs
            if start:
                self.started.append(Loader(self.pythons[torch], torch))
                loader = self.started[-1]
        if not start:
            loader = self.idle[torch].get()
        try:
            return loader.load(paths)
        finally:
            self.idle[torch].put(loader)

    def close(self) -> None:
        """End every loader."""
        for loader in self.started:
            loader.close()


class EmulatedLoaders:
    """Loads for a Linux output of another architecture: the loader program compiled for it,
    run under qemu, a process a pair (splitter.verify.emulate)."""

    def __init__(self, emulator: Emulator, scratch: Path) -> None:
        self.emulator = emulator
        self.program = emulator.loader(scratch)

    def load(self, paths: list[Path], torch: bool) -> tuple[int, str]:
        """Exit code and output of the loader run on `paths`, in order (1 and why, when there
        is no loader)."""
        assert not torch, "torch of another architecture cannot load here"
        if isinstance(self.program, str):
            return 1, self.program
        command = self.emulator.command(self.program, *map(str, paths))
        try:
            run = subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return -1, f"no answer in {TIMEOUT} s"
        return run.returncode, run.stdout + run.stderr

    def close(self) -> None:
        """Nothing runs between loads."""


class Outcome(StrEnum):
    """What loading two files into one process did."""

    COEXIST = "coexist"  # both loaded
    ABORT = "abort"  # the second aborted with "Re-registering"
    ERROR = "error"  # any other failure
    SKIPPED = "skipped"  # not run: needs torch and no interpreter has it


@dataclass(frozen=True, slots=True, kw_only=True)
class PairResult:
    """One ordered load of two files."""

    first: str
    second: str
    expected: Outcome  # COEXIST or ABORT
    outcome: Outcome
    detail: str

    @property
    def ok(self) -> bool:
        """Skipped counts as not failed."""
        return self.outcome in (self.expected, Outcome.SKIPPED)


def coload_items(libdir: Path, sitedir: Path | None) -> list[Path]:
    """The shipped libraries, the `_C` extension and the export plugins."""
    items = sorted(p for p in libdir.glob("*.so*") if p.is_file())
    if sitedir is not None:
        items += sorted(sitedir.glob("executorch/extension/pybindings/_C.*.so"))
        items += sorted(sitedir.glob("executorch/**/*_aot_lib.so"))
    return [p for p in items if is_elf(p.read_bytes()[:4])]


def needs_torch(path: Path) -> bool:
    """Whether loading `path` needs torch's libraries in the process first."""
    info = analyse_elf(path.name, path.read_bytes())
    return any(n.startswith(TORCH_SONAMES) or n.startswith("_C.") for n in info.needed)


def expected_outcome(first: Path, second: Path, verdicts: Iterable[dict[str, Any]]) -> Outcome:
    """ABORT when the metadata marks this pair in effect, else COEXIST."""
    names = {first.name, second.name}
    for verdict in verdicts:
        if {f["path"].rsplit("/", 1)[-1] for f in verdict["files"]} == names:
            return Outcome.ABORT if verdict["in_effect"] else Outcome.COEXIST
    return Outcome.COEXIST


def load_pair(
    loaders: Loaders | EmulatedLoaders, first: Path, second: Path, torch: bool
) -> tuple[Outcome, str]:
    """Outcome and the last line of output of loading both files in that order."""
    code, output = loaders.load([first, second], torch)
    output = output.strip()
    if code == 0:
        return Outcome.COEXIST, ""
    if code in (-6, 134) and "Re-registering" in output:
        line = next(x for x in output.splitlines() if "Re-registering" in x)
        return Outcome.ABORT, line.split("] ", 1)[-1][:160]
    return Outcome.ERROR, (output.splitlines() or [f"exit {code}"])[-1][:200]


def coload_matrix(
    items: list[Path],
    verdicts: Iterable[dict[str, Any]],
    plain_python: Path,
    torch_python: Path | None,
    jobs: int = 2,
    emulated: tuple[Emulator, Path] | None = None,
) -> list[PairResult]:
    """Load every pair in both orders, each in a process of its own (forked from a loader
    interpreter that holds nothing else); torch pairs need torch_python. `emulated` (an
    emulator and a scratch directory): the files are of another architecture, each pair is
    loaded by a program of theirs under qemu, and torch pairs cannot run here."""
    verdicts = list(verdicts)
    torch_needed = {p: needs_torch(p) for p in items}
    work = []
    for a, b in itertools.combinations(items, 2):
        for first, second in ((a, b), (b, a)):
            work.append((first, second, torch_needed[a] or torch_needed[b]))
    pythons = {False: plain_python, True: torch_python or plain_python}
    loaders: Loaders | EmulatedLoaders
    if emulated is not None:
        loaders = EmulatedLoaders(*emulated)
        no_torch = f"needs torch built for {emulated[0].machine}, which cannot run on this machine"
    else:
        loaders = Loaders(pythons, max(1, jobs))
        no_torch = "needs torch: pass --python with torch"

    def run(job: tuple[Path, Path, bool]) -> PairResult:
        first, second, torch = job
        expected = expected_outcome(first, second, verdicts)
        if torch and (torch_python is None or emulated is not None):
            return PairResult(
                first=first.name,
                second=second.name,
                expected=expected,
                outcome=Outcome.SKIPPED,
                detail=no_torch,
            )
        outcome, detail = load_pair(loaders, first, second, torch)
        return PairResult(
            first=first.name, second=second.name, expected=expected, outcome=outcome, detail=detail
        )

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(run, work))
    finally:
        loaders.close()
