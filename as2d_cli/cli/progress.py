"""The commands' progress: a transient rich bar with its ETA on a terminal, plain lines on
stderr elsewhere (a CI log shows how far a long command got), nothing with ``--quiet``."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

PLAIN_EVERY_S = 10.0  # off a terminal: at most one line this often (and every change of phase)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


class Steps:
    """Progress of one long command: ``update(label, done, total)`` as the work advances.

    On a terminal it draws a bar with the elapsed time and the time left; elsewhere it
    prints ``what: label — done/total (p %), elapsed, about … left`` at most every
    PLAIN_EVERY_S seconds and whenever the label's phase (its text before a colon) changes;
    with ``quiet`` it says nothing. ``count`` shows done/total as whole units (windows,
    runs); otherwise only the percentage."""

    def __init__(
        self, what: str, *, quiet: bool = False, count: bool = True, stream: TextIO | None = None
    ) -> None:
        self.what = what
        self.quiet = quiet
        self.count = count
        self.stream = stream
        self.terminal = (stream or sys.stderr).isatty() if not quiet else False
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._last = -PLAIN_EVERY_S
        self._phase = ""

    def __enter__(self) -> Steps:
        self._t0 = time.monotonic()
        if self.terminal:
            cols: list[str | ProgressColumn] = [TextColumn("{task.description}"), BarColumn()]
            if self.count:
                cols.append(MofNCompleteColumn())
            cols += [TimeElapsedColumn(), TimeRemainingColumn()]
            self._bar = Progress(*cols, console=Console(stderr=True), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)

    def note(self, text: str, always: bool = False) -> None:
        """A line of its own: above the bar on a terminal, plainly elsewhere; with ``quiet``
        only a warning (a line starting ``warning:``) or one that is ``always`` said (what
        the user must do)."""
        if self.quiet and not (always or text.startswith("warning:")):
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream or sys.stderr, flush=True)

    def update(self, label: str, done: float, total: float | None) -> None:
        """``label``: what runs now (its text before a colon is its phase); a ``Progress``."""
        if self.quiet:
            return
        desc = f"{self.what}: {label}" if label else self.what
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total, description=desc)
            return
        now = time.monotonic()
        phase = label.split(":")[0] if ":" in label else ""
        if now - self._last < PLAIN_EVERY_S and phase == self._phase and done != total:
            return
        self._last, self._phase = now, phase
        print(
            self.line(done, total, label, now - self._t0),
            file=self.stream or sys.stderr,
            flush=True,
        )

    def line(self, done: float, total: float | None, label: str, elapsed: float) -> str:
        """The plain progress line (off a terminal)."""
        head = f"{self.what}: {label}" if label else self.what
        if not total:
            return f"{head} — {_duration(elapsed)} elapsed"
        frac = max(0.0, min(1.0, done / total))
        part = f"{done:.0f}/{total:.0f} ({frac:.0%})" if self.count else f"{frac:.0%}"
        left = f", about {_duration(elapsed / frac * (1 - frac))} left" if 0 < frac < 1 else ""
        return f"{head} — {part}, {_duration(elapsed)} elapsed{left}"
