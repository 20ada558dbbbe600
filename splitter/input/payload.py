"""The bytes of a planned wheel's files, as the targets take them.

make_plan verified every file against RECORD and recorded its size and sha256; the targets read
the wheel again here, and every read is checked against those digests. A wheel replaced (or
rewritten in place) after the plan was made therefore stops the build naming the file, and a
split never mixes two wheels. `Payload.read` serves a few members whole (metadata, licences,
the guard's __init__.py); `extract` writes many to disk with two threads.
"""

from __future__ import annotations

import os
import threading
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

from splitter.errors import InvalidWheel
from splitter.input.zipread import BIG, MemberRead, open_archive, read_member
from splitter.model import Progress, WheelInfo


class Payload:
    """The wheel a plan was made from, opened for verified reads (a context manager)."""

    def __init__(self, wheel: WheelInfo) -> None:
        self.wheel = wheel
        self._entries = {e.path: e for e in wheel.entries}
        self._archive: zipfile.ZipFile | None = None
        self._descriptor = -1

    def __enter__(self) -> Payload:
        try:
            self._archive = open_archive(self.wheel.path, keep=False)  # the plan's, if the same
            self._descriptor = os.open(self.wheel.path, os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, zipfile.BadZipFile) as exc:
            self.__exit__(None, None, None)
            raise changed(self.wheel, self.wheel.filename, f"{type(exc).__name__}: {exc}") from exc
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._archive is not None:
            self._archive.close()
            self._archive = None
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1

    def read(self, path: str) -> bytes:
        """The bytes of the wheel's file `path`, verified."""
        data = self._verified(path, None).data
        assert data is not None  # kept: _verified always asks for them without a target
        return data

    def copy(self, path: str, target: str) -> None:
        """Write the wheel's file `path` to the file `target`, verified as it streams."""
        self._verified(path, target)

    def _verified(self, path: str, target: str | None) -> MemberRead:
        entry = self._entries[path]
        assert self._archive is not None, "Payload used outside its with block"
        try:
            info = self._archive.getinfo(path)
            read = read_member(
                self._archive, self._descriptor, info, None if target else _keep, target
            )
        except (KeyError, InvalidWheel) as exc:
            raise changed(self.wheel, path, f"{type(exc).__name__}: {exc}") from exc
        if read.size != entry.size or read.digest.hex() != entry.sha256:
            raise changed(self.wheel, path, f"{read.size} bytes, sha256 {read.digest.hex()}")
        return read


def changed(wheel: WheelInfo, path: str, found: str) -> InvalidWheel:
    """The error for a file that no longer is what the plan verified."""
    return InvalidWheel(
        f"the wheel changed after it was verified ({found}; {wheel.path} was replaced "
        f"while splitter ran?): {path}"
    )


def _keep(_name: str, _head: bytes) -> bool:
    return True


def extract(
    wheel: WheelInfo,
    jobs: Sequence[tuple[str, str]],
    progress: Progress | None = None,
) -> None:
    """Write each (wheel path, file) verified. Members of at least BIG bytes are written by a
    helper thread: inflating, hashing and writing them release the GIL. The many small ones,
    whose cost is mostly Python's per-member work, are written by the calling thread
    meanwhile (a second thread for them only contends for the GIL). Both read through one
    Payload, so the wheel's central directory is parsed once; they read with pread on its
    descriptor, which needs no lock (splitter.input.zipread)."""
    sizes = {e.path: e.size for e in wheel.entries}
    big = [job for job in jobs if sizes[job[0]] >= BIG]
    small = [job for job in jobs if sizes[job[0]] < BIG]
    done = [0]
    lock = threading.Lock()

    def work(payload: Payload, bucket: list[tuple[str, str]]) -> None:
        for path, target in bucket:
            payload.copy(path, target)
            with lock:
                done[0] += 1
                if progress is not None and done[0] % 200 == 0:
                    progress("stage", done[0], len(jobs))

    with Payload(wheel) as payload, ThreadPoolExecutor(max_workers=1) as helper:
        helping = helper.submit(work, payload, big)
        try:
            work(payload, small)
        finally:
            helping.result()
