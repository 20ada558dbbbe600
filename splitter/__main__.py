"""`python -m splitter`, and the `splitter` console script.

The script imports `main` from here, not from splitter.cli.app, so that importing this module
stays cheap: anything that re-runs the script's imports in a child (multiprocessing's spawn
does) would otherwise import the whole CLI (typer, rich, pyelftools) in every child.
"""

# (youngest, middle, oldest): a collection of the youngest generation every 200,000 net
# allocations of containers, of the middle one every 30 of those, of all every 30 of those
GC_THRESHOLD = (200_000, 30, 30)


def main() -> None:
    """Run the CLI.

    The C heap is kept in one malloc arena (splitter.tools.one_malloc_arena). The garbage
    collector is frozen twice: after the imports, whose objects live as long as
    the process, so collections during the build do not walk them again; and at the end, so
    that finalization does not walk every object only to free them all. From the start it
    collects the youngest objects after GC_THRESHOLD allocations, not CPython's 700: a
    build's objects (members, plans, install plans, SBOMs) are tens of thousands of
    containers that mostly live until the build ends, and it makes few garbage cycles
    (pyelftools' readers are taken apart: splitter.binaries.elf), so the default threshold
    has it collect hundreds of times to free next to nothing (mypy raises its threshold for
    the same reason; docs/performance.md). What cycles there are are still collected, at
    the threshold."""
    import gc

    from splitter.tools import one_malloc_arena

    one_malloc_arena()
    gc.set_threshold(*GC_THRESHOLD)  # before the imports, which allocate as much as a build
    from splitter.cli.app import main as cli_main

    gc.freeze()
    try:
        cli_main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
