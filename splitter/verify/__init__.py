"""splitter verify: re-run the release checks on a built output."""
