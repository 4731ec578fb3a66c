"""The ONNX Runtime drafter: prefix-conditioned (SD / SpecASR-ASP) and free-running (As²d source).

The prefix-conditioned drafter keeps its own KV cache and reuses the longest common prefix
between calls, so following the committed target prefix costs one catch-up call (up to 16
tokens each) plus one K=1 call per drafted token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from as2d_cli.engine.interfaces import Draft
from as2d_cli.errors import EngineError
from as2d_cli.models.loader import open_seq2seq
from as2d_cli.models.model_pair import ModelPair
from as2d_cli.models.session import Cross, softmax_max, truncate_cache

MAX_CALL = 16  # widest decoder call the export was checked for


class OrtDrafter:
    """Greedy continuation of the committed target prefix with softmax-max confidences."""

    def __init__(
        self, pair: ModelPair, threads: int = 1, name: str = "drafter", io: str | None = None
    ) -> None:
        self.model = open_seq2seq(pair, name, threads, io=io)
        self.eos_id = self.model.vocab.eot
        self._cross: Cross | None = None
        self._seq: list[int] = []  # tokens in the cache, the prompt first
        self._cache = self.model.empty_cache()
        self._next: tuple[int, float] | None = None  # greedy choice after _seq, if known

    def start(
        self,
        audio: np.ndarray,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        question: str | None = None,
    ) -> None:
        """Encode the request; ``hidden`` (the target's encoder states for it) replaces the
        audio encoding when this drafter shares the target's encoder."""
        self._cross = self.model.encode_request(audio, hidden, language, question)
        self._seq, self._cache, self._next = [], self.model.empty_cache(), None

    def _feed(self, tokens: list[int]) -> None:
        """Append ``tokens`` to the cache; remember the greedy choice after the last one."""
        assert self._cross is not None
        # From an empty cache the whole prompt goes in one call (an audio LLM's is hundreds
        # of tokens); after it, at most MAX_CALL tokens a call.
        first = max(MAX_CALL, len(self._cross.prompt)) if not self._seq else MAX_CALL
        for i in [0, *range(first, len(tokens), MAX_CALL)] if tokens else []:
            part = tokens[i : (first if i == 0 else i + MAX_CALL)]
            logits, self._cache = self.model.decode(part, self._cache, self._cross)
            self._seq += part
        last = logits[-1]
        self._next = (int(last.argmax()), float(softmax_max(last[None])[0]))

    def _sync(self, context: list[int]) -> None:
        """Make the cache hold exactly ``context`` (reusing the common prefix)."""
        common = 0
        for a, b in zip(self._seq, context):
            if a != b:
                break
            common += 1
        if common == len(context) and common == len(self._seq) and self._next is not None:
            return
        if common == len(
            context
        ):  # context is a strict prefix of the cache: recompute its last token
            common -= 1
        self._seq = self._seq[:common]
        self._cache = truncate_cache(self._cache, common)
        self._feed(context[common:])

    def refresh(self, prefix: Sequence[int], reused: Sequence[int]) -> None:
        """SpecASR recycling: put a reused draft suffix after the new ``prefix`` into the
        cache now, in one batched call (the next draft then starts from it)."""
        if self._cross is None:
            raise EngineError("drafter.refresh before start(audio)")
        context = [*self._cross.prompt, *(int(t) for t in prefix), *(int(t) for t in reused)]
        if len(context) <= self.model.max_positions:
            self._sync(context)

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Draft:
        if self._cross is None:
            raise EngineError("drafter.draft before start(audio)")
        if count <= 0:
            return Draft((), ())
        limit = self.model.max_positions - len(self._cross.prompt) - len(prefix)
        if (
            limit <= 0
        ):  # the prefix fills the drafter's positions (a drafter shorter than its target)
            return Draft((), ())
        self._sync([*self._cross.prompt, *(int(t) for t in prefix)])
        tokens: list[int] = []
        confs: list[float] = []
        while len(tokens) < min(count, limit):
            assert self._next is not None
            tok, conf = self._next
            tokens.append(tok)
            confs.append(conf)
            if stop_below is not None and (conf < stop_below or tok == self.eos_id):
                break
            if len(tokens) < min(count, limit):
                self._feed([tok])
        return Draft(tuple(tokens), tuple(confs))


def open_drafter(pair: ModelPair, threads: int = 1, name: str = "drafter") -> Any:
    """The pair's prefix-conditioned drafter: drafting through the text conversion when its
    tokenizer is not the target's (:class:`~as2d_cli.models.conversion.ConvertingDrafter`)."""
    drafter = OrtDrafter(pair, threads, name)
    if pair.converts(name):
        from as2d_cli.models.conversion import ConvertingDrafter

        return ConvertingDrafter(drafter, pair.vocab)
    return drafter
