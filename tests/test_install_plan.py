"""The install plan (splitter.targets.install) and its writers: what apply writes and what the
replay script (splitter.targets.replay) installs from the same list are the same bytes and
modes; the plan holds every owned file once, sorted, with its source, mode and search path."""

from __future__ import annotations

import os
import stat
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import pytest

from splitter.errors import UsageError
from splitter.model import Plan, Rpath
from splitter.plan.layout import UPSTREAM_CMAKE, install_path, make_layout
from splitter.targets.install import (
    EXECUTABLE,
    REGULAR,
    WHEEL_CMAKE_DIRS,
    make_install_plan,
    wheel_install_plan,
)
from splitter.targets.replay import install_split, render_replay
from splitter.targets.stage import apply

pytestmark = pytest.mark.integration


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `root`: relative path -> (bytes, permission bits)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in root.rglob("*")
        if p.is_file()
    }


def test_the_plan_lists_each_owned_file_once_sorted(real_plan: Plan) -> None:
    layout = make_layout(real_plan.wheel, "/usr", "lib/x86_64-linux-gnu", "include", None)
    install = make_install_plan(real_plan, layout, Rpath.STRIP)
    assert install.packages == tuple(p.name for p in real_plan.packages)
    for name in install.packages:
        paths = [f.path for f in install.of(name)]
        assert paths == sorted(paths), name
    assert len({f.path for f in install.files}) == len(install.files)
    expected = {
        dest
        for path in real_plan.owners
        if (dest := install_path(path, layout, real_plan.wheel.dist_info)) is not None
    }
    copied = {f.path for f in install.files if f.source}
    assert copied == expected
    generated = [f for f in install.files if not f.source]
    assert generated and all(f.data is not None for f in generated)
    binaries = {f.path: f for f in install.files if f.runpath is not None}
    assert len(binaries) == len(real_plan.binaries)
    assert all(f.mode == EXECUTABLE and f.rpaths is None for f in binaries.values())
    # strip: the libraries in the system libdir need no RUNPATH to find each other
    runtime = binaries["lib/x86_64-linux-gnu/libexecutorch.so"]
    assert runtime.runpath == ()
    debian = make_install_plan(real_plan, layout, Rpath.STRIP, library_mode=REGULAR)
    modes = {f.path: f.mode for f in debian.files if f.runpath is not None}
    assert modes == {p: REGULAR if ".so" in p.rsplit("/", 1)[-1] else EXECUTABLE for p in binaries}


def test_strip_outside_the_system_libdir_is_refused(real_plan: Plan) -> None:
    layout = make_layout(real_plan.wheel, "/opt/et", "lib", "include", None)
    with pytest.raises(UsageError, match="--rpath strip needs a libdir"):
        make_install_plan(real_plan, layout, Rpath.STRIP)


def test_the_wheel_plan_keeps_the_wheel_paths(real_plan: Plan) -> None:
    install = wheel_install_plan(real_plan, real_plan.packages)
    dist_info = f"{real_plan.wheel.dist_info}/"
    copied = {f.path for f in install.files if f.source}
    assert all(f.source == f.path for f in install.files if f.source)
    assert copied == {p for p in real_plan.owners if not p.startswith((*UPSTREAM_CMAKE, dist_info))}
    assert all(f.runpath is None for f in install.files)
    made = {f.path.rsplit("/", 1)[0] for f in install.files if not f.source}
    assert made == set(WHEEL_CMAKE_DIRS)


def test_the_replay_script_installs_what_apply_writes(
    real_plan: Plan, real_wheel: Path, tmp_path: Path
) -> None:
    """One install plan, two writers: apply (splitter's staging) and install-split run by sh
    from the list and generated files, as a source package's build runs it."""
    layout = make_layout(real_plan.wheel, "/usr", "lib/x86_64-linux-gnu", "include", None)
    install = make_install_plan(real_plan, layout, Rpath.STRIP, library_mode=REGULAR)
    applied = tmp_path / "applied"
    apply(real_plan, install, lambda name: applied / "usr")
    replay = render_replay(install.files, "usr")
    (tmp_path / "install.list").write_text(replay.list)
    generated = tmp_path / "generated"
    for path, data, _ in replay.generated:
        (generated / path).parent.mkdir(parents=True, exist_ok=True)
        (generated / path).write_bytes(data)
    (tmp_path / "install-split").write_text(install_split())
    wheel = tmp_path / "wheel"
    with zipfile.ZipFile(real_wheel) as archive:
        archive.extractall(wheel)
    environment = {**os.environ, "PATH": f"{sysconfig.get_path('scripts')}:{os.environ['PATH']}"}
    replayed = tmp_path / "replayed"
    result = subprocess.run(
        ["sh", "install-split", str(wheel), "install.list", str(generated), str(replayed)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    mine, theirs = tree(applied), tree(replayed)
    assert sorted(theirs) == sorted(mine)
    assert [p for p in mine if theirs[p] != mine[p]] == []
