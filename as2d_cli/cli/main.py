"""Combine every command's Typer app into the `as2d` command.

Each module listed in COMMANDS defines ``register(app: typer.Typer) -> None``. A command
module parses options, calls one core function and renders its result; core code never
imports this package.
"""

from __future__ import annotations

# The host process shares the machine with the local runner it measures: one BLAS thread
# here too (native/__init__.py), set before anything imports numpy, so no worker busy-waits
# on the core the runner's producer or target needs.
import native

native.limit_blas_threads()

import errno
import importlib
import signal
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

try:  # typer ≥ 0.17 carries its own copy of click
    from typer._click.exceptions import (
        BadParameter,
        ClickException,
        MissingParameter,
        NoArgsIsHelpError,
        UsageError,
    )
except ImportError:  # pragma: no cover - older typer on click
    # Older typer raises these very classes; mypy sees them as distinct from typer's copies.
    from click.exceptions import (  # type: ignore[assignment]
        BadParameter,
        ClickException,
        MissingParameter,
        UsageError,
    )

    class NoArgsIsHelpError(Exception):  # type: ignore[no-redef]  # click < 8.2 prints the help itself
        exit_code = 2


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
    "stream",
]

app = typer.Typer(
    name="as2d",
    help="Target-decoupled speculative decoding (As²d) for audio language models, measured on phones.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        expose_value=False,
        help="Print the version and exit.",
    ),
) -> None:
    """Target-decoupled speculative decoding (As²d) for audio language models, measured on phones."""


for _name in COMMANDS:
    importlib.import_module(f"as2d_cli.cli.{_name}").register(app)


def _error(message: str) -> None:
    """One line on stderr: ``error: <message>`` (the message is never read as markup)."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error:", "bold red"), " ", message)
    )


def _usage_line(exc: ClickException) -> str:
    """A usage error as one line; for an unknown or missing option or command, where to
    find the command's options."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if (
        isinstance(exc, UsageError)
        and (not isinstance(exc, BadParameter) or isinstance(exc, MissingParameter))
        and ctx is not None
    ):
        message += f" (see '{ctx.command_path} --help')"
    return message


def _os_error_line(exc: OSError) -> str:
    """An OSError that escaped the commands' own checks, naming the path it concerns."""
    what = exc.strerror or str(exc)
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{what}: {' -> '.join(paths)}" if paths else what


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; usage errors, every As2dError and any OSError on a path
    become one line on stderr (never a traceback) and a non-zero exit. Once the command
    has returned, a late Ctrl-C is ignored: the work is done and said."""
    try:
        rv = _run(sys.argv[1:] if argv is None else list(argv))
    except NoArgsIsHelpError as exc:  # the help was printed
        _exit(exc.exit_code)
    except ClickException as exc:
        _error(_usage_line(exc))
        _exit(exc.exit_code)
    except typer.Abort:
        _error("aborted")
        _exit(1)
    except As2dError as exc:
        _error(str(exc))
        _exit(exc.exit_code)
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted; results written so far are kept")
        _exit(130)
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # the reader went away (`as2d … | head`)
            _exit(1)
        _error(_os_error_line(exc))
        _exit(1)
    _exit(rv if isinstance(rv, int) else 0)


def _exit(code: int | None) -> NoReturn:
    """Exit with ``code``; a Ctrl-C arriving now (the command's work is over) is ignored
    rather than printed as a traceback over the finished output."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


def _run(args: list[str]) -> object:
    """Parse and invoke like typer's standalone mode, but let every exception reach
    ``main()`` (typer would turn Ctrl-C into a bare exit 130, dropping an Interrupted
    error's message): returns the exit code of a ``typer.Exit`` (help, --version)."""
    command = typer.main.get_command(app)
    try:
        with command.make_context("as2d", args) as ctx:
            return command.invoke(ctx)
    except typer.Exit as exc:
        return exc.exit_code
    except EOFError:
        raise typer.Abort() from None


if __name__ == "__main__":
    main()
