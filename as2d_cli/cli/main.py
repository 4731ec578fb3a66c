"""Combine every command's Typer app into the `as2d` command.

Each module listed in COMMANDS defines ``register(app: typer.Typer) -> None``. A command
module parses options, calls one core function and renders its result; core code never
imports this package.
"""

from __future__ import annotations

# The host process shares the machine with the local runner it measures: importing the
# runner's package first keeps numpy's OpenBLAS to one thread here too (native/__init__.py),
# so no worker busy-waits on the core the runner's producer or target needs.
import native  # noqa: F401  (before anything imports numpy)

import importlib
import sys

import typer
from rich.console import Console

from as2d_cli import __version__
from as2d_cli.errors import As2dError

# Module names under as2d_cli.cli; add one line per new command module.
COMMANDS: list[str] = [
    "version",
    "decode",
    "calibrate",
    "eval",
    "traces",
    "energy",
    "devices",
    "emulator",
    "bundle",
    "corpus",
    "replay",
    "select_budget",
    "models",
    "compare",
    "report",
]

app = typer.Typer(
    name="as2d",
    help="Target-decoupled speculative decoding (As²d) for audio language models, measured on phones.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)



@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    """Target-decoupled speculative decoding (As²d) for audio language models, measured on phones."""
    if version:
        typer.echo(__version__)
        raise typer.Exit()


for _name in COMMANDS:
    importlib.import_module(f"as2d_cli.cli.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every As2dError into one line on stderr."""
    try:
        app(args=argv)  # standalone: usage errors print click's short message and exit 2
    except As2dError as exc:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {exc}", markup=True
        )
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted; results written so far are kept")
        sys.exit(130)


if __name__ == "__main__":
    main()
