"""What a distribution reviewer checks of the licences (issue 40): every package of the wheel,
tree and conda targets carries the licence text of every third-party component found in its
files (byte for byte as recipes/licenses keeps it) and none other, its format's licence field
is an SPDX expression (parsed by license-expression, not a regular expression) naming exactly
those licences, and its CycloneDX SBOM validates against the 1.6 schema and lists exactly the
package's files with their sha256, as the package holds them."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from builders import run_splitter
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from licence_texts import expected_texts
from license_expression import get_spdx_licensing  # type: ignore[import-untyped]

from splitter.model import Plan
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.verify.install import install
from splitter.verify.rows import Status
from splitter.verify.sbom import sbom_checks

pytestmark = pytest.mark.integration
LICENSES = Path(__file__).resolve().parents[1] / "recipes" / "licenses"
VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)
PACKAGES = ("executorch-runtime", "executorch-kernels-quantized", "executorch-export")


@pytest.fixture(scope="module")
def plan(real_wheel: Path) -> Plan:
    return make_plan(real_wheel, load_recipe())


@pytest.fixture(scope="module")
def built(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for target in ("wheel", "tree", "conda"):
        directory = tmp_path_factory.mktemp(target) / "out"
        done = run_splitter("build", "--target", target, str(real_wheel), "-o", str(directory))
        assert done.returncode == 0, done.stderr
        out[target] = directory
    return out


def check_expression(plan: Plan, package: str, expression: str) -> None:
    """Parses as SPDX (strict) and names exactly the licences of the project and of the
    concluded licences of the package's files (each licence and exception once)."""
    licensing = get_spdx_licensing()
    parsed = licensing.parse(expression, validate=True, strict=True)
    wanted = {plan.wheel.license} | {f.concluded for f in plan.licences if f.package == package}
    keys = set(licensing.license_keys(parsed))
    assert keys == {k for w in wanted for k in licensing.license_keys(licensing.parse(w))}, (
        package,
        expression,
    )


