"""The thin command-line layer: one small Typer app per command, combined in main.py."""
