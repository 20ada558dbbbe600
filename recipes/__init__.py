"""Recipes shipped with splitter; a package only so that installed copies carry them."""
