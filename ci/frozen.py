"""Check that this interpreter's environment holds exactly what a lock pins.

    python ci/frozen.py [--subset] [--except NAME] ci/locks/test.lock

Compares `pip freeze --all` with the lock's `name==version` lines (names normalised as PEP 503
says): prints both lists side by side and exits 1 when a distribution is missing, extra or at
another version (with --subset, only when one installed is absent from the lock or at another
version: a venv holding part of the lock). .ci/run calls it after each install, so a CI log shows
what was tested.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)")


def normalise(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """`name==version` lines of a requirements file, by normalised name."""
    found = (PIN.match(line) for line in text.splitlines())
    return {normalise(m[1]): m[2] for m in found if m}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--except", dest="skip", action="append", default=[])
    parser.add_argument("--subset", action="store_true")
    args = parser.parse_args()
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {n: v for n, v in pins(frozen).items() if n not in map(normalise, args.skip)}
    locked = pins(args.lock.read_text(encoding="utf-8"))
    problems = []
    names = installed.keys() if args.subset else installed.keys() | locked.keys()
    for name in sorted(names):
        have, want = installed.get(name, "-"), locked.get(name, "-")
        mark = "ok" if have == want else "DIFFERS"
        print(f"{name:32} installed {have:24} locked {want:24} {mark}")
        if have != want:
            problems.append(name)
    if problems:
        print(f"{len(problems)} distributions differ from {args.lock}: {', '.join(problems)}")
        return 1
    print(f"{len(names)} distributions installed exactly as {args.lock} pins them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
