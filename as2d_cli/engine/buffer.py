"""The candidate buffer (paper C.1): ordered, immutable published batches.

A producer appends whole batches from its own thread; the verifier reads a snapshot of
what was published by a boundary time. Published tokens never change. The read cursor is
not stored here: it belongs to the consumer's alignment state, which is the only thing
that moves it.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from as2d_cli.errors import EngineError


@dataclass(frozen=True, slots=True)
class Batch:
    """One publication: provenance, position, time and tokens (already in target vocabulary)."""

    source_id: str
    producer_id: str
    offset: int  # index of the batch's first token in the source's sequence
    published_at: int  # ns, on the episode clock
    tokens: tuple[int, ...]
    confidences: tuple[float, ...] | None = None


class CandidateBuffer:
    """Append-only token buffer with per-batch publication times.

    ``publish`` may be called from a producer thread; readers call :meth:`ready_count`
    and index the flat ``tokens`` list below that count, which is safe because published
    entries are never modified (CPython list appends are atomic, the lock orders batches).
    """

    def __init__(self, source_id: str = "source", producer_id: str = "producer") -> None:
        self.source_id = source_id
        self.producer_id = producer_id
        self.batches: list[Batch] = []
        self.tokens: list[int] = []
        self.confidences: list[float | None] = []
        self._ends: list[int] = []  # cumulative token count after each batch
        self._times: list[int] = []  # publication time of each batch (non-decreasing)
        self._lock = threading.Lock()
        self.closed = False  # the producer finished (EOS, cap or stop)
        # Brings in publications that have arrived but wait outside (a worker process's
        # pipe) before every read; None: producers publish here themselves.
        self.pump: Callable[[], None] | None = None

    def publish(
        self,
        tokens: Sequence[int],
        published_at: int,
        confidences: Sequence[float] | None = None,
    ) -> Batch:
        """Append one immutable batch; publication times must not go backwards."""
        with self._lock:
            if self._times and published_at < self._times[-1]:
                raise EngineError("batches must be published in time order")
            if confidences is not None and len(confidences) != len(tokens):
                raise EngineError("one confidence per token")
            batch = Batch(
                self.source_id,
                self.producer_id,
                len(self.tokens),
                int(published_at),
                tuple(int(t) for t in tokens),
                None if confidences is None else tuple(float(c) for c in confidences),
            )
            self.confidences.extend(batch.confidences or (None,) * len(batch.tokens))
            self.tokens.extend(batch.tokens)
            self._ends.append(len(self.tokens))
            self._times.append(batch.published_at)
            self.batches.append(batch)
            return batch

    def close(self) -> None:
        self.closed = True

    def ready_count(self, now: int) -> int:
        """Number of tokens published at or before ``now``."""
        if self.pump is not None:
            self.pump()
        times = self._times
        n = len(times)  # read once: a concurrent publish only adds later batches
        if n == 0:
            return 0
        if times[n - 1] <= now:
            return self._ends[n - 1]
        i = bisect.bisect_right(times, now, 0, n)
        return self._ends[i - 1] if i else 0

    def __len__(self) -> int:
        return len(self.tokens)
