"""`python -m splitter`."""

from splitter.cli import main

main()
