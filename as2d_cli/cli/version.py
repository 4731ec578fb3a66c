"""`as2d version`: print the toolkit version."""

from __future__ import annotations

import typer

from as2d_cli import __version__


def version() -> None:
    """Print the toolkit version."""
    typer.echo(__version__)


def register(app: typer.Typer) -> None:
    app.command("version")(version)
