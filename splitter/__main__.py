"""`python -m splitter`, and the `splitter` console script.

The script imports `main` from here, not from splitter.cli: the build's spawned worker
processes re-run the script's imports as `__mp_main__`, and importing the CLI (typer, rich,
pyelftools: ~0.45 s of CPU per worker, measured) would compete with the build for the cores.
"""


def main() -> None:
    """Run the CLI."""
    from splitter.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
