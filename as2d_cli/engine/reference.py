"""Reference targets and drafters built from plain data, for tests, replay and conformance.

* :class:`FunctionTarget` — a target whose greedy decision is a pure function of the
  processed prefix, so batched and sequential decisions are identical by construction.
  The exactness property tests drive every policy against it.
* :class:`SequenceTarget` — a trace-backed target that knows only its greedy reference
  (what replay has); it refuses a root that is off the reference path.
* :class:`SequenceDrafter` — a prefix-conditioned drafter answering from stored
  continuations at every target-path position (what traces store for SD and ASP).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from as2d_cli.engine.interfaces import Draft
from as2d_cli.errors import EngineError


class FunctionTarget:
    """Greedy decisions from ``decide(processed_prefix) -> token``."""

    def __init__(self, decide: Callable[[tuple[int, ...]], int]) -> None:
        self._decide = decide
        self.state: list[int] = []
        self.calls: list[int] = []  # physical width of every call

    @property
    def length(self) -> int:
        return len(self.state)

    def verify(self, tokens: Sequence[int]) -> list[int]:
        self.calls.append(len(tokens))
        out = []
        for t in tokens:
            self.state.append(int(t))
            out.append(self._decide(tuple(self.state)))
        return out

    def rollback(self, length: int) -> None:
        if length < 0 or length > len(self.state):
            raise EngineError(f"rollback to {length} outside state of {len(self.state)}")
        del self.state[length:]


def greedy_reference(
    decide: Callable[[tuple[int, ...]], int], first_token: int, eos_id: int, max_tokens: int
) -> list[int]:
    """The target's greedy output run one token at a time (the reference execution)."""
    out = [first_token]
    while out[-1] != eos_id and len(out) < max_tokens:
        out.append(decide(tuple(out)))
    return out


class SequenceTarget:
    """A target that answers from its greedy reference ``tokens`` (first token included).

    Decisions after an off-path candidate are never used by a correct engine (only the
    first mismatch matters), so they are answered from the reference too; a root that is
    off the reference path is an engine error."""

    __slots__ = ("ref", "_len", "_pad")

    def __init__(self, tokens: Sequence[int], pad: int = -1) -> None:
        self.ref = list(tokens)
        self._len = 0
        self._pad = pad

    @property
    def length(self) -> int:
        return self._len

    def verify(self, tokens: Sequence[int]) -> list[int]:
        n = self._len
        ref = self.ref
        if n >= len(ref) or tokens[0] != ref[n]:
            raise EngineError(f"root {tokens[0]} at position {n} is off the target reference")
        k = len(tokens)
        out = ref[n + 1 : n + 1 + k]
        if len(out) < k:
            out = out + [self._pad] * (k - len(out))
        self._len = n + k
        return out

    def rollback(self, length: int) -> None:
        self._len = length


class SequenceDrafter:
    """Prefix-conditioned drafts from stored continuations keyed by target-path position.

    ``continuations[n]`` is the drafter's greedy continuation after the reference prefix
    of length ``n + 1`` (root at index n), with ``confidences[n]`` alongside when known.
    """

    def __init__(
        self,
        reference: Sequence[int],
        continuations: Mapping[int, Sequence[int]] | Sequence[Sequence[int]],
        confidences: Mapping[int, Sequence[float]] | Sequence[Sequence[float]] | None = None,
        eos_id: int | None = None,
    ) -> None:
        self.reference = list(reference)
        self.continuations = continuations
        self.confidences = confidences
        self.eos_id = eos_id

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Draft:
        n = len(prefix) - 1
        if n >= len(self.reference) or prefix[-1] != self.reference[n]:
            raise EngineError(f"draft requested off the target path at position {n}")
        cont = list(self.continuations[n])[:count]
        conf = None if self.confidences is None else list(self.confidences[n])[: len(cont)]
        if stop_below is not None:
            cut = len(cont)
            for i, t in enumerate(cont):
                if (conf is not None and conf[i] < stop_below) or (
                    self.eos_id is not None and t == self.eos_id
                ):
                    cut = i + 1
                    break
            cont = cont[:cut]
            conf = None if conf is None else conf[:cut]
        return Draft(tuple(cont), None if conf is None else tuple(conf))
