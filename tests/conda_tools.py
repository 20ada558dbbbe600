"""Install .conda packages into prefixes with py-rattler; a torch venv for the Python side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from consumer_tools import cache_lock, cache_root

from splitter.verify.install import INSTALL_CONDA

# What `import executorch.kernels.quantized` and `executorch.runtime` need besides executorch.
TORCH_VENV_REQUIREMENTS = (
    "torch==2.13.0",
    "numpy",
    "ruamel.yaml",
    "pyyaml",
    "flatbuffers",
    "tabulate",
    "packaging",
)


def install(prefix: Path, packages: list[Path]) -> None:
    """Install `packages` into a fresh prefix without a solver (run deps are not resolvable
    offline); sibling dependencies are checked separately with MatchSpec."""
    result = subprocess.run(
        [sys.executable, "-c", INSTALL_CONDA, str(prefix), *map(str, packages)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def torch_python() -> Path:
    """A venv with torch 2.13.0 (the CPU wheel) and the export side's import needs, cached."""
    venv = cache_root() / "torch-venv-2.13.0"
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    with cache_lock(venv.name):
        if not marker.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *TORCH_VENV_REQUIREMENTS],
                check=True,
                capture_output=True,
            )
            marker.write_text("ok\n")
    return python
