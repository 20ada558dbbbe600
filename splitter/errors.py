"""The exception hierarchy: every expected failure is a SplitterError with an exit code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SplitterError(Exception):
    """Root of every error the CLI reports without a traceback."""

    exit_code = 1


class InvalidWheel(SplitterError):
    """The input is not a well-formed, verifiable wheel."""

    exit_code = 2


class UnsupportedWheel(SplitterError):
    """A valid wheel this recipe cannot split (wrong project, version or platform)."""

    exit_code = 3


class RecipeError(SplitterError):
    """The recipe is malformed or contradicts the wheel."""

    exit_code = 4


class OwnershipError(SplitterError):
    """Files owned by no package or by several; carries every problem at once."""

    exit_code = 5

    def __init__(self, unowned: Sequence[str], multiply_owned: Sequence[str]) -> None:
        self.unowned = tuple(unowned)
        self.multiply_owned = tuple(multiply_owned)
        lines = [
            f"file ownership is not exact ({len(self.unowned)} unowned, "
            f"{len(self.multiply_owned)} owned twice)"
        ]
        lines += [f"  unowned: {p}" for p in self.unowned]
        lines += [f"  owned twice: {p}" for p in self.multiply_owned]
        lines.append(
            "add or narrow [[rules]] in the recipe so each file matches exactly one package"
        )
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle (a worker process's answer) re-creates it from these, not from the message
        return (type(self), (self.unowned, self.multiply_owned), self.__dict__)


class BinaryError(SplitterError):
    """An ELF file cannot be analysed, or its dependencies do not resolve."""

    exit_code = 6


class ExclusivityError(SplitterError):
    """Binaries collide in one process in a way the recipe does not declare."""

    exit_code = 7


class ExternalToolError(SplitterError):
    """A subprocess (pip, patchelf, rattler-build, cmake) ran and failed; a tool that is not
    installed is a MissingToolError."""

    exit_code = 8

    def __init__(self, what: str, command: Sequence[str], returncode: int, stderr: str) -> None:
        self.what = what
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        super().__init__(f"{what} (exit {returncode}): {' '.join(self.command)}\n{tail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.command, self.returncode, self.stderr), self.__dict__)


class OutputError(SplitterError):
    """The output directory cannot be written, or is locked by another build."""

    exit_code = 9


class DoctorError(SplitterError):
    """The prefix, binary or process to diagnose does not exist or cannot be read."""

    exit_code = 10


class ReleaseError(SplitterError):
    """The wheels given as one release do not form one: mixed versions, or a file that must
    be the same in every wheel of a platform differs beyond what a build stamps."""

    exit_code = 11


class UsageError(SplitterError):
    """The command line asks for something splitter does not do: an option value, or options
    and arguments that cannot work together (refused, where the arguments tell, before
    anything is fetched or read)."""

    exit_code = 12


class MissingToolError(SplitterError):
    """An executable splitter runs is not installed; the message says how to install it."""

    exit_code = 13

    def __init__(self, tool: str, why: str, install: str, looked_for: Sequence[str] = ()) -> None:
        self.tool = tool
        self.why = why
        self.install = install
        self.looked_for = tuple(looked_for) or (tool,)
        super().__init__(
            f"{tool} is not installed ({why}): {', '.join(self.looked_for)}\ninstall it: {install}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.tool, self.why, self.install, self.looked_for), self.__dict__)


class ManifestError(SplitterError):
    """A build output's manifest is missing or unreadable, or the output is not what it lists."""

    exit_code = 14


class LicenceError(SplitterError):
    """A shipped file's licence is not settled by the recipe: the scanner found a licence no
    reviewed entry covers, or an exclusion would drop a binary."""

    exit_code = 15
