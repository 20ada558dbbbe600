"""--target rpm on the real wheels, checked with RPM's own tools: rpmlint, rpm -qp, and
rpm --root installs, then the C++ consumer built from the installed root."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from consumer_tools import build_consumer, cmake_executable, expected_output, run_model

from splitter.errors import MissingToolError, RecipeError
from splitter.model import Plan
from splitter.plan.layout import install_path, make_layout
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.builder import build_output
from splitter.targets.distro.rpm import RpmBuilder
from splitter.targets.generated.files import generated_files

pytestmark = pytest.mark.integration

VR = "1.5.1-1"
NAMES = {
    "executorch-runtime": "executorch",
    "executorch-kernels-quantized": "executorch-kernels-quantized",
    "executorch-export": "python3-executorch",
}
# What this Debian machine's empty rpm database cannot provide: the C and C++ runtime, the
# dynamic loader, torch, Python and the tools scripts name. Any other unmet dependency fails.
SYSTEM = re.compile(
    r"(lib(c|m|dl|pthread|rt|gcc_s|stdc\+\+)\.so\.\d|ld-linux-x86-64\.so\.2|rtld\(GNU_HASH\)"
    r"|lib(torch|torch_cpu|torch_python|c10)\.so\(\)\(64bit\)|\(python3-torch |python\(abi\)"
    r"|/usr/bin/(python3|env|pkg-config)\b)"
)


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: .ci/run installs them (apt-get install)")


@pytest.fixture(scope="module")
def rpms(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("rpmbuild", "rpm")
    out = tmp_path_factory.mktemp("rpm") / "out"
    written = build_output(RpmBuilder(), real_plan, out).written
    assert sorted(p.name for p in written if p.suffix == ".rpm") == sorted(
        f"{name}-{VR}.x86_64.rpm" for name in NAMES.values()
    )
    assert (out / "SPECS" / "executorch.x86_64.spec").is_file()
    return out


def rpm_of(rpms: Path, package: str) -> Path:
    return rpms / f"{NAMES[package]}-{VR}.x86_64.rpm"


def query(*args: str) -> list[str]:
    result = subprocess.run(["rpm", *args], capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def rpm_root(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", "/var/lib/rpm", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def installed(rpms: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rpmroot") / "root"
    root.mkdir()
    assert rpm_root(root, "--initdb").returncode == 0
    files = [str(rpm_of(rpms, p)) for p in NAMES]
    test = rpm_root(root, "-i", "--test", *files)
    unmet = [line.strip() for line in test.stderr.splitlines() if " is needed by " in line]
    assert unmet, test.stderr  # glibc at least: the empty database cannot know it
    assert [line for line in unmet if not SYSTEM.match(line)] == []
    # so --nodeps only skips what the empty database cannot know (checked just above)
    result = rpm_root(root, "-i", "--nodeps", *files)
    assert result.returncode == 0, result.stderr
    return root


def test_rpmlint_no_errors_and_every_filter_has_a_reason(rpms: Path) -> None:
    _need("rpmlint")
    rc = rpms / "SPECS" / "executorch.x86_64.rpmlintrc"
    result = subprocess.run(
        ["rpmlint", "-r", str(rc), *sorted(map(str, rpms.glob("*.rpm")))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert re.search(r"\b0 errors,", result.stdout), result.stdout[-3000:]
    assert [line for line in result.stdout.splitlines() if ": E: " in line] == []
    lines = rc.read_text().splitlines()
    for before, line in itertools.pairwise(lines):
        if line.startswith("addFilter("):
            assert before.startswith("# ") and len(before) > 20, line


def test_provides_and_requires(rpms: Path) -> None:
    provides = query("-qp", "--provides", str(rpm_of(rpms, "executorch-runtime")))
    assert "libexecutorch.so()(64bit)" in provides
    assert f"executorch = {VR}" in provides
    requires = query("-qp", "--requires", str(rpm_of(rpms, "executorch-kernels-quantized")))
    assert "libexecutorch.so()(64bit)" in requires  # rpm's own ELF generator
    assert f"executorch = {VR}" in requires  # the sibling at the exact version-release
    export = query("-qp", "--requires", str(rpm_of(rpms, "executorch-export")))
    assert "(python3-torch >= 2.13 with python3-torch < 2.14)" in export  # [externals.torch]
    assert f"executorch-kernels-quantized = {VR}" in export
    for package in NAMES:
        conflicts = query("-qp", "--conflicts", str(rpm_of(rpms, package)))
        assert conflicts == []


def expected_files(plan: Plan, package: str) -> set[str]:
    """The plan's files for one package under the RPM layout, plus licence and record."""
    layout = dataclasses.replace(
        make_layout(plan.wheel, "/usr", "lib64", "include", "lib64/python3.11/site-packages"),
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
    files.add(f"/usr/share/licenses/{name}/LICENSE")
    files.add(f"/usr/share/doc/{name}/splitter-process-exclusive.json")
    return files


def test_rpm_lists_the_plan(installed: Path, real_plan: Plan) -> None:
    for package, name in NAMES.items():
        listed = rpm_root(installed, "-ql", name)
        assert listed.returncode == 0, listed.stderr
        files = {p for p in listed.stdout.splitlines() if not (installed / p.lstrip("/")).is_dir()}
        assert files == expected_files(real_plan, package), name
    owner = rpm_root(installed, "-qf", "/usr/lib64/libexecutorch_kernels_quantized.so")
    assert owner.stdout.strip() == f"executorch-kernels-quantized-{VR}.x86_64"
    verify = rpm_root(installed, "-V", "--nodeps", *NAMES.values())
    assert verify.returncode == 0, verify.stdout + verify.stderr  # sizes, digests, modes


def test_two_builds_are_byte_identical(rpms: Path, real_plan: Plan, tmp_path: Path) -> None:
    again = build_output(RpmBuilder(), real_plan, tmp_path / "again").written
    for path in again:
        relative = path.relative_to(tmp_path / "again")
        assert path.read_bytes() == (rpms / relative).read_bytes(), relative


def test_aarch64_reproducible(real_wheel_aarch64: Path, tmp_path: Path) -> None:
    plan = make_plan(real_wheel_aarch64, load_recipe())
    first = build_output(RpmBuilder(), plan, tmp_path / "a").written
    second = build_output(RpmBuilder(), plan, tmp_path / "b").written
    assert [p.name for p in first] == [p.name for p in second]
    for one, two in zip(first, second, strict=True):
        assert one.read_bytes() == two.read_bytes(), one.name
    runtime = tmp_path / "a" / f"executorch-{VR}.aarch64.rpm"
    assert query("-qp", "--qf", "%{ARCH}", str(runtime)) == ["aarch64"]
    assert "libexecutorch.so()(64bit)" in query("-qp", "--provides", str(runtime))
    assert "/usr/lib64/libexecutorch.so" in query("-qpl", str(runtime))
    rc = tmp_path / "a" / "SPECS" / "executorch.aarch64.rpmlintrc"
    lint = subprocess.run(
        ["rpmlint", "-r", str(rc), *(str(p) for p in first if p.suffix == ".rpm")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert [line for line in lint.splitlines() if ": E: " in line] == [], lint[-2000:]


@pytest.mark.parametrize("cmake_label", ["3.24", "3.28", "4.x"], ids=lambda v: f"cmake-{v}")
def test_consumer_from_installed_root(installed: Path, tmp_path: Path, cmake_label: str) -> None:
    cmake = cmake_executable(cmake_label)
    # CMake skips lib64 in CMAKE_PREFIX_PATH searches on a Debian host (its Linux platform
    # file reads /etc/debian_version), as it searches it on Fedora: name the config directory.
    config_dir = installed / "usr" / "lib64" / "cmake" / "executorch"
    result = build_consumer(cmake, tmp_path / "q", config_dir=config_dir, quantized=True)
    assert result.returncode == 0, result.output
    run = run_model(result.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()


def test_recipe_without_rpm_table_is_refused(real_plan: Plan, tmp_path: Path) -> None:
    plan = dataclasses.replace(real_plan, recipe=dataclasses.replace(real_plan.recipe, rpm=None))
    with pytest.raises(RecipeError, match=r"no \[rpm\] table"):
        build_output(RpmBuilder(), plan, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_missing_rpmbuild_names_the_debian_package(
    real_plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no rpmbuild on PATH
    with pytest.raises(
        MissingToolError, match=r"rpmbuild is not installed.*\n.*apt-get install rpm"
    ):
        build_output(RpmBuilder(), real_plan, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_verify_installs_the_rpms_and_runs_the_checks(rpms: Path) -> None:
    from splitter.verify.run import Status, verify

    checks = verify(
        rpms, [], [cmake_executable("3.28")], 2, ("co-load", "cmake", "relocation", "depends")
    )
    assert [c for c in checks if c.status is Status.FAIL] == []
    by_check = {c.check: c for c in checks}
    assert by_check["model (C++)"].status is Status.PASS
    assert by_check["relocation"].status is Status.PASS
    assert by_check["missing component"].status is Status.PASS
    coload = [c for c in checks if c.check == "co-load" and c.status is Status.PASS]
    assert any("libexecutorch_kernels_quantized.so" in c.subject for c in coload)
    # rpm's own unmet dependencies: only what a scratch root cannot hold (glibc, torch)
    depends = by_check["depends"]
    assert depends.status is Status.PASS and "libc.so.6" in depends.detail, depends


def test_verify_fails_an_unmet_dependency_inside_the_split(rpms: Path, tmp_path: Path) -> None:
    """The export's package alone: rpm reports its dependencies on the two other packages
    of the split unmet, and the "depends" check fails naming them."""
    from splitter.verify.install import install
    from splitter.verify.run import Status, depends_check

    check = depends_check(install(rpms, tmp_path / "x", ("executorch-export",)))
    assert check.status is Status.FAIL
    assert "executorch" in check.detail and "kernels-quantized" in check.detail, check
