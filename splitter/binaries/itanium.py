"""The function an Itanium C++ ABI symbol names (Linux and macOS), as far as saying whether a
header can declare it: its qualified name, without template arguments or parameter types.

`_ZN10executorch9extension10threadpool14get_threadpoolEv` names the function
executorch::extension::threadpool::get_threadpool. Only nested names (`_ZN ... E`, the form
of every function inside a namespace) are read; the template arguments inside them are skipped
by a scan that balances the grammar's bracketed productions (template arguments, nested names,
expressions, literals, decltype, lambdas), not decoded. A symbol that is not a function in a
nested name (data, vtables, a global function) gives None; one the scan cannot follow raises
ValueError. tests/test_itanium.py holds the reading to binutils' c++filt for every function
the wheels' libraries export in ExecuTorch's namespace.
"""

from __future__ import annotations

# Productions that end with an `E` of their own: template arguments, nested names, expressions,
# argument packs, function types, decltype (DT/Dt), lambdas (Ul), local names (Z).
_OPEN = frozenset("INXJFZ")
_CV = "rVK"
# Operator names as C++ spells them (the ABI's table); `cv` (a conversion) is read apart.
_OPERATORS = {
    "nw": " new", "na": " new[]", "dl": " delete", "da": " delete[]", "ps": "+", "ng": "-",
    "ad": "&", "de": "*", "co": "~", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%",
    "an": "&", "or": "|", "eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=",
    "dV": "/=", "rM": "%=", "aN": "&=", "oR": "|=", "eO": "^=", "ls": "<<", "rs": ">>",
    "lS": "<<=", "rS": ">>=", "eq": "==", "ne": "!=", "lt": "<", "gt": ">", "le": "<=",
    "ge": ">=", "ss": "<=>", "nt": "!", "aa": "&&", "oo": "||", "pp": "++", "mm": "--",
    "cm": ",", "pm": "->*", "pt": "->", "cl": "()", "ix": "[]", "qu": "?",
}  # fmt: skip


def function_name(symbol: str) -> tuple[str, ...] | None:
    """The components of the function `symbol` names (e.g. ("executorch", "runtime",
    "Method", "execute")), a constructor or destructor as its class's name (`~` before a
    destructor's); None when `symbol` is not a function in a nested name."""
    if not symbol.startswith("_ZN"):
        return None
    scan = _Scan(symbol, 3)
    while scan.peek() in _CV:
        scan.at += 1
    if scan.peek() in "RO":  # a member function's ref-qualifier
        scan.at += 1
    parts: list[str] = []
    while True:
        char = scan.peek()
        if char == "E":
            scan.at += 1
            break
        if char.isdigit():
            parts.append(scan.source_name())
        elif char == "I":
            scan.at += 1
            scan.skip_to_end()  # template arguments of the component before
        elif char == "C" and scan.peek(1) in "12345I":  # CI1/CI2: an inheriting constructor
            scan.at += 2 if scan.peek(1) != "I" else 3
            parts.append(_last(parts, symbol))
        elif char == "D" and scan.peek(1) in "01245":
            scan.at += 2
            parts.append("~" + _last(parts, symbol))
        elif char == "B":  # an ABI tag on the component before
            scan.at += 1
            scan.source_name()
        elif char == "S" and scan.peek(1) == "t":
            scan.at += 2
            parts.append("std")
        elif char == "L":  # internal linkage marker before a source name
            scan.at += 1
        elif char.islower() and scan.peek(1).isalpha():  # an operator: op<code>
            code = symbol[scan.at : scan.at + 2]
            scan.at += 2
            if code == "cv":  # a conversion operator names a type: skipped, not spelled
                scan.skip_one()
                parts.append("operator <conversion>")
            elif code == "li":  # a literal operator: operator"" <suffix>
                parts.append(f'operator"" {scan.source_name()}')
            elif code in _OPERATORS:
                parts.append(f"operator{_OPERATORS[code]}")
            else:
                raise ValueError(f"unknown operator {code!r} in {symbol}")
        else:
            raise ValueError(f"unexpected {char!r} at {scan.at} in the nested name of {symbol}")
    if scan.at >= len(symbol):
        return None  # no parameter types: a variable, not a function
    return tuple(parts)


def _last(parts: list[str], symbol: str) -> str:
    if not parts:
        raise ValueError(f"a constructor or destructor without a class in {symbol}")
    return parts[-1].lstrip("~")


class _Scan:
    """A cursor over a mangled name."""

    def __init__(self, text: str, at: int) -> None:
        self.text = text
        self.at = at

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        if index >= len(self.text):
            if ahead == 0:
                raise ValueError(f"the name ends inside a production: {self.text}")
            return ""
        return self.text[index]

    def source_name(self) -> str:
        """<length><identifier>, at a digit."""
        start = self.at
        while self.peek().isdigit():
            self.at += 1
        length = int(self.text[start : self.at])
        name = self.text[self.at : self.at + length]
        if len(name) != length:
            raise ValueError(f"a source name runs past the end: {self.text}")
        self.at += length
        return name

    def past(self, end: str) -> None:
        """Skip to just after the next `end` (a number's or a literal's closing character)."""
        while self.peek() != end:
            self.at += 1
        self.at += 1

    def skip_to_end(self) -> None:
        """Skip what follows up to and including the `E` closing the production just
        opened."""
        while self.peek() != "E":
            self.skip_one()
        self.at += 1

    def skip_one(self) -> None:
        """Skip one token, and everything up to its own `E` if it opens a production."""
        char = self.peek()
        following = self.peek(1)
        if char.isdigit():
            self.source_name()
        elif char in _OPEN:
            self.at += 1
            self.skip_to_end()
        elif char == "L":  # a literal: L <type> <value> E, or L _Z <encoding> E
            self.at += 1
            if self.peek() == "_" and self.peek(1) == "Z":
                self.at += 2
                self.skip_to_end()
                return
            self.skip_one()  # the literal's type
            self.past("E")  # its value: digits, n, hex letters
        elif char in "ST":  # a substitution or template parameter: S_, S12_, T_, T0_, St, Sa...
            self.at += 1
            if char == "S" and self.peek().islower():
                self.at += 1
                return
            self.past("_")
        elif char == "C" and (following.isdigit() or following == "I"):  # a constructor
            self.at += 3 if following == "I" else 2
        elif char == "D" and following in "Tt":  # decltype(expression)
            self.at += 2
            self.skip_to_end()
        elif char == "D" and following in "vF":  # vector / _FloatN: Dv <n> _, DF <n> _
            self.at += 2
            self.past("_")
        elif char == "D":  # other two-letter types and Dp (a pack expansion's prefix)
            self.at += 2
        elif char == "U" and following == "l":  # a lambda: Ul <types> E [<n>] _
            self.at += 2
            self.skip_to_end()
            self.past("_")
        elif char == "U" and following == "t":  # an unnamed type: Ut [<n>] _
            self.at += 2
            self.past("_")
        elif char == "A":  # an array: A [<dimension>] _ <type>
            self.at += 1
            self.past("_")
        elif char == "f" and following == "p":  # a function parameter: fp [<n>] _
            self.at += 2
            self.past("_")
        else:  # a builtin type, a qualifier (P R O K V C G), an operator letter, M, B's tag
            self.at += 1
