"""The token suppression transformers' greedy generation applies, from a model's
``generation_config.json``: ``suppress_tokens`` at every step, ``begin_suppress_tokens`` at
the first generated token. Both Hugging Face adapters (Whisper, audio LLMs) apply it so
their logits' argmax is the model's greedy choice."""

from __future__ import annotations

import numpy as np


class Suppression:
    """The suppressed ids of one model (only ids its output layer has)."""

    __slots__ = ("every", "begin")

    def __init__(self, generation: dict, vocab_out: int) -> None:
        def ids(key: str) -> np.ndarray:
            raw = {int(t) for t in (generation.get(key) or []) if 0 <= int(t) < vocab_out}
            return np.asarray(sorted(raw), dtype=np.int64)

        self.every, self.begin = ids("suppress_tokens"), ids("begin_suppress_tokens")

    def apply(self, logits: np.ndarray, prompt_len: int, past: int) -> None:
        """Suppress in place in the logits of a call that processed tokens after ``past``
        cached positions of a request whose prompt is ``prompt_len`` tokens."""
        if self.every.size:
            logits[:, self.every] = -np.inf
        first = prompt_len - 1 - past  # the row that chooses the first generated token
        if self.begin.size and 0 <= first < len(logits):
            logits[first, self.begin] = -np.inf
