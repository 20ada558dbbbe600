"""Generated files have one home: the CMake config every target writes, and the "split from"
sentence every description gives, are the same text in the wheel, tree and conda outputs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from consumer_tools import cmake_executable

from splitter.plan.make import make_plan
from splitter.plan.recipe import load_recipe
from splitter.targets.generated.files import SPLIT_FROM, split_from
from splitter.verify.install import conda_info_file, install
from splitter.verify.macos import PROBE

RUNTIME = "executorch-runtime"
QUANTIZED = "executorch-kernels-quantized"

pytestmark = pytest.mark.integration

CONFIG = "executorch-config.cmake"
WHEEL_CONFIG = f"executorch/lib/cmake/executorch/{CONFIG}"
TREE_CONFIG = f"{RUNTIME}/usr/local/lib/cmake/executorch/{CONFIG}"
WHEELS = {"linux": "real_wheel", "macos": "real_wheel_macos"}
# splitter.verify's Darwin probe, also printing the imported runtime target's link options
DARWIN_PROBE = PROBE.replace("@COMPONENTS@", "kernels_quantized") + (
    'message(STATUS "SPLITTER_APPLE=${APPLE}")\n'
    "get_target_property(_options executorch::runtime INTERFACE_LINK_OPTIONS)\n"
    'message(STATUS "SPLITTER_OPTIONS=${_options}")\n'
)

Built = Callable[[str, str], Path]


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`splitter build --target T` of the Linux or macOS wheel, run as a user does, once each."""
    outputs: dict[tuple[str, str], Path] = {}

    def build(platform: str, target: str) -> Path:
        if (platform, target) not in outputs:
            wheel = request.getfixturevalue(WHEELS[platform])
            out = tmp_path_factory.mktemp(f"{platform}-{target}") / "out"
            options = ("--compression-level", "1") if target == "conda" else ()
            command = [sys.executable, "-m", "splitter", "-q", "build", "--target", target]
            result = subprocess.run(
                [*command, *options, str(wheel), "-o", str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            outputs[platform, target] = out
        return outputs[platform, target]

    return build


def runtime_wheel(out: Path) -> Path:
    return next(out.glob("executorch_runtime-*.whl"))


@pytest.mark.parametrize("platform", ["linux", "macos"])
def test_wheel_config_is_the_trees(built: Built, platform: str) -> None:
    """The wheel's lib/cmake config sits where the tree's does (<root>/lib/cmake/executorch,
    libdir lib, includedir include), so one renderer gives both the same bytes."""
    with zipfile.ZipFile(runtime_wheel(built(platform, "wheel"))) as archive:
        wheel_config = archive.read(WHEEL_CONFIG)
    assert wheel_config == (built(platform, "tree") / TREE_CONFIG).read_bytes()


@pytest.mark.parametrize("target", ["wheel", "tree", "conda"])
def test_macos_config_configures_for_darwin(built: Built, target: str, tmp_path: Path) -> None:
    """Every config of each macOS output, installed with runtime and kernels-quantized, is
    found by a Darwin consumer (no compiler) and links with @loader_path rpaths only."""
    installed = install(built("macos", target), tmp_path / "installed", (RUNTIME, QUANTIZED))
    configs = sorted(installed.root.rglob(CONFIG))
    assert len(configs) == (2 if target == "wheel" else 1), configs
    cmake = cmake_executable("4.x")  # imported targets need CMake >= 3.28
    for index, config in enumerate(configs):
        # the header comment names $ORIGIN when it explains the CMake < 3.28 route
        code = "\n".join(line for line in config.read_text().splitlines() if line[:1] != "#")
        assert "@loader_path" in code, config
        assert "--enable-new-dtags" not in code and "$ORIGIN" not in code, config
        source = tmp_path / f"probe{index}"
        source.mkdir()
        (source / "CMakeLists.txt").write_text(DARWIN_PROBE)
        darwin = ["-DCMAKE_SYSTEM_NAME=Darwin", f"-Dexecutorch_DIR={config.parent}"]
        result = subprocess.run(
            [str(cmake), "-S", str(source), "-B", str(source / "build"), *darwin],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        values = dict(
            line.removeprefix("-- ").split("=", 1)
            for line in result.stdout.splitlines()
            if line.startswith("-- SPLITTER_")
        )
        assert values["SPLITTER_APPLE"] == "1"
        options = values["SPLITTER_OPTIONS"].split(";")
        assert options[:2] == ["-Wl,-rpath,@loader_path", "-Wl,-rpath,@loader_path/../lib"]
        assert not any("ORIGIN" in o or "new-dtags" in o for o in options), options


def test_split_from_is_said_once(built: Built, real_wheel_macos: Path) -> None:
    """Each package's description names the input wheel and its digest once, in the sentence
    split_from writes, in the wheel's METADATA and in the .conda's about.json."""
    digest = hashlib.sha256(real_wheel_macos.read_bytes()).hexdigest()
    sentence = f"Split by splitter from {real_wheel_macos.name} (sha256 {digest})."
    assert split_from(make_plan(real_wheel_macos, load_recipe())) == sentence
    descriptions = {}
    for wheel in sorted(built("macos", "wheel").glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            descriptions[wheel.name] = archive.read(name).decode().split("\n\n", 1)[1]
    for package in sorted(built("macos", "conda").glob("osx-arm64/*.conda")):
        about = json.loads(conda_info_file(package, "info/about.json"))
        descriptions[package.name] = about["description"]
    assert len(descriptions) == 6
    for name, text in descriptions.items():
        assert text.count(sentence) == 1, name
        assert text.count(SPLIT_FROM) == 1, name
