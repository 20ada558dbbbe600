"""Both SBOMs of every package, in every format that ships them, built with `splitter build` from
the real wheels: the CycloneDX 1.6 one valid against its schema, the SPDX 2.3 one beside it valid
for spdx-tools and conformant to the NTIA minimum elements (ntia-conformance-checker: supplier,
version and identifiers of every component, no floating package, author, timestamp,
dependency relationships), both saying the same of the same files; rendered reproducibly; and
every shipped file, unpacked with the format's own tools, judged from outside by Debian's
licensecheck: each licence it finds is one the format declares for that file."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import run_splitter
from consumer_tools import conan_executable
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from license_expression import get_spdx_licensing  # type: ignore[import-untyped]
from ntia_conformance_checker.sbom_checker import SbomChecker
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import (
    validate_full_spdx_document,
)
from unpacked import conda_archive, tar_files, unpack

from splitter.model import Plan
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.generated.sbom import Bom, SbomFile, SbomPackage, make_bom, render_sbom
from splitter.targets.generated.spdx import render_spdx

pytestmark = pytest.mark.integration

# the recipe the wheels are split with; SPLITTER_TEST_RECIPE: one under review (as conftest's
# SPLITTER_TEST_WHEEL overrides the wheel)
RECIPE = os.environ.get("SPLITTER_TEST_RECIPE", "")
VALIDATOR = JsonStrictValidator(SchemaVersion.V1_6)
# (wheel fixture, target): every format each platform has (.deb and .rpm are Linux's)
BUILDS = [
    *(("real_wheel", t) for t in ("wheel", "tree", "conda", "deb", "rpm", "conan")),
    *(("real_wheel_aarch64", t) for t in ("wheel", "tree", "conda", "deb", "rpm", "conan")),
    *(("real_wheel_macos", t) for t in ("wheel", "tree", "conda", "conan")),
]
IDS = [f"{w.removeprefix('real_wheel').strip('_') or 'x86_64'}-{t}" for w, t in BUILDS]

Documents = dict[str, bytes]  # where in the output -> the SBOM's bytes


def recipe_args() -> list[str]:
    return ["--recipe", RECIPE] if RECIPE else []


@pytest.fixture(scope="module")
def conan_on_path() -> Iterator[None]:
    binary = conan_executable()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
        yield


@pytest.fixture(scope="module")
def built() -> dict[tuple[str, str], Path]:
    """Each build's output directory, made on first use (output)."""
    return {}


