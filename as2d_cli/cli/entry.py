"""The `as2d` console script: the command line imported inside a Ctrl-C guard.

Importing the commands (typer, rich, numpy and the command modules) takes a few tenths of
a second; a Ctrl-C then would otherwise print a traceback before ``main()``'s own handler
exists. This module imports nothing heavy itself.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Import the command line, then run it (:func:`as2d_cli.cli.main.main`)."""
    try:
        from as2d_cli.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted before the command started; nothing was written\n")
        raise SystemExit(130) from None
    run()
