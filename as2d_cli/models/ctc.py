"""What every chunked CTC recognizer shares: the chunking contract a CTC source relies
on and greedy CTC decoding. The bundled recognizer (:mod:`as2d_cli.models.sources`) and
external ONNX CTC models (:mod:`as2d_cli.models.external_ctc`) build on it."""

from __future__ import annotations

from typing import Any

import numpy as np

from as2d_cli.models.features import SAMPLE_RATE
from as2d_cli.models.model_pair import ModelPair

CHUNK_SECONDS = 2.56


class ChunkedRecognizer:
    """What a :class:`CtcSource` needs of a CTC model: the target's tokenizer, the languages
    it serves, its chunk length, and ``transcribe(samples) -> text``."""

    vocab: Any
    languages: tuple[str, ...]
    chunk_samples: int

    def _chunking(self, pair: ModelPair, info: dict) -> None:
        self.vocab = pair.vocab
        self.languages = tuple(info.get("languages", ["en"]))
        self.chunk_samples = int(
            round(float(info.get("chunk_seconds", CHUNK_SECONDS)) * SAMPLE_RATE)
        )

    def eligible(self, language: str) -> bool:
        return language in self.languages


def greedy_ctc(best: np.ndarray, blank: int) -> list[int]:
    """Greedy CTC over per-frame best ids: repeats collapsed, blanks dropped."""
    out, prev = [], -1
    for i in best:
        i = int(i)
        if i != prev and i != blank:
            out.append(i)
        prev = i
    return out
