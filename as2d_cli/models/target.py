"""The ONNX Runtime target behind the engine's known-root Target protocol.

``start(audio)`` encodes the request and prefills its prompt (<sot> for the bundled models;
start of transcript, language, task and no-timestamps for Whisper), returning the first
token (selected during prefill; it becomes the first known root). ``verify`` processes the
root plus candidates in ONE decoder call and returns the greedy decision at every position;
``rollback`` slices the self-attention cache back to a committed length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from as2d_cli.errors import EngineError
from as2d_cli.models.loader import open_seq2seq
from as2d_cli.models.model_pair import ModelPair
from as2d_cli.models.session import Cross, cache_length, top2_margin, truncate_cache


class OrtTarget:
    """Greedy target over one request; ``length`` counts processed committed tokens."""

    def __init__(
        self, pair: ModelPair, threads: int = 1, name: str = "target", io: str | None = None
    ) -> None:
        self.model = open_seq2seq(pair, name, threads, io=io)
        self.eos_id = pair.vocab.eot
        self._prompt = len(
            self.model.prompt_for()
        )  # entries held in the cache before the committed tokens
        self._cross: Cross | None = None
        self._cache = self.model.empty_cache()
        self.last_margins: np.ndarray | None = (
            None  # top-2 logit margin per position of the last call
        )

    @property
    def max_length(self) -> int:
        """Committed tokens the cache can hold after the prompt (and, for a model with a
        generation limit — an audio LLM's ``max_new_tokens`` — at most that many)."""
        room = self.model.max_positions - self._prompt
        cap = getattr(self.model, "max_new_tokens", None)
        return room if cap is None else min(room, cap)

    def start(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> int:
        """Encode ``audio`` and prefill the request's prompt; returns the first token."""
        self.encode(audio, language, question)
        return self.prefill()

    def encode(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> None:
        """Encode ``audio`` (the first half of :meth:`start`; a stream times it apart)."""
        self._cross = self.model.encode(audio, language, question)
        self._prompt = len(self._cross.prompt)

    def prefill(self, context: Sequence[int] = ()) -> int:
        """Prefill the prompt and then ``context`` (committed text a stream carries over
        from earlier blocks; it counts as prompt, so ``length`` starts at 0); returns the
        first token."""
        if self._cross is None:
            raise EngineError("target.prefill before encode(audio)")
        prompt = [*self._cross.prompt, *(int(t) for t in context)]
        self._prompt = len(prompt)
        logits, self._cache = self.model.decode(prompt, self.model.empty_cache(), self._cross)
        self.last_margins = top2_margin(logits[-1:])
        return int(logits[-1].argmax())

    @property
    def hidden(self) -> np.ndarray | None:
        """The encoder's final states for the current request (a sharing drafter reads them)."""
        return None if self._cross is None else self._cross.hidden

    @property
    def length(self) -> int:
        return cache_length(self._cache) - self._prompt if self._cross is not None else 0

    def verify(self, tokens: Sequence[int]) -> list[int]:
        if self._cross is None:
            raise EngineError("target.verify before start(audio)")
        if not tokens:
            raise EngineError("target.verify needs at least the known root")
        logits, self._cache = self.model.decode(list(tokens), self._cache, self._cross)
        self.last_margins = top2_margin(logits)
        return [int(t) for t in logits.argmax(axis=-1)]

    def rollback(self, length: int) -> None:
        if length < 0 or length > self.length:
            raise EngineError(f"rollback to {length} outside the target state of {self.length}")
        keep = self._prompt + length
        self._cache = truncate_cache(self._cache, keep)


def greedy_decode(
    target: OrtTarget,
    audio: np.ndarray,
    limit: int | None = None,
    language: str | None = None,
    question: str | None = None,
) -> list[int]:
    """Target-only reference: first token from prefill, then one decoder call per token.

    Returns the committed tokens including the final EOS (if reached before ``limit``).
    """
    out = [target.start(audio, language, question)]
    limit = min(limit or target.max_length, target.max_length)
    while out[-1] != target.eos_id and len(out) < limit:
        out.append(target.verify([out[-1]])[0])
    return out
