"""Running a Linux output of another architecture: qemu-user and a cross C++ compiler.

An aarch64 library cannot load into an x86_64 process, so verify runs an output of another
architecture's C++ checks as programs of that architecture under `qemu-<arch>`, whose `-L`
names the cross libc and libstdc++ (Debian's `qemu-user` and `g++-aarch64-linux-gnu`; there
may be no binfmt_misc, so qemu is always called explicitly). Programs are cross-compiled:
the co-load matrix's loader (dlopen of each file in order, in a process of its own), and the
C++ consumer through a CMake toolchain file whose CMAKE_CROSSCOMPILING_EMULATOR is the same
qemu command. What needs torch or a Python of that architecture is not run here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from splitter.platforms import by_subdir

LOADER = r"""
#include <dlfcn.h>
#include <stdio.h>
/* Load each argument in order, RTLD_GLOBAL like the Python loaders; exit() runs the
   libraries' static destructors, as at the end of any process. */
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
    }
    puts("loaded");
    return 0;
}
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulator:
    """qemu-user for one architecture, with a cross C++ compiler and its sysroot."""

    machine: str  # aarch64
    triplet: str  # aarch64-linux-gnu
    qemu: Path
    cxx: Path
    sysroot: Path

    def qemu_command(self, library_path: str = "") -> list[str]:
        """qemu with the sysroot as the guest's root for absolute paths (-L) and its lib/
        on the guest's LD_LIBRARY_PATH after `library_path` (-E). Without it, a machine
        holding Debian's multiarch libraries of this architecture (libc6:arm64..., as a
        cross-building packager's does) gives the guest's loader, the sysroot's, the host's
        /lib/<triplet>/libc.so.6 from its default path: a libc of another build, with which
        the model's run spun forever."""
        search = ":".join(d for d in (library_path, str(self.sysroot / "lib")) if d)
        return [str(self.qemu), "-L", str(self.sysroot), "-E", f"LD_LIBRARY_PATH={search}"]

    def command(
        self, program: Path, *args: str, environ: Mapping[str, str] = os.environ
    ) -> list[str]:
        """The command that runs `program` (of this architecture) with `args`, in a process
        whose environment is `environ` (its LD_LIBRARY_PATH goes to the guest's, before the
        sysroot's lib/)."""
        return [*self.qemu_command(environ.get("LD_LIBRARY_PATH", "")), str(program), *args]

    def toolchain(self, directory: Path) -> Path:
        """A CMake toolchain file that cross-compiles for this architecture and runs what it
        builds (try-runs included) under qemu."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.machine}.cmake"
        emulator = ";".join(self.qemu_command())
        path.write_text(
            "set(CMAKE_SYSTEM_NAME Linux)\n"
            f"set(CMAKE_SYSTEM_PROCESSOR {self.machine})\n"
            f'set(CMAKE_CXX_COMPILER "{self.cxx}")\n'
            f'set(CMAKE_CROSSCOMPILING_EMULATOR "{emulator}")\n'
            "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)\n"
        )
        return path

    def loader(self, directory: Path) -> Path | str:
        """The co-load loader, compiled for this architecture into `directory`; when the
        compiler cannot build it, why, naming the compiler and its error (each pair then
        becomes a failed row, not a traceback)."""
        directory.mkdir(parents=True, exist_ok=True)
        source, program = directory / "loader.c", directory / "loader"
        source.write_text(LOADER)
        built = subprocess.run(
            [str(self.cxx), "-x", "c", str(source), "-o", str(program), "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode == 0:
            return program
        error = (built.stderr.strip().splitlines() or [f"exit {built.returncode}"])[-1]
        # the compiler first: a row keeps the first 200 characters of the line
        return f"{self.cxx} could not build the co-load loader: {error}"


def emulator_for(subdir: str, cross_cxx: Path | None = None) -> Emulator | str:
    """The emulator for a Linux output of `subdir`, or why there is none, with what to
    install: qemu-<arch> and a cross C++ compiler (`cross_cxx`, else <triplet>-g++ on
    PATH)."""
    platform = by_subdir(subdir)
    if platform is None or not platform.qemu or not platform.cross_cxx:
        return f"{subdir} programs cannot be emulated here"
    machine, triplet = platform.machine, platform.triplet
    qemu = shutil.which(platform.qemu)
    cxx = str(cross_cxx) if cross_cxx is not None else shutil.which(platform.cross_cxx)
    missing = []
    if qemu is None:
        missing.append(f"{platform.qemu} (Debian: apt-get install qemu-user)")
    if cxx is None or not os.access(cxx, os.X_OK):
        install = f"apt-get install {platform.cross_package}; or --cross-cxx"
        missing.append(f"{platform.cross_cxx} (Debian: {install})")
    if missing:
        return f"{machine} programs run under emulation here, which needs " + " and ".join(missing)
    assert qemu is not None and cxx is not None
    sysroot = Path("/usr") / triplet
    if not sysroot.is_dir():
        printed = subprocess.run(
            [cxx, "-print-sysroot"], capture_output=True, text=True, check=False
        ).stdout.strip()
        sysroot = Path(printed or "/")
    return Emulator(
        machine=machine, triplet=triplet, qemu=Path(qemu), cxx=Path(cxx), sysroot=sysroot
    )
