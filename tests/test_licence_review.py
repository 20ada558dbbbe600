"""Licences concluded file by file (issue 50), as a licence reviewer checks them: every shipped
file has a concluded licence with its scanner evidence; a file carrying a licence nothing
reviewed covers stops `plan` and `build` (exit 15) naming it, until the recipe concludes or
excludes it; an excluded file is in no package and listed as excluded; the recipe's shipped
scan is what ScanCode itself reports for those files. licensecheck, run from outside over
every format's unpacked packages, is test_spdx's."""

from __future__ import annotations

import json
import os
import random
import shutil
import zipfile
from pathlib import Path

import pytest
from builders import record_hash, run_splitter
from consumer_tools import locked_venv
from license_expression import get_spdx_licensing  # type: ignore[import-untyped]

from splitter.input.scan import read_scan, scan_scancode
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.recipethird import terms

pytestmark = pytest.mark.integration
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"
GPL_FILE = "executorch/backends/example/third-party/tool/filter.py"
GPL_TEXT = b"""#!/usr/bin/env python3
# Copyright (C) 2019 Jane Hacker <jane@example.org>
#
# This program is free software; you can redistribute it and/or modify
# it under the terms of the GNU General Public License as published by
# the Free Software Foundation; either version 2 of the License, or
# (at your option) any later version.
#
# This program is distributed in the hope that it will be useful,
# but WITHOUT ANY WARRANTY; without even the implied warranty of
# MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
# GNU General Public License for more details.
print("filter")
"""


@pytest.fixture(scope="module")
def scanner(monkeypatch_module: pytest.MonkeyPatch) -> Path:
    """ScanCode from ci/locks/scancode.lock, first on PATH for this module's builds."""
    bin_dir = locked_venv("scancode")
    monkeypatch_module.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "scancode"


@pytest.fixture(scope="module")
def monkeypatch_module() -> pytest.MonkeyPatch:
    patch = pytest.MonkeyPatch()
    yield patch  # type: ignore[misc]
    patch.undo()


def with_member(source: Path, target_dir: Path, name: str, data: bytes) -> Path:
    """A copy of the wheel `source` with one more member, RECORD kept consistent."""
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / source.name
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename == record:
                rows = src.read(info).decode()
                rows += f"{name},{record_hash(data)},{len(data)}\n"
                dst.writestr(info, rows.encode())
            else:
                dst.writestr(info, src.read(info))
        dst.writestr(name, data)
    return target


def test_every_shipped_file_has_a_concluded_licence(real_wheel: Path) -> None:
    plan = make_plan(real_wheel, load_recipe())
    concluded = {f.path: f for f in plan.licences}
    shipped = {p for package in plan.packages for p in package.files}
    assert set(concluded) == shipped
    excluded = {e.path for e in plan.excluded}
    assert not excluded & shipped
    # the GPL-3.0-only script nlohmann json vendors is dropped, with the recipe's reason
    gpl = "executorch/extension/llm/tokenizers/third-party/json/tests/thirdparty/imapdl/filterbr.py"
    assert gpl in excluded
    assert any("GPL-3.0" in d for e in plan.excluded if e.path == gpl for d in e.detected)
    licensing = get_spdx_licensing()
    for package in plan.packages:
        expression = licensing.parse(package.license, validate=True)
        names = {str(k) for k in licensing.license_keys(expression)}
        for each in (f for f in plan.licences if f.package == package.name):
            assert each.covered, each
            # what a file is concluded under is in its package's expression
            for term in terms(each.concluded):
                assert term.split(" WITH ")[0] in names, (package.name, each.path, term)
    # pybind11 is compiled into every extension module with hidden visibility
    pybind = {f.path for f in plan.third_party if f.component == "pybind11"}
    assert "executorch/extension/pybindings/_C.cpython-311-x86_64-linux-gnu.so" in pybind
    assert "pybind11" in plan.package("executorch-export").third_party


