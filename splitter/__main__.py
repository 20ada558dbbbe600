"""`python -m splitter`, and the `splitter` console script.

The script imports `main` from here, not from splitter.cli, so that importing this module
stays cheap: anything that re-runs the script's imports in a child (multiprocessing's spawn
does) would otherwise import the whole CLI (typer, rich, pyelftools: ~0.45 s of CPU each).
"""


def main() -> None:
    """Run the CLI."""
    from splitter.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
