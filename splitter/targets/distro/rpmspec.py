"""The RPM spec of a plan (pure text): one binary package per split package, %install copying
the staged trees, rpm's own generators for the ELF and Python dependencies."""

from __future__ import annotations

import posixpath
import textwrap

from splitter.model import Distro, PackagePlan, Plan
from splitter.plan.report import RECORD
from splitter.targets.distro.common import (
    exclusivity_sentence,
    external_requirements,
    has_bare_executable,
    has_env_script,
)
from splitter.targets.distro.debmeta import synopsis
from splitter.targets.generated.files import SPLIT_FROM, split_from
from splitter.targets.stage import Staged, own_directories

# Macros every build of the spec needs, whoever runs it: upstream's binaries are shipped as
# split (RUNPATHs edited, nothing else), so nothing strips, byte-compiles or splits debug info,
# and the build is reproducible from SOURCE_DATE_EPOCH.
SPEC_MACROS = (
    ("debug_package", "%{nil}"),
    ("__strip", "/bin/true"),
    ("__os_install_post", "%{nil}"),
    ("_build_id_links", "none"),
    ("use_source_date_epoch_as_buildtime", "1"),
    ("clamp_mtime_to_source_date_epoch", "1"),
    ("_buildhost", "reproducible"),
    # rpm's Python dist generator reads the dist-info with whatever `packaging` the build
    # machine's /usr/bin/python3 has (Debian's has none: it fails and adds nothing), so its
    # output would depend on the machine. The Python requirements stay in the shipped METADATA.
    ("__pythondist_provides", "%{nil}"),
    ("__pythondist_requires", "%{nil}"),
)


# rpmlint errors the packages keep, each (package role, check, reason); written as the
# rpmlintrc beside the spec. rpmlint reports a filter that matches nothing
# (unused-rpmlintrc-filter), so the list cannot drift silently. Roles: "library" (a package
# holding public shared libraries), "python" (a package the recipe marks python), "any".
RPMLINT_FILTERS = (
    ("any", "no-signature", "the packages are signed by whoever publishes them (rpmsign)"),
    (
        "library",
        "invalid-soname",
        "upstream's sonames carry no version (libexecutorch.so); splitter ships upstream's "
        "binaries and does not invent a soname",
    ),
    (
        "library",
        "non-versioned-file-in-library-package",
        "with unversioned sonames there is no versioned runtime package to split headers and "
        "CMake files from; the runtime package is runtime and development package in one",
    ),
    (
        "library",
        "missing-hash-section",
        "upstream links with GNU hash only (--hash-style=gnu); the binaries are shipped as built",
    ),
    (
        "python",
        "non-executable-script",
        "upstream modules keep their #! line but are imported, not run; kept as in the wheel",
    ),
    (
        "python",
        "env-script-interpreter",
        "upstream scripts call /usr/bin/env python3; kept byte for byte as in the wheel",
    ),
    (
        "python",
        "script-without-shebang",
        "upstream ships this helper executable without a #! line; kept as in the wheel",
    ),
    (
        "python",
        "files-duplicated-waste",
        "upstream's wheel holds identical files at several paths (tests and examples, which "
        "12 modules import); each stays where upstream imports it from",
    ),
)


def rpmlintrc(plan: Plan, staged: Staged, distro: Distro) -> str:
    """The rpmlintrc of the packages: each kept error filtered after a comment with its reason."""
    names = dict(distro.names)
    lines = [f"# rpmlint filters for the {plan.recipe.project} packages split by splitter"]
    for role, check, reason in RPMLINT_FILTERS:
        for package in plan.packages:
            # rpmlint reports a filter that matches nothing: these two only where the files are
            bare = check == "script-without-shebang" and not has_bare_executable(
                staged, package.name
            )
            env = check == "env-script-interpreter" and not has_env_script(staged, package.name)
            if bare or env:
                continue
            library = not package.python and bool(package.sonames)
            if (
                role == "any"
                or (role == "python" and package.python)
                or (role == "library" and library)
            ):
                name = names[package.name].replace(".", "\\.").replace("+", "\\+")
                lines += [f"# {reason}", f'addFilter("^{name}\\.[^:]+: E: {check}( |$)")']
    return "\n".join(lines) + "\n"


def spec_name(plan: Plan, distro: Distro) -> str:
    """The spec's Name: the project (the source package of all three)."""
    return plan.recipe.project


