"""The conda target on the real wheel: real .conda files, a local channel, installs that work."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from conda_tools import install, torch_python
from consumer_tools import (
    CMAKE_LABELS,
    MODEL,
    RUN_PTE,
    build_consumer,
    build_meson,
    cmake_executable,
    expected_output,
    meson_runs_the_model,
    run_model,
    upstream_route,
)
from rowcounts import full_verify_matches, listing

from splitter.binaries.resolve import find_unresolved
from splitter.errors import MissingToolError
from splitter.model import Plan
from splitter.plan.layout import make_layout
from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.plan.report import exclusivity_record
from splitter.targets.conda.assemble import json_bytes
from splitter.targets.conda.build import build_conda
from splitter.targets.conda.channel import index_channel
from splitter.targets.conda.placeholder import CONDA_PLACEHOLDER
from splitter.targets.tree import build_tree
from splitter.verify.install import conda_info_file

pytestmark = pytest.mark.integration

RUNTIME, QUANTIZED, EXPORT = (
    "executorch-runtime",
    "executorch-kernels-quantized",
    "executorch-export",
)
SITE = "lib/python3.11/site-packages"
PKGCONFIG = "lib/pkgconfig"


@pytest.fixture(scope="module")
def channel(real_plan: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conda") / "channel"
    before = dict(os.environ)
    build_conda(real_plan, out)
    # The build packages in its own process too: TMPDIR pointing into its removed scratch
    # broke every later subprocess (rattler-build: "Could not open or create ... file").
    assert dict(os.environ) == before, "build_conda changed the calling process's environment"
    return out


def packages(channel: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((channel / "linux-64").glob("*.conda")):
        name = path.name.rsplit("-", 2)[0]
        found[name] = path
    return found


@pytest.fixture(scope="module")
def prefixes(channel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prefixes")
    found = packages(channel)
    sets = {
        "runtime": [RUNTIME],
        "runtime+quantized": [RUNTIME, QUANTIZED],
        "all": [RUNTIME, QUANTIZED, EXPORT],
    }
    result = {}
    for label, names in sets.items():
        prefix = root / label.replace("+", "_")
        install(prefix, [found[n] for n in names])
        result[label] = prefix
    return result


def prefix_files(prefix: Path) -> set[str]:
    return {
        str(p.relative_to(prefix))
        for p in prefix.rglob("*")
        if p.is_file() and not str(p.relative_to(prefix)).startswith(("conda-meta", "CACHEDIR"))
    }


def test_channel_layout(channel: Path) -> None:
    assert sorted(packages(channel)) == [EXPORT, QUANTIZED, RUNTIME]
    repodata = json.loads((channel / "linux-64" / "repodata.json").read_text())
    assert len(repodata["packages.conda"]) == 3
    assert not (channel / ".tmp").exists()


def test_repodata_is_what_index_fs_writes(channel: Path, tmp_path: Path) -> None:
    """The workers' records (channel_record) against py-rattler's own indexer over the same
    packages: the same repodata.json, byte for byte."""
    copy = tmp_path / "channel"
    (copy / "linux-64").mkdir(parents=True)
    for path in packages(channel).values():
        shutil.copy2(path, copy / "linux-64" / path.name)
    index_channel(copy, "linux-64")  # no records: index_fs in a subprocess
    for name in ("linux-64/repodata.json", "noarch/repodata.json"):
        assert json.loads((copy / name).read_text()) == json.loads((channel / name).read_text())
        assert (copy / name).read_bytes() == (channel / name).read_bytes(), name
    quantized = json.loads((copy / "linux-64" / "repodata.json").read_text())["packages.conda"]
    assert any("run_exports" in record for record in quantized.values())


def test_reproducible(real_plan: Plan, channel: Path, tmp_path: Path) -> None:
    """Same bytes under umask 077, elsewhere, from a plan made again and with one packaging
    process (the fixture's channel packages with two)."""
    os.umask(0o077)
    try:
        other = tmp_path / "elsewhere" / "again"
        plan = make_plan(real_plan.wheel.path, real_plan.recipe)
        build_conda(plan, other, jobs=1)
    finally:
        os.umask(0o022)
    for name in ("linux-64/repodata.json", "noarch/repodata.json"):
        assert (channel / name).read_bytes() == (other / name).read_bytes(), name
    for name, path in packages(channel).items():
        again = packages(other)[name]
        assert (
            hashlib.sha256(path.read_bytes()).digest()
            == hashlib.sha256(again.read_bytes()).digest()
        ), name


def test_metadata(real_plan: Plan, channel: Path) -> None:
    found = packages(channel)
    index = {n: json.loads(conda_info_file(p, "info/index.json")) for n, p in found.items()}
    assert "__glibc >=2.28" in index[RUNTIME]["depends"]
    assert "libstdcxx >=13" in index[RUNTIME]["depends"]
    export = index[EXPORT]["depends"]
    assert f"{RUNTIME} ==1.5.1 {index[RUNTIME]['build']}" in export
    assert f"{QUANTIZED} ==1.5.1 {index[QUANTIZED]['build']}" in export
    assert "pytorch >=2.13,<2.14" in export
    assert "python_abi 3.11.* *_cp311" in export
    assert "python-flatbuffers" in export and "numpy >=2.0.0" in export
    assert not any("ethos" in d or "tosa" in d for d in export)  # extras are not run deps
    assert json.loads(conda_info_file(found[RUNTIME], "info/run_exports.json")) == {
        "weak": [f"{RUNTIME} >=1.5.1,<1.5.2.0a0"]
    }
    for name, path in found.items():
        about = json.loads(conda_info_file(path, "info/about.json"))
        # the exclusivity record lives in about.json's free-form extra, no file of its own
        record = exclusivity_record(real_plan, real_plan.package(name))
        assert about["extra"]["process_exclusive"] == record["pairs"], name
        assert conda_info_file(path, "info/licenses/LICENSE").startswith(b"BSD License")


def info_names(package: Path) -> list[str]:
    """The paths of a .conda's info archive."""
    with zipfile.ZipFile(package) as archive:
        member = next(n for n in archive.namelist() if n.startswith("info-"))
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(archive.read(member))).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return tar.getnames()


