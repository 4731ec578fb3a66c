"""How core work tells the command running it what it is doing (the CLI draws it:
as2d_cli/cli/progress.py). Core code takes these callables and never prints itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Say = Callable[[str], None]  # a line of its own (a note or a warning)
Progress = Callable[[str, float, float], None]  # (label, done, total): how far the work is


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


class Ticker:
    """Tells ``progress`` every ``every_s`` seconds how far a wait of about ``total_s`` is
    (for work that runs elsewhere and says nothing until it ends, like a phone's capture)."""

    def __init__(
        self, progress: Progress | None, label: str, total_s: float, every_s: float = 1.0
    ) -> None:
        self.progress, self.label, self.total_s, self.every_s = progress, label, total_s, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.progress is None or self._thread is not None:
            return
        t0 = time.monotonic()
        progress = self.progress

        def tick() -> None:
            while not self._stop.wait(self.every_s):
                progress(self.label, min(time.monotonic() - t0, self.total_s), self.total_s)

        self._thread = threading.Thread(target=tick, name="as2d-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
