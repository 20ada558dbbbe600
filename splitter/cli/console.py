"""What the CLI prints besides its results: the consoles, the progress bar (which draws the
core's progress reports) and the plan, release, build and diagnosis tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from packaging.utils import parse_wheel_filename
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table

from splitter.errors import UsageError
from splitter.model import Plan
from splitter.model import Progress as Report
from splitter.plan.release import (
    Release,
    link_stamps,
)
from splitter.targets.builder import Built

if TYPE_CHECKING:  # doctor and verify load only when used
    from splitter.doctor.diagnose import Diagnosis
    from splitter.verify.run import Check

# Output that is not a terminal (a pipe, a CI log) is never wrapped or cut: a wide virtual
# width, and colour only on a terminal (rich also honours NO_COLOR).
PIPE_WIDTH = 10_000
out = Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH, soft_wrap=True)
err = Console(stderr=True)


def make_table(*headers: str) -> Table:
    """A table whose cells fold whole words onto more lines rather than end in an ellipsis,
    so a package name is never cut short."""
    made = Table()
    for header in headers:
        made.add_column(header, overflow="fold")
    return made


def verify_table(checks: list[Check]) -> Table:
    """verify's rows as a table (the co-load matrix grouped: splitter.verify.summary), which
    folds its cells to fit the terminal."""
    from splitter.verify.run import Status
    from splitter.verify.summary import table_rows

    colours = {Status.PASS: "green", Status.FAIL: "red", Status.SKIP: "yellow"}
    table = make_table("check", "subject", "expected", "outcome", "status", "detail")
    for c in table_rows(checks):
        status = f"[{colours[c.status]}]{c.status}[/]"
        table.add_row(c.check, c.subject, c.expected, c.outcome, status, c.detail)
    return table


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr, or nothing when not `enabled` or not a terminal."""
    if not enabled or not err.is_terminal:
        yield None
        return
    # The description gets at most half the line, so that the spinner, bar, count and
    # elapsed time stay visible in an 80-column terminal whatever the wheel's name.
    description = Column(max_width=max(20, err.width // 2), no_wrap=True, overflow="ellipsis")
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", table_column=description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        yield bar


def reporter(bar: Progress | None, description: str) -> Report | None:
    """A progress callback (stage, done, total) drawing one task on `bar`; None without a bar,
    so that the core skips its reports (and the conda target may pack in the build process,
    which would freeze a bar)."""
    if bar is None:
        return None
    task = bar.add_task(description, total=None)

    def report(stage: str, done: int, total: int) -> None:
        bar.update(task, completed=done, total=total or None, description=stage)

    return report


def show_release(release: Release) -> None:
    """One row per package, platform and Python: which wheel it is packaged from."""
    out.print(
        f"[bold]{release.project} {release.version}[/]: {len(release.inputs)} wheels, "
        f"{len(release.groups)} platform(s)"
    )
    table = make_table("package", "platform", "python", "from")
    for group in release.groups:
        for name in group.shared_packages:
            table.add_row(name, group.subdir, "any", group.source.wheel.filename)
        for plan in group.plans:
            for package in plan.packages:
                if package.name not in group.shared_packages:
                    python = "{}.{}".format(*plan.platform.python)
                    table.add_row(package.name, group.subdir, python, plan.wheel.filename)
    out.print(table)
    for group in release.groups:
        out.print(
            f"{group.subdir}: {', '.join(group.shared_packages)} packaged once, from "
            f"{group.source.wheel.filename} (the oldest Python); their files are identical in "
            f"all {len(group.plans)} wheels"
            + (
                f", {len(group.stamped)} of them but for the {link_stamps(group.source.platform)}"
                if group.stamped
                else ""
            )
        )
        for stamped in group.stamped:
            out.print(f"  {stamped.path}: the same but for its {stamped.set_aside}")
            for string in stamped.strings:
                out.print(
                    f"    {string.wheel} at {string.offset:#x}: {string.text}", soft_wrap=True
                )


def show_why(result: Plan, path: str, as_json: bool) -> None:
    """Print the owning package and rule of one path."""
    if path not in result.owners:
        raise UsageError(
            f"--why names no file of {result.wheel.filename}: {path}\n"
            "give a path as `splitter plan --json` lists it (executorch/...)"
        )
    package, index = result.owners[path]
    rule = result.recipe.rules[index]
    if as_json:
        print(
            json.dumps(
                {
                    "path": path,
                    "package": package,
                    "rule": index,
                    "glob": list(rule.globs),
                    "reason": rule.reason,
                }
            )
        )
        return
    out.print(
        f"{path}\n  -> [bold]{package}[/] by rules[{index}] {list(rule.globs)} "
        f"({result.recipe.path.name}:{rule.line})\n  {rule.reason}"
    )


def show_plan(result: Plan) -> None:
    """Rich tables: one row per package, then the exclusivity verdicts."""
    wheel = result.wheel
    out.print(
        f"[bold]{wheel.filename}[/] sha256 {wheel.sha256} "
        f"{len(wheel.entries)} files, recipe {result.recipe.path.name}"
    )
    table = make_table("package", "files", "bytes", "depends", "external", "CMake components")
    for pkg in result.packages:
        table.add_row(
            pkg.name,
            str(len(pkg.files)),
            f"{pkg.bytes:,}",
            "\n".join(d.conda for d in pkg.depends) or "-",
            "\n".join(d.pip for d in pkg.externals) or "-",
            ", ".join(pkg.cmake_components) or "-",
        )
    out.print(table)
    rules = make_table("rule", "glob", "package", "reason")
    for rule in result.recipe.rules:
        if not rule.applies(wheel.platform_tag):
            continue  # another platform's rule took no part in this split
        rules.add_row(str(rule.index), "\n".join(rule.globs), rule.package, rule.reason)
    out.print(rules)
    for verdict in result.exclusive:
        state_text = f"[{'red' if verdict.in_effect else 'green'}]{verdict.state}[/]"
        out.print(f"process-exclusive {verdict.first} / {verdict.second}: {state_text}")
        for line in verdict.evidence:
            out.print(f"  - {line}")
    _show_third_party(result)
    _show_undeclared(result)


def _show_undeclared(result: Plan) -> None:
    """Per C++ library, how many of its exported executorch:: functions no shipped header
    names, with the first few (`--json` lists them all)."""
    for split in result.packages:
        for path, names in split.undeclared:
            shown = ", ".join(n.rsplit("::", 2)[-1] if "::" in n else n for n in names[:3])
            more = ", ..." if len(names) > 3 else ""
            out.print(
                f"{split.name}: {path.rsplit('/', 1)[-1]} exports {len(names)} functions "
                f"no shipped header names ({shown}{more}): linkable, not callable"
            )


def _show_third_party(result: Plan) -> None:
    """One row per (component, package): its licence, files, exported symbols and the
    occurrences of its strings; each package's licence expression; the recipe's components
    this wheel does not carry; the files no package ships, by reason."""
    if not result.recipe.third_party:
        return
    rows: dict[tuple[str, str], list[int]] = {}
    for found in result.third_party:
        row = rows.setdefault((found.component, found.package), [0, 0, 0])
        row[0] += 1
        row[1] += found.symbols
        row[2] += sum(count for _, count in found.strings)
    licences = {c.name: c.license for c in result.recipe.third_party}
    table = make_table("component", "licence", "package", "files", "symbols", "strings")
    for (component, package), (files, symbols, strings) in sorted(
        rows.items(), key=lambda row: (row[0][0].casefold(), row[0][1])
    ):
        table.add_row(
            component, licences[component], package, str(files), f"{symbols:,}", f"{strings:,}"
        )
    out.print(table)
    for split in result.packages:
        out.print(f"licence of {split.name}: {split.license}")
    if result.third_party_missing:
        out.print(f"third-party components not found: {', '.join(result.third_party_missing)}")
    reasons: dict[str, int] = {}
    for excluded in result.excluded:
        reasons[excluded.reason] = reasons.get(excluded.reason, 0) + 1
    for reason, count in reasons.items():
        out.print(f"excluded from every package: {count} files ({reason})", highlight=False)


def show_summary(built: Built, plan: Plan) -> None:
    """After a build: one row per package file (from the build's manifest: its package, size,
    sibling dependencies and process-exclusivity verdict; `plan` gives those facts, the same
    in every wheel of a release), where the output is, and what to run next. `--json` lists
    every file."""
    headers = ("package", "version", "file", "size", "depends on", "process-exclusive")
    rows: list[tuple[str, ...]] = []
    target = built.manifest.target
    for item in built.manifest.binaries:
        package = plan.package(item.package)
        path = built.out / item.path
        shown, size = str(path), item.size
        if target == "tree":  # the artifact is the tree's file list, beside its tree
            shown = str(path.with_suffix(""))
            size = sum(int(f["size"]) for f in json.loads(path.read_text())["files"])
        rows.append(
            (
                item.package,
                package.version,
                shown if target == "tree" else path.name,
                f"{size / 1e6:.1f} MB",
                ", ".join(d.name for d in package.depends) or "-",
                _exclusive_state(plan, item.package),
            )
        )
    # A table needs each row on one line to stay readable; where it would not fit (an
    # 80-column terminal), each package is a block of lines, so no name is folded.
    if sum(max(len(r[i]) for r in [headers, *rows]) + 3 for i in range(len(headers))) <= out.width:
        table = make_table(*headers)
        for row in rows:
            table.add_row(*row)
        out.print(table)
    else:
        for name, version, shown, shown_size, depends, exclusive in rows:
            out.print(f"[bold]{name}[/] {version}, {shown_size}", highlight=False)
            out.print(f"  file: {shown}", highlight=False)
            out.print(f"  depends on: {depends}", highlight=False)
            out.print(f"  process-exclusive: {exclusive}", highlight=False)
    out.print(f"output: {built.out}")
    for line in _next_steps(built):
        out.print(line, highlight=False)


def _exclusive_state(plan: Plan, name: str) -> str:
    states = [
        f"{v.state} (with {v.second_package if v.first_package == name else v.first_package})"
        for v in plan.exclusive
        if name in (v.first_package, v.second_package)
    ]
    return "; ".join(states) or "-"


def _versions(built: Built) -> list[tuple[str, str]]:
    """Each package of the output with the version of the wheels it was split from."""
    version = str(parse_wheel_filename(built.manifest.inputs[0][0])[1])
    return [(name, version) for name in sorted({a.package for a in built.manifest.artifacts})]


def _next_steps(built: Built) -> list[str]:
    target, out_dir = built.manifest.target, built.out
    names = " ".join(built.manifest.packages())
    files = " ".join(str((out_dir / a.path).absolute()) for a in built.manifest.binaries)
    if target == "conda":
        return [
            f"next: conda install -c {out_dir} {names}",
            f"  or: pixi add --channel {out_dir.absolute().as_uri()} {names}",
        ]
    if target == "deb":
        # apt takes a local file only by a path it cannot read as a package name: absolute.
        return [
            f"next: apt-get install {files}",
            f"  check: lintian {out_dir}/*.deb {out_dir}/*.dsc",
            f"  rebuild: dpkg-source -x {out_dir}/<source>.dsc, then dpkg-buildpackage -b",
        ]
    if target == "rpm":
        return [
            f"next: dnf install {files}",
            f"  check: rpmlint -r {out_dir}/SPECS/<spec>.rpmlintrc {out_dir}/*.rpm "
            f"(the spec is in {out_dir}/SPECS)",
            f"  rebuild: rpmbuild --rebuild {out_dir}/<source>.src.rpm",
        ]
    if target == "conan":
        archives = " ".join(str(out_dir / a.path) for a in built.manifest.artifacts)
        return [
            f"next: conan cache restore FILE, for each of {archives} (into $CONAN_HOME; "
            "no remote needed)",
            f"  then require {' '.join(f'{n}/{v}' for n, v in _versions(built))} with the "
            "CMakeDeps and CMakeToolchain generators",
            "  the export side is Python and is not packaged for Conan: --target wheel or conda",
        ]
    if target == "wheel":
        mine = "{}.{}".format(*sys.version_info[:2])
        wheels = [
            str(out_dir / a.path) for a in built.manifest.artifacts if a.python in (None, mine)
        ]
        return [f"next: pip install {' '.join(wheels)}"]
    return [
        f"next: debhelper reads {out_dir}/<package>.install, RPM's %files takes "
        f"{out_dir}/<package>.files; <package>.json lists every file with its sha256"
    ]


def show_diagnosis(diagnosis: Diagnosis, heading: bool = False) -> None:
    """`splitter doctor`'s table of registry files, its hazards and notes."""
    if heading:
        out.print(f"environment {diagnosis.target}", highlight=False)
    table = make_table("library", "soname", "registry", "operators")
    for library in diagnosis.libraries:
        count = "unknown" if library.operators is None else str(library.operators)
        table.add_row(library.path, library.soname, library.registry, count)
    out.print(table)
    for hazard in diagnosis.hazards:
        out.print(f"[red]hazard[/] {hazard.kind}: {hazard.message}", highlight=False)
    for link in diagnosis.unresolved:
        out.print(f"[yellow]unresolved[/] {link.source} NEEDS {link.needed}")
    for note in diagnosis.notes:
        out.print(f"note: {note}")
    out.print("no hazards" if diagnosis.ok else f"{len(diagnosis.hazards)} hazard(s)")