# CEP 34: "Build tools MUST NOT allow arbitrary files in" info/; the names it allows (files,
# has_prefix and no_link deprecated), the folders by their first part
CEP34 = frozenset(
    {"index.json", "paths.json", "hash_input.json", "run_exports.json", "about.json",
     "link.json", "files", "has_prefix", "no_link", "licenses", "recipe", "test", "git"}
)  # fmt: skip


def test_info_holds_only_what_cep_34_allows(channel: Path) -> None:
    """No splitter file in info/ (the exclusivity record is in about.json, the SBOMs in the
    package's share/doc/<name>/, beside the files they list)."""
    for name, path in packages(channel).items():
        names = info_names(path)
        assert all(n.startswith("info/") for n in names), name
        extra = {n.split("/")[1] for n in names if n != "info"} - CEP34
        assert extra == set(), (name, extra)
        assert not [n for n in names if "sbom" in n], name


def test_rattler_build_inspector(channel: Path) -> None:
    from rattler_build import Package

    for name, path in packages(channel).items():
        package = Package.from_file(str(path))
        assert package.name == name and str(package.version) == "1.5.1"
        depends = [str(d) for d in package.depends]
        if name == EXPORT:
            assert any(d.startswith(RUNTIME) for d in depends)


def test_sibling_dependencies_are_satisfied(channel: Path) -> None:
    from rattler import MatchSpec, RepoDataRecord

    async def records() -> list[RepoDataRecord]:
        return [await RepoDataRecord.from_package_archive(p) for p in packages(channel).values()]

    loaded = asyncio.run(records())
    for record in loaded:
        for spec in record.depends:
            if spec.startswith("executorch-"):
                assert any(MatchSpec(spec).matches(other) for other in loaded), spec


