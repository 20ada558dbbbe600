"""Where each wheel file lands in an installed FHS layout: each target's layout (conda and
the tree's default, Debian's, RPM's; the one home of their directories), install_path, and
the recipe's rule that some files travel together in every one of them (check_together)."""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
from dataclasses import dataclass

from splitter.errors import RecipeError, UsageError
from splitter.model import Recipe, WheelInfo
from splitter.platforms import by_wheel_tag, cpython_version

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
    # where each package's licence texts are installed ({package}: its name); "" where the
    # format keeps them in its own metadata (conda's info/licenses, Debian's copyright, RPM's
    # per-subpackage %license directories)
    licensedir: str = ""

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
    version = cpython_version(wheel.python_tag)
    return f"lib/python{version or '3'}/site-packages"


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


def regenerated(path: str, dist_info: str) -> bool:
    """Whether no output ships wheel path `path` as it is: upstream's CMake config (each
    output writes its own) and the installer's records (RECORD, INSTALLER, REQUESTED: a distro
    install is not pip-managed, so pip must not uninstall it; a wheel writes its own)."""
    return path.startswith(UPSTREAM_CMAKE) or (
        path.startswith(f"{dist_info}/") and path.endswith(("/RECORD", "/INSTALLER", "/REQUESTED"))
    )


def install_path(path: str, layout: Layout, dist_info: str) -> str | None:
    """The prefix-relative destination of wheel path `path`; None when it is regenerated."""
    if regenerated(path, dist_info):
        return None
    if path.startswith(LIB):
        return f"{layout.libdir}/{path[len(LIB) :]}"
    if path.startswith(INCLUDE):
        return f"{layout.includedir}/{path[len(INCLUDE) :]}"
    return f"{layout.sitedir}/{path}"


DISTRO_INTERPRETER = "/usr/bin/python3"  # shebang of a distribution's console scripts
DEB_SITEDIR = "lib/python3/dist-packages"  # Debian's one directory for every python3


def conda_layout(wheel: WheelInfo, interpreter: str = "") -> Layout:
    """The layout inside a conda prefix ($PREFIX/lib, include, lib/pythonX.Y/site-packages);
    `interpreter` the prefix's python (with conda's placeholder prefix)."""
    return Layout(prefix="", sitedir=default_sitedir(wheel), interpreter=interpreter)


def deb_layout(wheel: WheelInfo, triplet: str) -> Layout:
    """Debian's layout: prefix /usr, the multiarch libdir lib/<triplet>, dist-packages."""
    layout = make_layout(wheel, "/usr", f"lib/{triplet}", "include", DEB_SITEDIR)
    return dataclasses.replace(layout, interpreter=DISTRO_INTERPRETER)


def rpm_layout(wheel: WheelInfo) -> Layout:
    """Fedora's layout: prefix /usr, lib64 (x86_64 and aarch64), the wheel's CPython's
    lib64/pythonX.Y/site-packages."""
    sitedir = f"lib64/python{cpython_version(wheel.python_tag)}/site-packages"
    layout = make_layout(wheel, "/usr", "lib64", "include", sitedir)
    return dataclasses.replace(layout, interpreter=DISTRO_INTERPRETER)


def target_layouts(wheel: WheelInfo) -> dict[str, Layout]:
    """The installed layouts the targets write for `wheel` (the wheel target keeps the
    wheel's own paths): conda's and the tree's default (lib), and on a platform with a
    distribution architecture Debian's (multiarch) and RPM's (lib64)."""
    layouts = {"conda and tree": conda_layout(wheel)}
    platform = by_wheel_tag(wheel.platform_tag)
    if platform is not None and platform.triplet:
        layouts["deb"] = deb_layout(wheel, platform.triplet)
    if platform is not None and platform.rpm:
        layouts["rpm"] = rpm_layout(wheel)
    return layouts


def check_together(wheel: WheelInfo, recipe: Recipe, owners: dict[str, tuple[str, int]]) -> None:
    """Each [[together]] group of the recipe that applies to the wheel's platform: all its files
    in the wheel or none, in one package, and in one directory in every layout (the wheel's
    own paths and target_layouts); a RecipeError names the group's line and the files."""
    present = {e.path for e in wheel.entries}
    for group in recipe.together:
        if group.platforms and not any(
            fnmatch.fnmatchcase(wheel.platform_tag, p) for p in group.platforms
        ):
            continue
        where = f"(together, {recipe.path}:{group.line})"
        found = [f for f in group.files if f in present]
        if not found:
            continue
        if len(found) != len(group.files):
            missing = [f for f in group.files if f not in present]
            raise RecipeError(
                f"files that travel together are not all in {wheel.filename} {where}: "
                f"{', '.join(missing)} missing beside {', '.join(found)}\n"
                f"they travel together because {group.reason}"
            )
        packages = sorted({owners[f][0] for f in group.files})
        if len(packages) > 1:
            raise RecipeError(
                f"files that travel together are split between packages {where}: "
                + ", ".join(f"{f} in {owners[f][0]}" for f in group.files)
                + "\nput them in one package's rule"
            )
        layouts = {"wheel": {f: f for f in group.files}}
        for name, layout in target_layouts(wheel).items():
            layouts[name] = {
                f: install_path(f, layout, wheel.dist_info) or "(regenerated)" for f in group.files
            }
        for name, places in layouts.items():
            if len({posixpath.dirname(p) for p in places.values()}) > 1:
                raise RecipeError(
                    f"files that travel together land in different directories of the {name} "
                    f"layout {where}: "
                    + ", ".join(f"{f} -> {p}" for f, p in places.items())
                    + f"\nthey travel together because {group.reason}"
                )
