"""info/paths.json as the build finishes it (splitter.targets.conda.assemble.paths_json): only the
blocks of the files carrying the prefix placeholder are written again, and the result is
exactly what decoding and re-encoding the whole document gives, whatever the input's layout."""

from __future__ import annotations

import json

import pytest

from splitter.targets.conda.assemble import json_bytes, paths_json
from splitter.targets.conda.placeholder import CONDA_PLACEHOLDER

FILES = ("bin/flatc", "bin/flatc2", "lib/libx.so", "site-packages/é/data.txt", "zz/last")


def document() -> dict[str, object]:
    """A paths.json as the assembler writes it: one entry per file, sorted by path."""
    return {
        "paths": [
            {"_path": path, "path_type": "hardlink", "sha256": "ab" * 32, "size_in_bytes": n}
            for n, path in enumerate(FILES)
        ],
        "paths_version": 1,
    }


def whole(data: dict[str, object], marked: frozenset[str]) -> bytes:
    """The expected bytes: the whole document decoded, marked and encoded again."""
    copy = json.loads(json.dumps(data))
    for entry in copy["paths"]:
        if entry["_path"] in marked:
            entry["prefix_placeholder"] = CONDA_PLACEHOLDER
            entry["file_mode"] = "text"
    return json_bytes(copy)


@pytest.mark.parametrize(
    "marked",
    [
        frozenset(),
        frozenset({"bin/flatc"}),  # a prefix of the next file's path
        frozenset({"bin/flatc2", "zz/last"}),
        frozenset({"site-packages/é/data.txt"}),  # json_bytes escapes it: the whole way
        frozenset({"not/there"}),
        frozenset(FILES),
    ],
    ids=["none", "one", "two-and-last", "non-ascii", "absent", "all"],
)
@pytest.mark.parametrize(
    "layout",
    [
        lambda d: json_bytes(d).removesuffix(b"\n"),  # the assembler's form: no final newline
        json_bytes,
        lambda d: json.dumps(d, indent=4).encode(),
        lambda d: json.dumps(d, ensure_ascii=False, indent=2, sort_keys=True).encode(),
    ],
    ids=["assembler", "json_bytes", "indent-4", "utf-8"],
)
def test_paths_json_equals_the_whole_document_reencoded(marked, layout) -> None:  # type: ignore[no-untyped-def]
    """The bytes are those of the whole document decoded, marked and re-encoded, in any input
    layout (the assembler's: block by block; another: the whole way)."""
    data = document()
    assert paths_json(layout(data), marked) == whole(data, marked)