def check_sbom(text: bytes, files: dict[str, bytes], package: str, plan: Plan) -> None:
    """Valid CycloneDX 1.6; its file components are exactly `files` with their sha256; its
    third-party components are the package's."""
    assert VALIDATOR.validate_str(text.decode()) is None
    document = json.loads(text)
    listed = {
        c["name"]: c["hashes"][0]["content"]
        for c in document["components"]
        if c["type"] == "file" and c.get("scope") != "excluded"  # wheel files not shipped
    }
    assert listed == {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    libraries = {c["name"] for c in document["components"] if c["bom-ref"].startswith("component:")}
    assert libraries == {f.component for f in plan.third_party if f.package == package}
    assert document["metadata"]["component"]["licenses"] == [
        {"expression": plan.package(package).license}
    ]


def test_wheels(plan: Plan, built: dict[str, Path]) -> None:
    """Each wheel: License-Expression and License-File (Metadata 2.4), the texts in
    .dist-info/licenses/, the SBOM in .dist-info/sboms/ listing every other member."""
    for package in plan.packages:
        (path,) = built["wheel"].glob(f"{package.name.replace('-', '_')}-*.whl")
        with zipfile.ZipFile(path) as wheel:
            members = {n: wheel.read(n) for n in wheel.namelist()}
        (meta,) = [n for n in members if n.endswith(".dist-info/METADATA")]
        dist_info = meta.rsplit("/", 1)[0]
        headers = members[meta].decode().split("\n\n", 1)[0].splitlines()
        (expression,) = [
            h.split(": ", 1)[1] for h in headers if h.startswith("License-Expression:")
        ]
        check_expression(plan, package.name, expression)
        texts = {
            n.removeprefix(f"{dist_info}/licenses/"): data
            for n, data in members.items()
            if n.startswith(f"{dist_info}/licenses/")
        }
        assert texts == expected_texts(plan, package.name)
        declared = {h.split(": ", 1)[1] for h in headers if h.startswith("License-File:")}
        assert declared == set(texts)
        sbom = f"{dist_info}/sboms/sbom.cdx.json"
        others = {n: d for n, d in members.items() if n not in (sbom, f"{dist_info}/RECORD")}
        check_sbom(members[sbom], others, package.name, plan)


def test_trees(plan: Plan, built: dict[str, Path]) -> None:
    """Each tree: its .json's licence, share/licenses/<package>/, the SBOM listing every file."""
    for package in plan.packages:
        record = json.loads((built["tree"] / f"{package.name}.json").read_text())
        check_expression(plan, package.name, record["license"])
        root = built["tree"] / package.name / "usr" / "local"
        licences = root / "share" / "licenses" / package.name
        texts = {p.name: p.read_bytes() for p in licences.iterdir()}
        assert texts == expected_texts(plan, package.name)
        sbom = root / "share" / "doc" / package.name / "sbom.cdx.json"
        files = {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p != sbom
        }
        check_sbom(sbom.read_bytes(), files, package.name, plan)


def test_conda_packages(plan: Plan, built: dict[str, Path]) -> None:
    """Each .conda: about.json's license, info/licenses/, the SBOM listing every file of the
    pkg- archive (as packed: conda's prefix replacement happens at install time)."""
    check_conda(plan, built["conda"])


@pytest.mark.parametrize("fixture", ["real_wheel_aarch64", "real_wheel_macos"])
def test_other_platforms_conda_packages(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The aarch64 and macOS arm64 wheels carry more (KleidiAI; MLX and metal-cpp): their
    packages say so, each with the texts of what it holds."""
    wheel: Path = request.getfixturevalue(fixture)
    other = make_plan(wheel, load_recipe())
    held = {f.component for f in other.third_party}
    assert "KleidiAI" in held
    if fixture == "real_wheel_macos":
        assert {"MLX", "metal-cpp"} <= held
    out = tmp_path / "out"
    done = run_splitter("build", "--target", "conda", str(wheel), "-o", str(out))
    assert done.returncode == 0, done.stderr
    check_conda(other, out)


def check_conda(plan: Plan, out: Path) -> None:
    """Every package of a conda build of `plan`: expression, texts and SBOM (see above)."""
    for package in plan.packages:
        (path,) = (out / plan.platform.conda_subdir).glob(f"{package.name}-*.conda")
        archives = {}
        with zipfile.ZipFile(path) as conda:
            for name in conda.namelist():
                if name.endswith(".tar.zst"):
                    data = zstandard.ZstdDecompressor().decompressobj().decompress(conda.read(name))
                    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                        archives[name[:4]] = {
                            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                            for m in tar.getmembers()
                            if m.isfile()
                        }
        about = json.loads(archives["info"]["info/about.json"])
        check_expression(plan, package.name, about["license"])
        texts = {
            n.removeprefix("info/licenses/"): d
            for n, d in archives["info"].items()
            if n.startswith("info/licenses/")
        }
        assert texts == expected_texts(plan, package.name)
        sbom = f"share/doc/{package.name}/sbom.cdx.json"
        files = {n: d for n, d in archives["pkg-"].items() if n != sbom}
        check_sbom(archives["pkg-"][sbom], files, package.name, plan)


def test_verify_checks_each_sbom_against_the_installed_files(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """verify's sbom rows: one per package, passing on the tree as built; a listed file whose
    bytes changed after install, or that is gone, fails its package's row, named."""
    installed = install(built["tree"], tmp_path / "root")
    rows = sbom_checks(installed)
    assert [r.subject.rsplit("/", 2)[-2] for r in rows] == sorted(PACKAGES)
    assert all(r.status is Status.PASS for r in rows), rows
    quantized = next(installed.root.rglob("libexecutorch_kernels_quantized.so"))
    quantized.write_bytes(quantized.read_bytes() + b"\0")
    header = next(installed.root.rglob("evalue.h"))
    header.unlink()
    failed = {r.subject.rsplit("/", 2)[-2]: r.detail for r in sbom_checks(installed)}
    assert (
        "lib/libexecutorch_kernels_quantized.so: sha256 differs"
        in failed["executorch-kernels-quantized"]
    )
    assert (
        "include/executorch/runtime/core/evalue.h: listed, not installed"
        in failed["executorch-runtime"]
    )
    statuses = {r.subject.rsplit("/", 2)[-2]: r.status for r in sbom_checks(installed)}
    assert statuses == {
        "executorch-export": Status.PASS,
        "executorch-kernels-quantized": Status.FAIL,
        "executorch-runtime": Status.FAIL,
    }
