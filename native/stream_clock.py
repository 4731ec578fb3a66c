"""The stream's clock: seconds since the stream started, real or virtual.

The virtual clock skips the runner's idle waits (the time until the next block arrives)
while nothing else works — a source epoch still running gets that time really, as it would
in real time — and lets real work take its real time, so a paced stream in a test costs
only its processing. Other threads (the source worker's driver) wait on it without skipping.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

POLL_S = 0.02  # how often a waiting thread re-reads a virtual clock that may have jumped


class StreamClock(ABC):
    """Stream time in seconds; ``origin_ns`` is its start on ``time.perf_counter_ns`` (the
    engine's wall clock and the source worker's publications share that scale)."""

    def __init__(self) -> None:
        self.origin_ns = time.perf_counter_ns()

    @abstractmethod
    def now(self) -> float:
        """Seconds since the stream started."""

    @abstractmethod
    def idle_until(self, t: float, busy: Callable[[], bool] | None = None) -> None:
        """The runner has nothing to do until ``t`` (the next block's arrival); ``busy``:
        whether other work (the source worker's epoch) is still running meanwhile."""

    def wait_until(self, t: float, stop: threading.Event) -> bool:
        """Another thread waits for ``t``; False when ``stop`` is set first."""
        while True:
            left = t - self.now()
            if left <= 0:
                return True
            if stop.wait(min(left, POLL_S)):
                return False


class RealClock(StreamClock):
    """Wall time: arrivals are paced in real time."""

    def now(self) -> float:
        return (time.perf_counter_ns() - self.origin_ns) / 1e9

    def idle_until(self, t: float, busy: Callable[[], bool] | None = None) -> None:
        left = t - self.now()
        if left > 0:
            time.sleep(left)

    def wait_until(self, t: float, stop: threading.Event) -> bool:
        while (left := t - self.now()) > 0:
            if stop.wait(left):
                return False
        return True


class SkipClock(StreamClock):
    """Virtual time: real elapsed time (times ``rate``) plus every idle wait skipped so far.
    A ``rate`` above 1 makes every block's work look ``rate`` times longer against the
    block interval: a backlog that does not depend on this machine's speed."""

    def __init__(self, rate: float = 1.0) -> None:
        super().__init__()
        self.rate = rate
        self.skipped = 0.0
        self._lock = threading.Lock()
        self._moved = threading.Condition()  # a skip wakes the waiting threads at once

    def now(self) -> float:
        return (time.perf_counter_ns() - self.origin_ns) / 1e9 * self.rate + self.skipped

    def idle_until(self, t: float, busy: Callable[[], bool] | None = None) -> None:
        # Only time nobody works is skipped: while the source worker still runs an epoch it
        # would have had this time in real time too, so it passes really (up to ``t``).
        while busy is not None and busy() and self.now() < t:
            time.sleep(POLL_S / 4)
        with self._lock:
            self.skipped += max(0.0, t - self.now())
        with self._moved:
            self._moved.notify_all()

    def wait_until(self, t: float, stop: threading.Event) -> bool:
        while True:
            left = t - self.now()
            if left <= 0:
                return True
            if stop.is_set():
                return False
            with self._moved:  # woken by a skip, or after the time left really passes
                self._moved.wait(min(left / self.rate, POLL_S))


CLOCKS = {"real": RealClock, "virtual": SkipClock}