def test_installs_land_where_the_tree_puts_them(
    real_plan: Plan, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    build_tree(real_plan, tree, make_layout(real_plan.wheel, "/usr/local", "lib", "include", None))
    expected = {RUNTIME: set(), QUANTIZED: set(), EXPORT: set()}
    for name in expected:
        # but for the licence texts, which conda keeps in the package's info/licenses/
        expected[name] = {
            line.removeprefix("usr/local/")
            for line in (tree / f"{name}.install").read_text().splitlines()
            if not line.startswith("usr/local/share/licenses/")
        }
    assert prefix_files(prefixes["runtime"]) == expected[RUNTIME]
    assert prefix_files(prefixes["runtime+quantized"]) == expected[RUNTIME] | expected[QUANTIZED]
    assert (
        prefix_files(prefixes["all"]) == expected[RUNTIME] | expected[QUANTIZED] | expected[EXPORT]
    )


def test_needed_resolves_in_every_prefix(prefixes: dict[str, Path]) -> None:
    recipe = load_recipe()
    allowed = frozenset(recipe.system_sonames) | {s for e in recipe.externals for s in e.sonames}
    for label, prefix in prefixes.items():
        files = {p: prefix / p for p in prefix_files(prefix)}
        assert find_unresolved(files, allowed) == [], label


def test_entry_point(prefixes: dict[str, Path]) -> None:
    prefix = prefixes["all"]
    script = (prefix / "bin" / "flatc").read_text()
    assert script.startswith(f"#!{prefix}/bin/python\n")
    assert "from executorch.data.bin import flatc" in script
    assert os.access(prefix / "bin" / "flatc", os.X_OK)


@pytest.mark.parametrize("spelling", ["executorch", "ExecuTorch"])
@pytest.mark.parametrize("cmake_label", list(CMAKE_LABELS), ids=lambda v: f"cmake-{v}")
def test_cpp_consumer(
    cmake_label: str, spelling: str, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    """find_package under either spelling users write builds and runs the quantized model, and
    on a prefix without the quantized package stops at configure naming that package."""
    cmake = cmake_executable(cmake_label)
    result = build_consumer(
        cmake,
        tmp_path / "q",
        prefix=prefixes["runtime+quantized"],
        quantized=True,
        spelling=spelling,
    )
    assert result.returncode == 0, result.output
    run = run_model(result.runner, tmp_path / "out.bin")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out.bin").read_bytes() == expected_output()
    alone = build_consumer(
        cmake, tmp_path / "r", prefix=prefixes["runtime"], quantized=True, spelling=spelling
    )
    assert alone.returncode != 0
    said = " ".join(alone.output.split())
    assert f'Could not find a configuration file for package "{spelling}"' not in said
    assert (
        "component 'kernels_quantized' is not installed: install the "
        "executorch-kernels-quantized package" in said
    )
    assert "Configuring incomplete" in said and not (tmp_path / "r" / "runner").exists()


def test_upstream_documented_path(
    real_plan: Plan, prefixes: dict[str, Path], tmp_path: Path
) -> None:
    """Upstream's instructions in a conda prefix: <site-packages>/executorch/share/cmake."""
    site = prefixes["all"] / "lib" / "python3.11" / "site-packages"
    upstream_route(site, real_plan.wheel.version, real_plan.build_version, tmp_path)


def test_meson_consumer(prefixes: dict[str, Path], tmp_path: Path) -> None:
    """meson through pkg-config on the installed conda prefix: the quantized library is NEEDED
    (readelf) and the model runs byte-identical; without it, configure names it."""
    meson_runs_the_model(tmp_path, pkg_config_path=prefixes["runtime+quantized"] / PKGCONFIG)
    alone = build_meson(
        tmp_path / "a", quantized=True, pkg_config_path=prefixes["runtime"] / PKGCONFIG
    )
    assert 'Dependency "executorch-kernels-quantized" not found' in alone.output
    assert alone.returncode != 0 and not alone.runner.exists()


def test_verify_with_torch_passes_every_row_the_readme_counts(
    channel: Path, real_wheel: Path
) -> None:
    """With torch and CMake 3.28 every row passes, as many per check as the wheel makes and
    the packages' SBOMs (listed from each .conda's own archives) count, summing to the
    README's figure for `splitter verify dist/conda`."""
    listed = listing(channel, "conda")
    full_verify_matches(channel, real_wheel, listed, "conda", depends=False)


def test_python_side_from_the_prefix(prefixes: dict[str, Path]) -> None:
    python = torch_python()
    prefix = prefixes["all"]
    env = {**os.environ, "PYTHONPATH": str(prefix / SITE)}
    env.pop("LD_LIBRARY_PATH", None)
    result = subprocess.run(
        [str(python), "-c", RUN_PTE, str(MODEL)], capture_output=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == expected_output()
    maps_check = subprocess.run(
        [
            str(python),
            "-c",
            "import torch, executorch.kernels.quantized;print(open('/proc/self/maps').read())",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert f"{prefix}/lib/libexecutorch_kernels_quantized.so" in maps_check.stdout


def paths_json(package: Path) -> dict[str, dict[str, object]]:
    return {p["_path"]: p for p in json.loads(conda_info_file(package, "info/paths.json"))["paths"]}


def test_paths_json_is_in_the_form_the_build_rewrites(channel: Path) -> None:
    """Every package's info/paths.json is in json_bytes's form (sorted, indented by 2): the
    layout the build's block-by-block marking of the prefix placeholder relies on
    (assemble.paths_json), and the flatc launcher is the one file marked."""
    marked = []
    for package in packages(channel).values():
        raw = conda_info_file(package, "info/paths.json")
        assert raw == json_bytes(json.loads(raw)), package.name
        marked += [
            (package.name.rsplit("-", 2)[0], p["_path"], p["file_mode"], p["prefix_placeholder"])
            for p in json.loads(raw)["paths"]
            if "prefix_placeholder" in p
        ]
    assert marked == [("executorch-export", "bin/flatc", "text", CONDA_PLACEHOLDER)]


def licence_names(package: Path) -> list[str]:
    """The licence texts a .conda holds (its info/licenses/, read from the info- tar)."""
    with zipfile.ZipFile(package) as conda:
        (member,) = [n for n in conda.namelist() if n.startswith("info-")]
        data = zstandard.ZstdDecompressor().decompressobj().decompress(conda.read(member))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return sorted(
            n.removeprefix("info/licenses/")
            for n in tar.getnames()
            if n.startswith("info/licenses/")
        )


def comparable_depends(package: Path) -> list[str]:
    """Run dependencies with sibling build strings dropped (each route hashes its own)."""
    depends = json.loads(conda_info_file(package, "info/index.json"))["depends"]
    return sorted(" ".join(d.split(" ")[:2]) if d.startswith("executorch-") else d for d in depends)


def test_rattler_build_recipe_builds_the_same_split(
    real_plan: Plan, channel: Path, tmp_path: Path
) -> None:
    """The generated v1 recipe, built for real and offline, gives the same files and depends."""
    recipe = (channel / "recipes" / "rattler-build" / "recipe.yaml").read_text()
    assert 'url: "https://files.pythonhosted.org/packages/cp311/e/executorch/' in recipe
    assert f'sha256: "{real_plan.wheel.sha256}"' in recipe
    rebuilt = tmp_path / "rebuilt"
    build_conda(real_plan, rebuilt, backend="rattler-build", compression_level=1)
    assembled, built = packages(channel), packages(rebuilt)
    assert sorted(built) == sorted(assembled)
    for name in assembled:
        ours, theirs = paths_json(assembled[name]), paths_json(built[name])
        assert sorted(theirs) == sorted(ours), name
        for path, entry in ours.items():
            if "prefix_placeholder" not in entry and "prefix_placeholder" not in theirs[path]:
                assert theirs[path]["sha256"] == entry["sha256"], path
        assert comparable_depends(built[name]) == comparable_depends(assembled[name]), name
        # the recipe's about.license and license_file: the same expression and texts
        about = [
            json.loads(conda_info_file(p[name], "info/about.json")) for p in (assembled, built)
        ]
        assert about[0]["license"] == about[1]["license"] == real_plan.package(name).license
        texts = licence_names(assembled[name])
        assert texts == licence_names(built[name]) and "LICENSE" in texts, name
        for text in texts:
            wanted = conda_info_file(assembled[name], f"info/licenses/{text}")
            assert conda_info_file(built[name], f"info/licenses/{text}") == wanted, text


def test_conda_build_meta_describes_the_same_outputs(channel: Path) -> None:
    meta = (channel / "recipes" / "conda-build" / "meta.yaml").read_text()
    for name in (RUNTIME, QUANTIZED, EXPORT):
        assert f'- name: "{name}"' in meta
        assert f"script: install.sh {name}" in meta
    assert '{{ pin_subpackage("executorch-runtime", exact=True) }}' in meta
    support = channel / "recipes" / "conda-build"
    rattler = channel / "recipes" / "rattler-build"
    for name in (RUNTIME, QUANTIZED, EXPORT):
        assert (support / name / "install.list").read_bytes() == (
            rattler / name / "install.list"
        ).read_bytes()


HAS_CONDA_BUILD = shutil.which("conda-build") is not None


@pytest.mark.skipif(
    HAS_CONDA_BUILD, reason="conda-build is installed; the missing case cannot occur"
)
def test_conda_build_backend_missing(real_plan: Plan, tmp_path: Path) -> None:
    with pytest.raises(
        MissingToolError, match=r"conda-build is not installed.*\n.*install conda-build"
    ):
        build_conda(real_plan, tmp_path / "cb", backend="conda-build")
    assert not (tmp_path / "cb").exists()


@pytest.mark.skipif(
    not HAS_CONDA_BUILD, reason="conda-build is not installed here (no conda channel is reachable)"
)
def test_conda_build_backend(real_plan: Plan, channel: Path, tmp_path: Path) -> None:
    build_conda(real_plan, tmp_path / "cb", backend="conda-build")
    built = packages(tmp_path / "cb")
    assert sorted(built) == sorted(packages(channel))
    for name, package in built.items():
        assert sorted(paths_json(package)) == sorted(paths_json(packages(channel)[name]))


def test_doctor_on_a_conda_prefix(
    prefixes: dict[str, Path], real_wheel: Path, tmp_path: Path
) -> None:
    """A clean prefix passes; the same prefix with upstream's wheel pip-installed is flagged."""
    prefix = tmp_path / "prefix"
    shutil.copytree(prefixes["all"], prefix, symlinks=True)
    clean = subprocess.run(
        [sys.executable, "-m", "splitter", "doctor", "--prefix", str(prefix), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["hazards"] == []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--upgrade",
            "--target",
            str(prefix / SITE),
            str(real_wheel),
        ],
        check=True,
    )
    mixed = subprocess.run(
        [sys.executable, "-m", "splitter", "doctor", "--prefix", str(prefix), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert mixed.returncode == 1
    hazards = json.loads(mixed.stdout)["hazards"]
    kinds = {(h["kind"], Path(h["files"][0]).name) for h in hazards}
    assert ("duplicate-registry", "libexecutorch.so") in kinds
    assert ("duplicate-kernels", "libexecutorch_kernels_quantized.so") in kinds
    quantized = next(h for h in hazards if "libexecutorch_kernels_quantized.so" in h["files"][0])
    assert {str(prefix / "lib"), str(prefix / SITE / "executorch" / "lib")} == {
        str(Path(f).parent) for f in quantized["files"]
    }