def render_spec(
    plan: Plan, staged: Staged, distro: Distro, licence_name: str, sources: dict[str, str]
) -> str:
    """The spec; `sources` maps each package to its exclusivity record's Source file name."""
    names = dict(distro.names)
    name = spec_name(plan, distro)
    release = distro.revision
    layout = staged.layout
    lines = [
        f"# Generated by splitter from {plan.wheel.filename}",
        f"# (sha256 {plan.wheel.sha256}).",
        "# Rebuild: stage the trees with `splitter build --target tree --prefix /usr",
        f"# --libdir {layout.libdir} --sitedir {layout.sitedir} --rpath strip -o TREES WHEEL`, put",
        "# the Source files beside this spec, then",
        '# rpmbuild -bb --define "splitter_trees TREES" --define "_sourcedir $PWD" this.spec',
        "",
        *(f"%global {key} {value}" for key, value in SPEC_MACROS),
        "%{!?splitter_trees:%global splitter_trees %{_sourcedir}/trees}",
        "",
        f"Name: {name}",
        f"Version: {plan.wheel.version}",
        f"Release: {release}",
        f"Packager: {distro.maintainer}",
        f"License: {plan.wheel.license or 'unknown'}",
    ]
    if plan.wheel.home:
        lines.append(f"URL: {plan.wheel.home}")
    lines.append(f"Source0: {licence_name}")
    for index, package in enumerate(plan.packages, start=1):
        lines.append(f"Source{index}: {sources[package.name]}")
    # The package named like the spec is the main one: its Summary and %description are the
    # spec's own; without one, the spec's come from the wheel (and no main package is built).
    main = [p for p in plan.packages if names[p.name] == name]
    if not main:
        summary = synopsis(plan.wheel.summary or name)
        lines += [f"Summary: {summary}", "", "%description", _wrap(summary), ""]
    for package in main + [p for p in plan.packages if p not in main]:
        lines += _package_section(plan, package, names, name, release)
    lines += ["%prep", "", "%build", "", "%install"]
    for package in plan.packages:
        lines.append(f"cp -a %{{splitter_trees}}/{package.name}/. %{{buildroot}}/")
    for index, package in enumerate(plan.packages, start=1):
        rpm_name = names[package.name]
        lines.append(
            f"install -D -p -m 0644 %{{SOURCE0}} %{{buildroot}}%{{_licensedir}}/{rpm_name}/"
            f"{licence_name}"
        )
        lines.append(
            f"install -D -p -m 0644 %{{SOURCE{index}}} "
            f"%{{buildroot}}%{{_docdir}}/{rpm_name}/{RECORD}"
        )
    lines.append("")
    for package in plan.packages:
        lines += _files_section(plan, staged, package, names, name, licence_name)
    lines += ["%changelog", *changelog(plan, distro)]
    return "\n".join(lines) + "\n"


def _suffix(rpm_name: str, spec: str) -> str:
    """`-n name` for a subpackage; nothing for the package the spec itself names."""
    return "" if rpm_name == spec else f" -n {rpm_name}"


def _package_section(
    plan: Plan, package: PackagePlan, names: dict[str, str], spec: str, release: str
) -> list[str]:
    rpm_name = names[package.name]
    lines = []
    if rpm_name != spec:
        lines.append(f"%package -n {rpm_name}")
    lines.append(f"Summary: {synopsis(package.summary)}")
    lines.append(
        f"Group: {'Development/Languages/Python' if package.python else 'System/Libraries'}"
    )
    for dep in package.depends:
        lines.append(f"Requires: {names[dep.name]} = {package.version}-{release}")
    for requirement in external_requirements(plan, package, "rpm"):
        lines.append(f"Requires: {requirement}")
    record = f"/usr/share/doc/{rpm_name}/{RECORD}"
    lines += [
        "",
        f"%description{_suffix(rpm_name, spec)}",
        _wrap(
            f"{package.summary}. {split_from(plan)} {exclusivity_sentence(plan, package, record)}"
        ),
        "",
    ]
    return lines


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, width=79, break_long_words=False, break_on_hyphens=False))


def _files_section(
    plan: Plan,
    staged: Staged,
    package: PackagePlan,
    names: dict[str, str],
    spec: str,
    licence_name: str,
) -> list[str]:
    """%files: every staged file, %dir for the directories this package creates that no
    dependency and no system package owns, the licence and the exclusivity record."""
    layout = staged.layout
    mine = own_directories(staged, package.name, (d.name for d in package.depends))
    root = "/" + layout.prefix.strip("/")
    rpm_name = names[package.name]
    lines = [f"%files{_suffix(rpm_name, spec)}", "%defattr(-,root,root,-)"]
    lines.append(f"%license %{{_licensedir}}/{rpm_name}/{licence_name}")
    lines.append(f"%doc %{{_docdir}}/{rpm_name}/{RECORD}")
    lines += [f'%dir "{posixpath.join(root, d)}"' for d in sorted(mine)]
    lines += [f'"{posixpath.join(root, item.path)}"' for item in staged.packages[package.name]]
    return [*lines, ""]


def changelog(plan: Plan, distro: Distro) -> list[str]:
    """One %changelog entry, dated by the wheel."""
    import time

    date = time.strftime("%a %b %d %Y", time.gmtime(plan.wheel.timestamp))
    return [
        f"* {date} {distro.maintainer} - {plan.wheel.version}-{distro.revision}",
        f"- {SPLIT_FROM} {plan.wheel.filename}",
    ]
