"""Reproducible .tar.gz files: what the Debian orig tarball, the RPM's generated-files Source
and the Conan archives share."""

from __future__ import annotations

import contextlib
import gzip
import tarfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def reproducible_tar_gz(path: Path, level: int) -> Iterator[tarfile.TarFile]:
    """A .tar.gz at `path` whose bytes depend on the members added alone: gzip without file
    name or time, GNU tar format. The caller adds the members in a fixed order, each with a
    fixed time and owner."""
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        yield tar
