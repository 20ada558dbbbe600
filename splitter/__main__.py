"""`python -m splitter`, and the `splitter` console script.

The script imports `main` from here, not from splitter.cli.app, so that importing this module
stays cheap: anything that re-runs the script's imports in a child (multiprocessing's spawn
does) would otherwise import the whole CLI (typer, rich, pyelftools) in every child.
"""


def main() -> None:
    """Run the CLI.

    The C heap is kept in one malloc arena (splitter.tools.one_malloc_arena). The garbage
    collector is frozen twice: after the imports, whose objects live as long as
    the process, so collections during the build do not walk them again; and at the end, so
    that finalization does not walk every object only to free them all."""
    import gc

    from splitter.tools import one_malloc_arena

    one_malloc_arena()
    from splitter.cli.app import main as cli_main

    gc.freeze()
    try:
        cli_main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
