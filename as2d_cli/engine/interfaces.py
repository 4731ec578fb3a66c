"""What the engine needs from the outside world: a target, a prefix-conditioned drafter.

The engine is written against these small protocols only. Real models (ONNX Runtime),
trace-backed stand-ins for replay, and the property tests' reference target all implement
them. Target-decoupled sources do not appear here: a producer publishes batches into a
:class:`~as2d_cli.engine.buffer.CandidateBuffer` on its own schedule, and the engine only
reads published snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class Target(Protocol):
    """The target model behind the known-root convention.

    The state holds the *processed* committed tokens (the KV cache after the prompt). The
    last committed token, the known root, is held back: the next call processes it first.
    """

    def verify(self, tokens: Sequence[int]) -> Sequence[int]:
        """Process ``tokens`` (``tokens[0]`` is the known root, the rest candidates) after
        the current state in one call and return the greedy next-token decision at each of
        the ``len(tokens)`` positions. The state grows by ``len(tokens)`` entries."""
        ...

    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` processed tokens (drop rejected entries)."""
        ...

    @property
    def length(self) -> int:
        """Number of processed tokens in the state."""
        ...


@dataclass(frozen=True, slots=True)
class Draft:
    """A prefix-conditioned drafter's proposal: tokens and per-token confidence (or None)."""

    tokens: tuple[int, ...]
    confidences: tuple[float, ...] | None = None


@runtime_checkable
class Drafter(Protocol):
    """A drafter conditioned on the committed target prefix (standard SD and SpecASR-ASP)."""

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Draft:
        """Greedy continuation of ``prefix`` (the committed tokens, root last).

        Returns at most ``count`` tokens. With ``stop_below`` set, stops after the first
        token whose confidence is below it (that token included) or at the drafter's EOS;
        without it, drafts exactly ``count`` tokens, past its own EOS if need be."""
        ...

    # Optional: ``refresh(prefix, reused)`` — SpecASR recycling reuses a rejected draft's
    # suffix after ``prefix``; a drafter with this method recomputes that suffix's state in
    # one batched call (the engine charges it as the ``refresh`` op). Without it the
    # refresh costs nothing at run time (replay drafters hold no state).


@runtime_checkable
class Source(Protocol):
    """A target-decoupled producer's model side: it never sees target text or target KV.

    A driver (the native runner's producer thread, or the replay's simulated timeline)
    calls :meth:`start` once (source preparation/prefill: producer work inside the decode
    clock), then :meth:`step` repeatedly. Each step is one unit of source work: one
    autoregressive token, or one whole chunk for a chunked source. The driver publishes:
    an autoregressive source every ``batch`` tokens (and its final partial batch at its
    EOS or cap), a chunked source each chunk at once.
    """

    source_id: str
    kind: str  # "autoregressive" | "chunked"

    def start(self) -> None:
        """Prepare the source for the request (encode audio, prefill its own prompt)."""
        ...

    def step(self) -> Sequence[tuple[int, float | None]] | None:
        """Next unit of work: ``[(token, confidence or None), ...]`` in the target
        vocabulary, or None when the source has finished (its EOS, cap or last chunk)."""
        ...
