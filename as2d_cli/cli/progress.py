"""The commands' progress bar: transient, on stderr, and silent where stderr is no terminal."""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress, ProgressColumn


def progress_bar(*columns: str | ProgressColumn) -> Progress:
    """A transient bar on stderr. Off a terminal rich draws nothing but leaves a blank line
    when it stops — before a command's one-line error too — so there it is disabled."""
    console = Console(stderr=True)
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)