def test_plan_json_lists_the_excluded_files(real_wheel: Path) -> None:
    done = run_splitter("plan", "--json", str(real_wheel))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    excluded = {e["path"]: e for e in document["excluded"]}
    assert len(excluded) > 300
    assert all(e["reason"] for e in excluded.values())
    files = {f for p in document["packages"] for f in p.get("files", ())}
    assert not files & set(excluded)


def test_a_new_gpl_file_stops_plan_and_build_until_the_recipe_excludes_it(
    real_wheel: Path, tmp_path: Path
) -> None:
    """The new file is not in the recipe's scan: the plan scans it (licensecheck)."""
    doctored = with_member(real_wheel, tmp_path / "wheel", GPL_FILE, GPL_TEXT)
    for command in (["plan"], ["build", "--target", "tree", "-o", str(tmp_path / "out")]):
        done = run_splitter(*command, str(doctored))
        assert done.returncode == 15, done.stderr
        assert GPL_FILE in done.stderr
        assert "GPL-2.0" in done.stderr
        assert "[[license_conclusion]]" in done.stderr and "[[exclude]]" in done.stderr
        assert not (tmp_path / "out").exists()
    recipe = tmp_path / "recipe" / "executorch.toml"
    shutil.copytree(RECIPE.parent, recipe.parent)
    # the worksheet names the file; --draft appends an entry a plan refuses until reviewed
    done = run_splitter("licences", "worksheet", "--json", "--recipe", str(recipe), str(doctored))
    assert done.returncode == 0, done.stderr
    (question,) = json.loads(done.stdout)["questions"]
    assert [f["path"] for f in question["files"]] == [GPL_FILE]
    assert question["detected"] == ["GPL-2.0-or-later"]
    before = recipe.read_text()
    done = run_splitter(
        "licences", "worksheet", "-q", "--draft", "--recipe", str(recipe), str(doctored)
    )
    assert done.returncode == 0, done.stderr
    after = recipe.read_text()
    assert after.startswith(before)  # appended, the rest kept byte for byte
    assert f'paths = ["{GPL_FILE}"]' in after[len(before) :]
    done = run_splitter("plan", "--recipe", str(recipe), str(doctored))
    assert done.returncode == 4 and "a draft entry nobody has reviewed" in done.stderr
    recipe.write_text(before)
    with recipe.open("a") as text:
        text.write(
            '\n[[exclude]]\npaths = ["executorch/backends/example/third-party/*"]\n'
            'reason = "a test helper script no package needs"\n'
        )
    done = run_splitter("plan", "--json", "--recipe", str(recipe), str(doctored))
    assert done.returncode == 0, done.stderr
    excluded = {e["path"]: e for e in json.loads(done.stdout)["excluded"]}
    assert excluded[GPL_FILE]["reason"] == "a test helper script no package needs"
    out = tmp_path / "tree"
    done = run_splitter(
        "build", "-t", "tree", "--recipe", str(recipe), str(doctored), "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert not list(out.rglob("filter.py"))


def test_the_shipped_scan_is_what_scancode_reports(real_wheel: Path, scanner: Path) -> None:
    """Every file with a finding and a sample of the others, scanned again by ScanCode."""
    recipe = load_recipe()
    assert recipe.scan_file is not None
    shipped = read_scan(recipe.scan_file)
    files = {}
    with zipfile.ZipFile(real_wheel) as wheel:
        plan = make_plan(real_wheel, recipe)
        digests = {e.path: e.sha256 for e in plan.wheel.entries}
        found = [p for p, d in digests.items() if d in shipped and shipped[d].licenses]
        quiet = sorted(p for p, d in digests.items() if d in shipped and not shipped[d].licenses)
        sample = sorted(random.Random(50).sample(found, min(40, len(found))))
        sample += random.Random(51).sample(quiet, 20)
        for path in sample:
            files[digests[path]] = (path, wheel.read(path))
    again = scan_scancode(files)
    for digest, (path, _) in files.items():
        assert again[digest].licenses == shipped[digest].licenses, path
        assert again[digest].copyrights == shipped[digest].copyrights, path
        assert shipped[digest].scanner == again[digest].scanner, path
