"""Install a `--target deb` or `--target rpm` output into a scratch root with dpkg or rpm."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from splitter.errors import ExternalToolError, UsageError
from splitter.input.fetch import machine_subdir
from splitter.manifest import Artifact
from splitter.plan.report import RECORD, is_record
from splitter.platforms import MANYLINUX, subdirs, supported
from splitter.tools import need_tool, run_tool, tool_path

VERIFY = "verify reads and installs the packages with it"  # why a missing tool is needed


def _record(command: list[str], stdin: Any = None) -> dict[str, Any] | None:
    """The exclusivity record inside a package, read from its payload as a tar stream; None
    for a package without one (a development package)."""
    with subprocess.Popen(
        command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as archive:  # plain or gzip
            for member in archive:
                if is_record(member.name.rsplit("/", 1)[-1]) and "/share/doc/" in member.name:
                    handle = archive.extractfile(member)
                    assert handle is not None
                    data: dict[str, Any] = json.loads(handle.read())
                    proc.kill()
                    return data
    return None


def arch_artifacts(out: Path, kind: str, artifacts: tuple[Artifact, ...]) -> list[Artifact]:
    """The .deb or .rpm artifacts of OUT of one platform (the manifest says which): this
    machine's when OUT has them (a release's OUT holds both), else the first other Linux
    platform's, whose programs verify runs under emulation (splitter.verify.emulate)."""
    here = machine_subdir()
    if not here:
        raise UsageError(
            f"verify runs .{kind} packages on Linux {', '.join(_linux_machines())}, not "
            f"{platform.machine()}: {out}\nrun it on one of those machines"
        )
    present = {a.platform for a in artifacts}
    chosen = next((s for s in (here, *subdirs()) if s in present), None)
    if chosen is None:
        raise UsageError(
            f"no .{kind} of a Linux architecture in the output: {out}\n"
            "point verify at the -o directory of `splitter build --target deb|rpm`"
        )
    return [a for a in artifacts if a.platform == chosen]


def _linux_machines() -> list[str]:
    return [p.machine for p in supported() if p.family == MANYLINUX]


def records(packages: list[Path], kind: str) -> dict[Path, dict[str, Any]]:
    """The exclusivity record each package of `packages` ships (library and Python packages
    do, development packages not); at least one must."""
    found = {}
    for package in packages:
        if kind == "deb":
            command = [need_tool("dpkg-deb", "dpkg", VERIFY), "--fsys-tarfile", str(package)]
            record = _record(command)
        else:
            # rpm2archive turns the payload into a gzip'd tar on stdout
            command = [need_tool("rpm2archive", "rpm2cpio", VERIFY), "-"]
            with package.open("rb") as stdin:
                record = _record(command, stdin)
        if record is not None:
            found[package] = record
    if not found:
        raise UsageError(
            f"no {RECORD} in any package (not built by splitter?): {packages[0].parent}\n"
            "point verify at the -o directory of `splitter build --target deb|rpm`"
        )
    return found


def install_packages(kind: str, files: list[Path], root: Path) -> tuple[str, ...]:
    """Install `files` into a fresh `root`: dpkg --instdir/--admindir, or rpm --root with its
    own database; returns the dependencies the tool found unmet, as it wrote them. This
    machine's empty database knows neither glibc nor torch, so those are always unmet, and the
    install goes on without them (dpkg configures with --force-depends, rpm installs with
    --nodeps); verify's "depends" check then tells them from an unmet dependency on a package
    of the split."""
    root = root.absolute()
    if kind == "deb":
        admin = root / "var" / "lib" / "dpkg"
        for sub in ("info", "updates", "triggers"):
            (admin / sub).mkdir(parents=True, exist_ok=True)
        for name in ("status", "available"):
            (admin / name).touch()
        dpkg = [
            need_tool("dpkg", "dpkg", VERIFY),
            f"--instdir={root}",
            f"--admindir={admin}",
            "--force-not-root",
            "--force-architecture",  # an arm64 root on amd64: its programs run under qemu
        ]
        first = subprocess.run(
            [*dpkg, "--install", *map(str, files)],
            env={**os.environ, "LC_ALL": "C.UTF-8", "PATH": tool_path()},
            capture_output=True,
            text=True,
            check=False,
        )
        output = first.stderr + first.stdout
        if first.returncode != 0 and "dependency problems" not in output:
            raise ExternalToolError(
                "dpkg could not install the packages into a scratch root",
                [*dpkg, "--install", *map(str, files)],
                first.returncode,
                output,
            )
        run_tool(
            "dpkg could not configure the packages in a scratch root",
            [*dpkg, "--force-depends", "--configure", "--pending"],
        )
        return _dpkg_unmet(output)
    rpm = need_tool("rpm", "rpm", VERIFY)
    root.mkdir(parents=True, exist_ok=True)
    base = [rpm, "--root", str(root), "--dbpath", "/var/lib/rpm"]
    run_tool("rpm could not create a database in a scratch root", [*base, "--initdb"])
    test = subprocess.run(
        [*base, "-i", "--test", "--ignorearch", *map(str, files)],
        env={**os.environ, "LC_ALL": "C.UTF-8"},
        capture_output=True,
        text=True,
        check=False,
    )
    run_tool(
        "rpm could not install the packages into a scratch root",
        [*base, "-i", "--nodeps", "--ignorearch", *map(str, files)],
    )
    lines = (test.stderr + test.stdout).splitlines()
    return tuple(sorted({line.strip() for line in lines if " is needed by " in line}))


def _dpkg_unmet(output: str) -> tuple[str, ...]:
    """From dpkg's dependency problems: each "P depends on D" whose reason is that a package is
    not installed or has another version; not those whose package is only "not configured
    yet" (it is in the same install, and is configured next)."""
    unmet = set()
    lines = output.splitlines()
    for index, line in enumerate(lines[:-1]):
        if " depends on " not in line or not line.rstrip().endswith("however:"):
            continue
        reason = lines[index + 1].strip()
        if reason.endswith("is not configured yet."):
            continue
        unmet.add(line.strip().removesuffix("however:").strip().removesuffix(";"))
    return tuple(sorted(unmet))