def output(
    request: pytest.FixtureRequest,
    built: dict[tuple[str, str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    wheel: str,
    target: str,
) -> Path:
    if (wheel, target) not in built:
        if target == "conan":
            request.getfixturevalue("conan_on_path")
        out = tmp_path_factory.mktemp(f"{wheel}-{target}") / "out"
        path = request.getfixturevalue(wheel)
        done = run_splitter("build", "-q", "-t", target, "-o", str(out), *recipe_args(), str(path))
        assert done.returncode == 0, done.stderr
        built[wheel, target] = out
    return built[wheel, target]


def documents(out: Path, target: str) -> Documents:
    """Every SBOM the output's packages hold, read from the packages as shipped."""
    found: Documents = {}
    if target == "wheel":
        for wheel in sorted(out.glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if "/sboms/" in name:
                        found[f"{wheel.name}:{name}"] = archive.read(name)
    elif target == "tree":
        for path in sorted(out.rglob("sbom*.json")):
            found[path.relative_to(out).as_posix()] = path.read_bytes()
    elif target == "conan":
        for tgz in sorted(out.glob("*.conan.tgz")):
            found |= tar_sboms(tgz.name, tgz.read_bytes())
    elif target == "conda":
        for package in sorted(out.glob("*/*.conda")):
            for name, data in conda_members(package).items():
                if "sbom" in name:
                    found[f"{package.name}:{name}"] = data
    elif target == "deb":
        for package in sorted(out.glob("*.deb")):
            raw = subprocess.run(
                ["dpkg-deb", "--fsys-tarfile", str(package)], capture_output=True, check=True
            ).stdout
            found |= tar_sboms(package.name, raw)
    elif target == "rpm":
        for package in sorted(out.glob("*.rpm")):
            if not package.name.endswith(".src.rpm"):
                found |= _rpm_sboms(package)
    return found


def _rpm_sboms(package: Path) -> Documents:
    """The SBOMs of one .rpm, its payload unpacked with rpm2cpio and cpio."""
    listed = subprocess.run(
        ["rpm", "-qlp", str(package)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found = {}
    for name in (n for n in listed if "/sbom" in n):
        data = subprocess.run(
            f"rpm2cpio '{package}' | cpio -i --to-stdout --quiet '.{name}'",
            shell=True,
            capture_output=True,
            check=True,
        ).stdout
        found[f"{package.name}:{name}"] = data
    return found


def tar_sboms(label: str, raw: bytes) -> Documents:
    return {f"{label}:{name}": data for name, data in tar_files(raw).items() if "/sbom" in name}


def conda_members(package: Path) -> dict[str, bytes]:
    """Every file of a .conda (its info and pkg archives), by path."""
    return conda_archive(package, "info-") | conda_archive(package, "pkg-")


def pairs(found: Documents) -> list[tuple[str, bytes, bytes]]:
    """(where, CycloneDX bytes, SPDX bytes) of each package."""
    return [
        (name, data, found[name.removesuffix(".cdx.json") + ".spdx.json"])
        for name, data in sorted(found.items())
        if name.endswith(".cdx.json")
    ]


@pytest.fixture(params=BUILDS, ids=IDS)
def sboms(
    request: pytest.FixtureRequest,
    built: dict[tuple[str, str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> list[tuple[str, bytes, bytes]]:
    wheel, target = request.param
    out = output(request, built, tmp_path_factory, wheel, target)
    found = documents(out, target)
    # both, for each package: Conan's are the C++ ones (no export package)
    assert len(found) == 2 * len(pairs(found)) == (4 if target == "conan" else 6), sorted(found)
    return pairs(found)


def test_cyclonedx_validates_with_the_ntia_elements(sboms: list[tuple[str, bytes, bytes]]) -> None:
    for where, cdx, _ in sboms:
        assert VALIDATOR.validate_str(cdx.decode()) is None, where
        document = json.loads(cdx)
        metadata = document["metadata"]
        assert metadata["timestamp"].endswith("Z") and metadata["authors"], where
        assert metadata["authors"][0]["name"].startswith("splitter ")
        libraries = [c for c in document["components"] if c["type"] == "library"]
        assert libraries, where
        for component in libraries:
            assert component["supplier"]["name"] and component["version"], (where, component)
            # a purl where the recipe knows one (metal-cpp, Apple's download, has none)
            assert component["bom-ref"] in (component.get("purl"), f"component:{component['name']}")
        # a .deb or .rpm of the split is the packager's, not Debian's or Fedora's
        purl = metadata["component"]["purl"]
        assert not purl.startswith(("pkg:deb/debian/", "pkg:rpm/fedora/")), purl
        # the package depends on each component and each sibling, and on nothing else
        [edges] = document["dependencies"]
        assert edges["ref"] == metadata["component"]["purl"]
        assert sorted(edges["dependsOn"]) == sorted(c["bom-ref"] for c in libraries)


def test_spdx_validates_and_is_ntia_conformant(
    sboms: list[tuple[str, bytes, bytes]], tmp_path: Path
) -> None:
    logging.getLogger().setLevel(logging.ERROR)  # the checker logs warnings of its own
    for index, (where, _, spdx) in enumerate(sboms):
        path = tmp_path / f"{index}.spdx.json"
        path.write_bytes(spdx)
        assert validate_full_spdx_document(parse_file(str(path))) == [], where
        checker = SbomChecker(str(path))
        assert checker.parsing_errors == [] and checker.validation_messages == [], where
        assert checker.components_without_suppliers == [], where
        assert checker.components_without_versions == [], where
        assert checker.components_without_identifiers == [], where
        assert checker.floating_component_ids == set(), where
        assert checker.compliant, where


def test_both_say_the_same_of_the_same_files(sboms: list[tuple[str, bytes, bytes]]) -> None:
    """One model, two renderings: the SPDX files are the CycloneDX files but the SPDX document
    itself (which the CycloneDX one lists), with the same digests; the same components,
    siblings, versions, time and concluded licences."""
    for where, cdx_bytes, spdx_bytes in sboms:
        cdx, spdx = json.loads(cdx_bytes), json.loads(spdx_bytes)
        files = {
            c["name"]: {h["alg"]: h["content"] for h in c["hashes"]}
            for c in cdx["components"]
            if c["type"] == "file" and c.get("scope") != "excluded"
        }
        spdx_files = {
            f["fileName"].removeprefix("./"): {
                {"SHA1": "SHA-1", "SHA256": "SHA-256"}[c["algorithm"]]: c["checksumValue"]
                for c in f["checksums"]
            }
            for f in spdx["files"]
        }
        [own] = set(files) - set(spdx_files)
        assert own.endswith(".spdx.json") and where.endswith(
            own.rsplit("/", 1)[-1].replace("spdx", "cdx")
        )
        del files[own]
        assert files == spdx_files, where
        libraries = {c["name"]: c["version"] for c in cdx["components"] if c["type"] == "library"}
        packages = {p["name"]: p["versionInfo"] for p in spdx["packages"][1:]}
        assert libraries == packages, where
        assert cdx["metadata"]["timestamp"] == spdx["creationInfo"]["created"], where
        concluded = {
            c["name"]: c["licenses"]
            for c in cdx["components"]
            if c["type"] == "file" and "licenses" in c
        }
        for entry in spdx["files"]:
            name = entry["fileName"].removeprefix("./")
            if entry["licenseConcluded"] != "NOASSERTION":
                [choice] = concluded[name]
                said = choice.get("expression") or choice["license"]["id"]
                assert said == entry["licenseConcluded"], (where, name)


# -- the renderers on one plan: reproducible, time from SOURCE_DATE_EPOCH, excluded files


@pytest.fixture(scope="module")
def plan(real_wheel: Path) -> Plan:
    return make_plan(real_wheel, load_recipe(Path(RECIPE)) if RECIPE else load_recipe())


def bom_of(plan: Plan, package: str = "executorch-runtime") -> Bom:
    spec = plan.package(package)
    files = [
        SbomFile(path=path, sha256=entry.sha256, sha1="0" * 40, source=path)
        for entry in plan.wheel.entries
        for path in (entry.path,)
        if path in spec.files
    ]
    subject = SbomPackage(
        package=package, name=package, version="1.5.1", purl=f"pkg:generic/{package}@1.5.1"
    )
    return make_bom(plan, subject, files, [])


def test_spdx_is_the_same_bytes_for_the_same_split(plan: Plan) -> None:
    first = render_spdx(bom_of(plan))
    assert render_spdx(bom_of(plan)) == first
    other = dataclasses.replace(plan, wheel=dataclasses.replace(plan.wheel, sha256="0" * 64))
    namespace = json.loads(first)["documentNamespace"]
    assert json.loads(render_spdx(bom_of(other)))["documentNamespace"] != namespace


def test_timestamp_is_source_date_epoch_else_the_wheels(
    plan: Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    wheel_time = json.loads(render_sbom(bom_of(plan)))["metadata"]["timestamp"]
    expected = datetime.datetime.fromtimestamp(plan.wheel.timestamp, datetime.UTC)
    assert wheel_time == expected.strftime("%Y-%m-%dT%H:%M:%SZ")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    bom = bom_of(plan)
    assert json.loads(render_sbom(bom))["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    assert json.loads(render_spdx(bom))["creationInfo"]["created"] == "2023-11-14T22:13:20Z"


def test_excluded_files_are_listed_as_excluded(plan: Plan) -> None:
    assert plan.excluded, "the recipe excludes files of the real wheel"
    document = json.loads(render_sbom(bom_of(plan)))
    listed = {c["name"]: c for c in document["components"] if c.get("scope") == "excluded"}
    assert set(listed) == {e.path for e in plan.excluded}
    for excluded in plan.excluded:
        assert listed[excluded.path]["properties"] == [
            {"name": "splitter:excluded-reason", "value": excluded.reason}
        ]


@pytest.fixture(scope="module")
def licensecheck_said(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of what licensecheck found in each distinct content (a file per sha256),
    shared by the builds and the test workers: most files are the same bytes in every
    format and on every platform."""
    shared = tmp_path_factory.getbasetemp().parent / "licensecheck"
    shared.mkdir(exist_ok=True)
    return shared


def licensecheck(files: dict[str, bytes], said: Path, where: Path) -> dict[str, str]:
    """Path -> licensecheck's finding for each file (SPDX short names, the whole file read),
    each distinct content scanned once, under its own name."""
    binary = shutil.which("licensecheck")
    if binary is None:
        pytest.skip("licensecheck missing: apt-get install licensecheck")
    digests = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    new = {digest: path for path, digest in digests.items() if not (said / digest).exists()}
    for digest, path in new.items():
        (where / digest).mkdir(parents=True)
        (where / digest / path.rsplit("/", 1)[-1]).write_bytes(files[path])
    if new:
        result = subprocess.run(
            [
                binary, "--machine", "--shortname-scheme=spdx", "--lines=0", "--recursive",
                "--check=.", str(where),
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        found = dict.fromkeys(new, "")
        for line in result.stdout.splitlines():
            scanned, finding = line.split("\t")[:2]
            found[Path(scanned).relative_to(where).parts[0]] = finding
        for digest, finding in found.items():
            (said / f"{digest}.new{os.getpid()}").write_text(finding)
            os.replace(said / f"{digest}.new{os.getpid()}", said / digest)
    return {path: (said / digest).read_text() for path, digest in digests.items()}


def _documents(path: str) -> bool:
    """Whether a shipped file is a document about licences rather than code under one: a
    licence text, a DEP-5 copyright file, an SBOM (which names every licence found)."""
    name = path.rsplit("/", 1)[-1]
    return (
        path.startswith("licenses/")
        or "/licenses/" in path
        or "/sboms/" in path
        or name.startswith("sbom")
        or (name == "copyright" and "/share/doc/" in f"/{path}")
    )


LICENSING = get_spdx_licensing()


@functools.cache
def _names(declared: str, local: bool) -> frozenset[str]:
    """The licence names a declaration holds: an SPDX expression's keys, or (`local`: a DEP-5
    License line, whose names may be local ones, e.g. Apache-2.0-flatbuffers) its words."""
    if not local:
        return frozenset(str(k) for k in LICENSING.license_keys(LICENSING.parse(declared)))
    words = declared.replace(" with ", " and ").replace(" or ", " and ").split(" and ")
    return frozenset(w.strip() for w in words if w.strip())


@pytest.mark.parametrize(("wheel", "target"), BUILDS, ids=IDS)
def test_licensecheck_finds_no_licence_the_format_does_not_declare(
    wheel: str,
    target: str,
    request: pytest.FixtureRequest,
    built: dict[tuple[str, str], Path],
    tmp_path_factory: pytest.TempPathFactory,
    licensecheck_said: Path,
    tmp_path: Path,
) -> None:
    """Every payload file of every package, unpacked as a user's tools unpack it: each licence
    licensecheck names for it is one its format declares for it (for a .deb, the matching
    DEP-5 paragraph's; a local name such as BSD-3-Clause-XNNPACK counts as BSD-3-Clause)."""
    out = output(request, built, tmp_path_factory, wheel, target)
    problems = []
    checked = 0
    for package in unpack(out, target):
        files = {p: data for p, data in package.files.items() if not _documents(p)}
        found = licensecheck(files, licensecheck_said, tmp_path / package.package)
        for path, finding in found.items():
            checked += 1
            declared = package.declared(path)
            names = _names(declared, local=target == "deb")
            for word in (
                finding.replace(" and/or ", " and ").replace(" or ", " and ").split(" and ")
            ):
                if not word or word == "UNKNOWN" or word in names:
                    continue
                if target == "deb" and any(n.startswith(f"{word}-") for n in names):
                    continue
                problems.append(f"{package.package}: {path}: {word} not in {declared!r}")
    assert checked > (100 if target == "conan" else 3000), checked
    assert not problems, "\n".join(problems)
