"""How core work tells the command running it what it is doing (the CLI draws it:
as2d_cli/cli/progress.py). Core code takes these callables and never prints itself."""

from __future__ import annotations

from typing import Callable

Say = Callable[[str], None]  # a line of its own (a note or a warning)
Progress = Callable[[str, float, float], None]  # (label, done, total): how far the work is


def silent(_: str) -> None:
    """A ``Say`` that says nothing."""


def settle_waiting(
    progress: Progress | None, quiet_s: float, done: float = 0.0, total: float = 1.0
) -> Callable[[float, int], None] | None:
    """A settle wait (device_agents.gating.settle) told as progress: how long it has waited
    and how long the host has been quiet; ``done``/``total``: where the work stands."""
    if progress is None:
        return None

    def waiting(waited: float, quiet: int) -> None:
        progress(
            f"waiting for a quiet host: {quiet} of {quiet_s:.0f} s quiet, waited {waited:.0f} s",
            done,
            total,
        )

    waiting(0.0, 0)
    return waiting
