"""Downloading the input wheel: real pip, from a local find-links directory (no network)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import make_wheel
from packaging.tags import sys_tags

from splitter.input.fetch import resolve_input
from splitter.plan.recipe import load_recipe

RESOLVE = (
    "import sys\n"
    "from splitter.input.fetch import resolve_input\n"
    "from splitter.plan.recipe import load_recipe\n"
    "print(resolve_input(sys.argv[1], load_recipe()))\n"
)


def pip_env(links: Path, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "SPLITTER_CACHE": str(cache),
    }


def resolve(spec: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RESOLVE, spec],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_builds_started_at_once_share_one_complete_download(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    # Large enough that a reader racing a plain copy would see it half-written.
    source = make_wheel(
        links, {"executorch/blob.bin": os.urandom(8 << 20)}, version="9.9.9", tag="py3-none-any"
    )
    cache = tmp_path / "cache"
    env = pip_env(links, cache)
    processes = [resolve("executorch==9.9.9", env) for _ in range(3)]
    results = [(p.communicate(), p.returncode) for p in processes]
    assert [code for _, code in results] == [0, 0, 0], [err for (_, err), _ in results]
    paths = {out.strip() for (out, _), _ in results}
    assert paths == {str(cache / "wheels" / source.name)}
    assert (cache / "wheels" / source.name).read_bytes() == source.read_bytes()
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == [".download.lock", source.name]


def test_failed_download_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    cache = tmp_path / "cache"
    result = subprocess.run(
        [sys.executable, "-m", "splitter", "plan", "executorch==9.9.9"],
        env=pip_env(links, cache),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "pip could not download executorch==9.9.9" in result.stderr
    assert "Traceback" not in result.stderr
    assert [p.name for p in (cache / "wheels").iterdir()] == [".download.lock"]


def cached_names(cache: Path, names: list[str]) -> None:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True)
    for name in names:
        (wheels / name).write_bytes(b"")  # the cache lookup reads file names only


def test_cache_picks_the_newest_version_not_the_greatest_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPLITTER_CACHE", str(tmp_path))
    cached_names(
        tmp_path,
        [
            "executorch-1.9.0-py3-none-any.whl",
            "executorch-1.10.0-py3-none-any.whl",
            "executorch-1.11.0-cp27-cp27m-win32.whl",  # newer, but not installable here
        ],
    )
    found = resolve_input("executorch>=1.5", load_recipe())
    assert found == tmp_path / "wheels" / "executorch-1.10.0-py3-none-any.whl"


def test_cache_prefers_the_best_ranked_tag_among_equal_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPLITTER_CACHE", str(tmp_path))
    best = next(iter(sys_tags()))
    generic = "executorch-1.10.0-py3-none-any.whl"
    specific = f"executorch-1.10.0-{best}.whl"
    cached_names(tmp_path, [generic, specific])
    found = resolve_input("executorch==1.10.0", load_recipe())
    assert found == tmp_path / "wheels" / specific
