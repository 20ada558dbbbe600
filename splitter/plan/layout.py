"""Where each wheel file lands in an installed FHS layout (the tree and conda targets)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from splitter.errors import UsageError
from splitter.model import WheelInfo

LIB = "executorch/lib/"
INCLUDE = "executorch/include/"
# Upstream's CMake config, replaced by the per-package config that splitter generates.
UPSTREAM_CMAKE = ("executorch/share/cmake/", "executorch/lib/cmake/")
SYSTEM_LIBDIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/lib64")


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Install directories, all relative to the prefix except `prefix` itself."""

    prefix: str
    libdir: str = "lib"
    includedir: str = "include"
    sitedir: str = ""
    bindir: str = "bin"
    interpreter: str = "/usr/bin/env python3"  # shebang of generated console scripts

    @property
    def cmakedir(self) -> str:
        """Where the CMake package config goes."""
        return f"{self.libdir}/cmake/executorch"

    @property
    def pkgconfigdir(self) -> str:
        """Where pkg-config files go."""
        return f"{self.libdir}/pkgconfig"

    def system_libdir(self) -> bool:
        """Whether the dynamic linker searches libdir without being told (ld.so defaults)."""
        absolute = posixpath.normpath(posixpath.join("/", self.prefix.strip("/"), self.libdir))
        multiarch = posixpath.dirname(absolute) in ("/usr/lib", "/lib")
        return absolute in SYSTEM_LIBDIRS or (multiarch and "-linux-" in absolute)


def default_sitedir(wheel: WheelInfo) -> str:
    """`lib/pythonX.Y/site-packages` for the wheel's CPython tag (cp311 -> 3.11)."""
    tag = wheel.python_tag
    if not tag.startswith("cp") or len(tag) < 4:
        return "lib/python3/site-packages"
    return f"lib/python{tag[2]}.{tag[3:]}/site-packages"


def make_layout(
    wheel: WheelInfo, prefix: str, libdir: str, includedir: str, sitedir: str | None
) -> Layout:
    """Validate the directories: relative, normalised, no `..`."""
    for name, value in (("libdir", libdir), ("includedir", includedir), ("sitedir", sitedir)):
        if value is None:
            continue
        if value.startswith("/") or ".." in value.split("/") or not value.strip("/"):
            raise UsageError(
                f"--{name} must be a relative path under the prefix without '..': {value}"
            )
    return Layout(
        prefix=prefix.rstrip("/") or "/",
        libdir=libdir.strip("/"),
        includedir=includedir.strip("/"),
        sitedir=(sitedir or default_sitedir(wheel)).strip("/"),
    )


def install_path(path: str, layout: Layout, dist_info: str) -> str | None:
    """The prefix-relative destination of wheel path `path`; None when it is regenerated."""
    if path.startswith(UPSTREAM_CMAKE):
        return None
    if path.startswith(LIB):
        return f"{layout.libdir}/{path[len(LIB) :]}"
    if path.startswith(INCLUDE):
        return f"{layout.includedir}/{path[len(INCLUDE) :]}"
    if path.startswith(f"{dist_info}/"):
        if path.endswith(("/RECORD", "/INSTALLER", "/REQUESTED")):
            return None  # a distro install is not pip-managed; pip must not uninstall it
        return f"{layout.sitedir}/{path}"
    return f"{layout.sitedir}/{path}"
