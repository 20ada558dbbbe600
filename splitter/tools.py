"""External programs, for every stage: find one, run one in the C locale, and tie a child's
life to the build that started it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from splitter.errors import ExternalToolError, MissingToolError


def need_tool(
    command: str, debian_package: str, why: str = "needed to build these packages"
) -> str:
    """The absolute path of `command`; a missing tool names the Debian package holding it."""
    found = shutil.which(command)
    if found is None:
        raise MissingToolError(command, why, f"apt-get install {debian_package}")
    return found


SBIN = ("/usr/sbin", "/sbin")


def tool_path() -> str:
    """$PATH with the system's sbin directories after it: dpkg refuses to install anything
    when ldconfig and start-stop-daemon are not on PATH (they are in /sbin and /usr/sbin),
    which a user's or a CI job's PATH need not include."""
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p]
    return os.pathsep.join([*path, *(d for d in SBIN if d not in path)])


def run_tool(
    what: str, command: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] = {}
) -> str:
    """Run a distro tool in the C locale; its stdout, or ExternalToolError with its stderr."""
    result = subprocess.run(
        list(command),
        cwd=cwd,
        env={**os.environ, "LC_ALL": "C.UTF-8", "PATH": tool_path(), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ExternalToolError(what, command, result.returncode, result.stderr + result.stdout)
    return result.stdout


def run_status(
    command: Sequence[str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a tool whose exit status is a finding rather than a failure (abidiff's bit mask;
    c++filt, whose output the caller checks) in the C locale; its status and output, for the
    caller to judge."""
    return subprocess.run(
        list(command),
        input=stdin,
        env={**os.environ, "LC_ALL": "C.UTF-8", "PATH": tool_path()},
        capture_output=True,
        text=True,
        check=False,
    )


def die_with_parent() -> None:
    """In a child: get SIGKILL when the build that started it dies (PR_SET_PDEATHSIG), so a
    killed build leaves no helper process writing into its temporary directories."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))


M_ARENA_MAX = -8  # glibc's mallopt parameter


def one_malloc_arena() -> None:
    """Keep the process's C heap in one glibc malloc arena. glibc gives each thread that
    allocates its own arena, and memory freed in one stays mapped until it is trimmed: the
    build's helper threads (read_wheel's reader, staging's) held freed memory that way
    (docs/performance.md). Called first thing, before any thread starts; nothing to do off
    glibc."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
