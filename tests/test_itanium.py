"""The Itanium name reader (splitter.binaries.itanium) judged by binutils' c++filt: for every
nested-name symbol the libraries and extension modules of the Linux x86_64, aarch64 and macOS
arm64 wheels export (about 11,000 names, absl, re2, sentencepiece and std:: templates among
them), the function it names equals c++filt's demangling with template arguments and
parameters taken out, and a symbol c++filt shows without parameters (data) is no function.
The few names c++filt cannot demangle (libc++'s std::variant internals) are only read."""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from splitter.binaries.detect import analyse_with_exports, is_binary
from splitter.binaries.itanium import function_name

pytestmark = pytest.mark.integration

# An operator's own spelling, set aside before template arguments are taken out of the rest.
_OPERATOR = re.compile(
    r"operator(?:\"\" \w+| new\[\]| delete\[\]| new| delete|<=>|<<=|>>=|->\*|->|<<|>>|<=|>=|"
    r"\(\)|\[\]|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?|\?)"
)


def reference(demangled: str) -> str | None:
    """c++filt's line for a function as splitter spells it: the qualified name alone (an
    operator as `operator<<`, a conversion as `operator <conversion>`); None for data."""
    if "(" not in demangled:
        return None
    demangled = demangled.removeprefix("decltype(auto) ")
    if demangled.startswith("decltype ("):  # a decltype return type: drop it, balanced
        depth = 0
        for index, char in enumerate(demangled):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == ")" and depth == 0:
                demangled = demangled[index + 1 :]
                break
    operators: list[str] = []

    def keep(match: re.Match[str]) -> str:
        operators.append(match[0])
        return f"\0{len(operators) - 1}\0"

    name = _OPERATOR.sub(keep, re.sub(r"\[abi:\w+\]", "", demangled))
    name = re.sub(r"\boperator [^(]+\(", "\1(", name)  # a conversion names a type
    while (stripped := re.sub(r"<[^<>]*>", "", name)) != name:
        name = stripped
    pointer = re.search(r"\(\*([^()]+)\(", name)  # returns a function pointer: T (*f(...))(...)
    name = pointer[1] if pointer else name.split("(", 1)[0]
    name = name.strip().rsplit(" ", 1)[-1]
    name = name.replace("\1", "operator <conversion>")
    return re.sub(r"\0(\d+)\0", lambda m: operators[int(m[1])], name)


def exported(wheel: Path) -> set[str]:
    names: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not member.endswith((".so", ".dylib")):
                continue
            data = archive.read(member)
            if is_binary(data):
                names.update(n for n in analyse_with_exports(member, data)[1] if n[:3] == "_ZN")
    return names


@pytest.mark.parametrize(
    "fixture",
    ["real_wheel", "real_wheel_aarch64", "real_wheel_macos"],
    ids=lambda f: f[11:] or "x86_64",
)
def test_function_names_agree_with_cxxfilt(fixture: str, request: pytest.FixtureRequest) -> None:
    names = sorted(exported(request.getfixturevalue(fixture)))
    demangled = subprocess.run(
        ["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(names) > 2000 and len(demangled) == len(names)
    differ = []
    unread = [s for s, line in zip(names, demangled, strict=True) if s == line]
    # c++filt gives some of libc++'s std::variant machinery back as it came (too deep for
    # binutils' demangler): those are only read, never judged, and none is ExecuTorch's
    assert len(unread) < len(names) // 50
    assert not [s for s in unread if (f := function_name(s)) and f[0] == "executorch"]
    for symbol, line in zip(names, demangled, strict=True):
        if symbol == line:
            continue
        parts = function_name(symbol)
        mine = "::".join(parts) if parts is not None else None
        if mine != reference(line):
            differ.append(f"{symbol}: {mine} vs c++filt {line}")
    assert differ == [], f"{len(differ)} of {len(names)}:\n" + "\n".join(differ[:20])
    ours = [n for n in names if (f := function_name(n)) and f[0] == "executorch"]
    assert len(ours) > 500  # the runtime's API is among them: the check reaches it
