"""Install .conda packages into prefixes with py-rattler; a torch venv for the Python side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from consumer_tools import cache_lock, cache_root, lock_file, pip_install_locked

from splitter.verify.install import INSTALL_CONDA


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
    """A cached venv holding ci/locks/torch-venv.lock: torch 2.13.0 (the CPU wheel) and what
    `import executorch.kernels.quantized` and `executorch.runtime` need besides executorch."""
    _, digest = lock_file("torch-venv")
    venv = cache_root() / f"torch-venv-{digest}"
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    with cache_lock(venv.name):
        if not marker.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip_install_locked(python, "torch-venv")
            marker.write_text("ok\n")
    return python
