"""Targets: each turns a Plan into files on disk."""
