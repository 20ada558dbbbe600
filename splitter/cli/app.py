"""The typer CLI: parse options, call the core, print; only SplitterError is caught here."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer

from splitter import __version__
from splitter.cli.console import (
    out,
    progress_bar,
    reporter,
    show_diagnosis,
    show_plan,
    show_release,
    show_summary,
    show_why,
    verify_table,
)
from splitter.cli.graph import GraphFormat, render_graph
from splitter.cli.licences import licences
from splitter.errors import SplitterError, UsageError
from splitter.manifest import NAME as MANIFEST
from splitter.model import CondaBackend, Only, Rpath, Target
from splitter.plan.release import Release, ReleasePlanning
from splitter.plan.report import plan_json, release_json
from splitter.plan.request import check_build_request, check_plan_request
from splitter.plan.resolve import Request, open_request, plan_request, plans_of
from splitter.platforms import subdirs
from splitter.targets.builder import build_output
from splitter.targets.registry import DEFAULTS, BuildOptions, open_builder, target_limits

app = typer.Typer(
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish)
    rich_markup_mode=None,  # plain click help: flags shown as flags, no boxes in a pipe
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Split the ExecuTorch wheel into runtime, quantized-kernel and export packages.",
)
app.add_typer(licences, name="licences")

WheelArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Wheel paths or a requirement (executorch==1.5.1); default: the recipe's pin. "
        "Several wheels (or --python/--platform) make a release."
    ),
]
PythonOpt = Annotated[
    str | None,
    typer.Option("--python", help="Fetch the requirement for these CPythons: 3.10,3.12 or all."),
]
PlatformOpt = Annotated[
    str | None,
    typer.Option(
        "--platform",
        help=f"Fetch the requirement for these platforms: {','.join(subdirs())} or all "
        "(every one of them).",
    ),
]
RecipeOpt = Annotated[
    Path | None, typer.Option("--recipe", help="Recipe TOML (default: the shipped one).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
# Accepted before the subcommand and after it (`splitter -q build`, `splitter build -q`).
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="build: list every file written, after the summary.")
]
TracebackOpt = Annotated[bool, typer.Option("--traceback", help="Show tracebacks on errors.")]


@dataclass(frozen=True, slots=True)
class GlobalOptions:
    """The options given before the subcommand, kept on the click context."""

    quiet: bool
    verbose: bool = False


def _print_version(shown: bool) -> None:
    if shown:
        print(f"splitter {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    traceback: TracebackOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """splitter: one plan from the wheel and a recipe, rendered by small targets."""
    ctx.obj = GlobalOptions(quiet=quiet, verbose=verbose)


def show_progress(ctx: typer.Context, quiet: bool, as_json: bool) -> bool:
    """Whether a command draws progress bars: not with -q (before or after the subcommand),
    and not when it prints JSON."""
    before = ctx.obj.quiet if isinstance(ctx.obj, GlobalOptions) else False
    return not (quiet or before or as_json)


@app.command()
def plan(
    ctx: typer.Context,
    wheel: WheelArg = None,
    recipe: RecipeOpt = None,
    as_json: JsonOpt = False,
    why: Annotated[
        str | None, typer.Option("--why", help="Show which rule owns this wheel path.")
    ] = None,
    python: PythonOpt = None,
    platform: PlatformOpt = None,
    graph: Annotated[
        bool, typer.Option("--graph", help="Print the split as a Graphviz DOT graph.")
    ] = False,
    graph_format: Annotated[
        GraphFormat | None,
        typer.Option("--graph-format", help="Print the split as a graph in this format."),
    ] = None,
    quiet: QuietOpt = False,
    traceback: TracebackOpt = False,
) -> None:
    """Show how the wheel (or a release) is split: packages, dependencies, CMake components,
    exclusivity; for a release, which wheel each package of each platform comes from."""
    check_plan_request(wheel or [], python, platform, graph or graph_format is not None, why)
    request = Request(wheels=tuple(wheel or ()), recipe=recipe, python=python, platform=platform)
    with progress_bar(show_progress(ctx, quiet, as_json)) as bar:
        result = plan_request(request, reporter(bar, "planning"))
    if isinstance(result, Release):
        if why is not None:
            raise UsageError("--why takes one wheel: give the wheel whose file you ask about")
        if as_json:
            sys.stdout.write(json.dumps(release_json(result), indent=2) + "\n")
        else:
            show_release(result)
        return
    if why is not None:
        show_why(result, why, as_json)
        return
    if graph or graph_format is not None:
        sys.stdout.write(render_graph(result, graph_format or GraphFormat.DOT))
        return
    if as_json:
        sys.stdout.write(json.dumps(plan_json(result), indent=2, sort_keys=False) + "\n")
        return
    show_plan(result)


def main() -> None:
    """Entry point: run the app, turning SplitterError into a one-line message and exit code."""
    try:
        app()
    except SplitterError as exc:
        # --traceback is a plain flag, before or after the subcommand: read it from argv, since
        # the error arrives here after click's context is gone.
        if "--traceback" in sys.argv[1:]:
            raise
        sys.stderr.write(f"error: {exc}\n")
        for note in getattr(exc, "__notes__", ()):
            sys.stderr.write(f"  {note}\n")
        sys.exit(exc.exit_code)


@app.command()
def build(
    ctx: typer.Context,
    wheel: WheelArg = None,
    target: Annotated[Target, typer.Option("--target", "-t", help="What to build.")] = Target.CONDA,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output directory (default dist/<target>)."),
    ] = None,
    recipe: RecipeOpt = None,
    prefix: Annotated[str, typer.Option(help="tree: install prefix.")] = "/usr/local",
    libdir: Annotated[str, typer.Option(help="tree: library dir under the prefix.")] = "lib",
    includedir: Annotated[str, typer.Option(help="tree: header dir under the prefix.")] = "include",
    sitedir: Annotated[
        str | None, typer.Option(help="tree: site-packages under the prefix (lib/pythonX.Y/...).")
    ] = None,
    rpath: Annotated[
        Rpath, typer.Option(help="tree: RUNPATH relative to $ORIGIN, or none (--prefix /usr).")
    ] = Rpath.RELATIVE,
    compression_level: Annotated[
        int, typer.Option(min=1, max=22, help="conda: zstd level.")
    ] = DEFAULTS.compression_level,
    backend: Annotated[
        CondaBackend, typer.Option(help="conda: what packages the staged trees.")
    ] = CondaBackend.ASSEMBLE,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            help="conda: worker processes packaging at once (1: slower, less memory).",
        ),
    ] = DEFAULTS.jobs,
    guard: Annotated[
        bool, typer.Option("--guard", help="Add an import guard to the export package.")
    ] = False,
    as_json: JsonOpt = False,
    python: PythonOpt = None,
    platform: PlatformOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    traceback: TracebackOpt = False,
) -> None:
    """Build the packages of the plan (or of a release) for one target."""
    options = BuildOptions(
        target=target,
        guard=guard,
        prefix=prefix,
        libdir=libdir,
        includedir=includedir,
        sitedir=sitedir,
        rpath=rpath,
        compression_level=compression_level,
        backend=backend,
        jobs=jobs,
    )
    check_build_request(wheel or [], python, platform, target_limits(options))
    progress = show_progress(ctx, quiet, as_json)
    out_dir = output or Path("dist") / target.value
    request = Request(wheels=tuple(wheel or ()), recipe=recipe, python=python, platform=platform)
    with open_builder(options) as chosen:
        with progress_bar(progress) as bar:  # a bar of its own, gone when the plan is made
            result = open_request(request, reporter(bar, "planning"))
        with progress_bar(progress) as bar:
            built = build_output(chosen, result, out_dir, reporter(bar, f"building {target}"))
    if as_json:
        print(
            json.dumps(
                {
                    "target": target.value,
                    "output": str(out_dir),
                    "manifest": str(out_dir / MANIFEST),
                    "artifacts": [str(p) for p in built.artifacts],
                    "written": [str(p) for p in built.written],
                },
                indent=2,
            )
        )
    elif not quiet and not (ctx.obj.quiet if isinstance(ctx.obj, GlobalOptions) else False):
        facts = (
            result.release().groups[0].plans[0] if isinstance(result, ReleasePlanning) else result
        )
        show_summary(built, facts)
        if verbose or (ctx.obj.verbose if isinstance(ctx.obj, GlobalOptions) else False):
            for path in built.written:
                out.print(str(path), highlight=False, soft_wrap=True)


@app.command("diff")
def diff_command(
    ctx: typer.Context,
    old: Annotated[
        str, typer.Argument(help="The old wheel: a .whl path or a requirement (executorch==1.5.0).")
    ],
    new: Annotated[str, typer.Argument(help="The new wheel, likewise.")],
    recipe: Annotated[
        list[Path] | None,
        typer.Option(
            "--recipe",
            help="Recipe TOML (default: the shipped one); given twice, the old wheel's then "
            "the new one's.",
        ),
    ] = None,
    python: PythonOpt = None,
    platform: PlatformOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option("--exit-code", help="Exit 1 when anything changed, 0 when nothing did."),
    ] = False,
    abi: Annotated[
        bool,
        typer.Option("--abi", help="Add libabigail's abidiff report for each changed ELF library."),
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    traceback: TracebackOpt = False,
) -> None:
    """Compare the splits of two wheels (the next upstream release): per package, the files
    added, removed, changed and moved, the binaries' sonames, NEEDED, symbols and kernels,
    the metadata, and whether what was built against OLD keeps working with NEW. With
    --python/--platform, one comparison per platform and Python."""
    from splitter.plan.diff import diff_plans, pair_plans
    from splitter.plan.diffabi import abi_reports
    from splitter.plan.diffreport import diff_json, report_lines

    recipes: list[Path | None] = [*recipe] if recipe else [None]
    if len(recipes) > 2:
        raise UsageError("--recipe is given once (both wheels) or twice (old, then new)")
    progress = show_progress(ctx, quiet, as_json)
    paths = recipes * 2 if len(recipes) == 1 else recipes
    sides = []
    for spec, recipe_path in zip((old, new), paths, strict=True):
        request = Request(wheels=(spec,), recipe=recipe_path, python=python, platform=platform)
        with progress_bar(progress) as bar:
            sides.append(plans_of(plan_request(request, reporter(bar, "planning"))))
    pairs = pair_plans(*sides)
    found = [diff_plans(before, after) for before, after in pairs]
    abis = [abi_reports(*pair, f) if abi else [] for pair, f in zip(pairs, found, strict=True)]
    if as_json:
        shown = [diff_json(f, a if abi else None) for f, a in zip(found, abis, strict=True)]
        sys.stdout.write(json.dumps(shown[0] if len(shown) == 1 else {"pairs": shown}, indent=2))
        sys.stdout.write("\n")
    else:
        for index, (comparison, reports) in enumerate(zip(found, abis, strict=True)):
            if index:
                out.print("")
            for line in report_lines(comparison, reports):
                out.print(line, highlight=False, markup=False)
    if exit_code and any(f.changed for f in found):
        raise typer.Exit(1)


@app.command("verify")
def verify_command(
    out_dir: Annotated[Path, typer.Argument(help="A `splitter build` output directory.")],
    python: Annotated[
        list[Path] | None,
        typer.Option(
            help="Interpreter with torch, for the extension checks (repeatable: a release is "
            "checked for each Python given, else for each found on PATH as python3.X)."
        ),
    ] = None,
    cmake: Annotated[
        list[Path] | None, typer.Option(help="CMake executable to test with (repeatable).")
    ] = None,
    jobs: Annotated[int, typer.Option(help="Parallel co-load processes.")] = 2,
    only: Annotated[
        list[Only] | None,
        typer.Option(help="Run only these checks (repeatable; depends: .deb/.rpm only)."),
    ] = None,
    cross_cxx: Annotated[
        Path | None,
        typer.Option(
            help="C++ cross compiler for a Linux output of another architecture, whose checks "
            "run under qemu-user (default: <triplet>-g++ on PATH, e.g. aarch64-linux-gnu-g++)."
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Count every skipped check as failed (for CI: nothing skips silently)."
        ),
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    traceback: TracebackOpt = False,
) -> None:
    """Re-run the release checks on a built output: co-load matrix, CMake, relocation, model."""
    from splitter.verify.run import CHECKS  # verify and doctor load only when used
    from splitter.verify.run import verify as run_verify
    from splitter.verify.summary import strict as strictly
    from splitter.verify.summary import summarize

    system_cmake = shutil.which("cmake")
    cmakes = list(cmake or ([Path(system_cmake)] if system_cmake else []))
    wanted = tuple(only) if only else CHECKS
    checks = run_verify(out_dir, python or [], cmakes, jobs, wanted, cross_cxx)
    if strict:
        checks = strictly(checks)
    summary = summarize(checks)
    if as_json:
        report = {
            "output": str(out_dir),
            "ok": summary.ok,
            "strict": strict,
            "summary": summary.as_json(),
            "checks": [asdict(c) for c in checks],
        }
        print(json.dumps(report, indent=2))
    else:
        out.print(verify_table(checks))
        for line in summary.lines():
            out.print(line, highlight=False)
    if not summary.ok:
        raise typer.Exit(1)


@app.command()
def doctor(
    prefix: Annotated[
        Path | None, typer.Option(help="A conda prefix or a venv (both layouts are scanned).")
    ] = None,
    binary: Annotated[Path | None, typer.Option(help="An ELF file: its NEEDED closure.")] = None,
    pid: Annotated[
        int | None, typer.Option(help="A running process: its mapped libraries.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="A `splitter build` output (one wheel's or a release's): each environment "
            "a user would install from it.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    traceback: TracebackOpt = False,
) -> None:
    """Find libraries that register ExecuTorch kernels and copies that would (or do) collide."""
    from splitter.doctor.diagnose import diagnose_binary, diagnose_pid, diagnose_prefix
    from splitter.doctor.output import diagnose_output

    chosen = [x for x in (prefix, binary, pid, output) if x is not None]
    if len(chosen) != 1:
        raise UsageError(
            "doctor needs exactly one of --prefix DIR, --binary FILE, --pid N or --output DIR"
        )
    if output is not None:
        diagnoses = diagnose_output(output)
    elif prefix is not None:
        diagnoses = [diagnose_prefix(prefix)]
    elif binary is not None:
        diagnoses = [diagnose_binary(binary)]
    else:
        assert pid is not None
        diagnoses = [diagnose_pid(pid)]
    ok = all(d.ok for d in diagnoses)
    if as_json:
        if output is None:
            print(json.dumps(diagnoses[0].to_json(), indent=2))
        else:
            environments = [d.to_json() for d in diagnoses]
            print(
                json.dumps(
                    {"output": str(output), "ok": ok, "environments": environments}, indent=2
                )
            )
    else:
        for diagnosis in diagnoses:
            show_diagnosis(diagnosis, heading=output is not None)
    if not ok:
        raise typer.Exit(1)
