"""The model-pair contract: what the target, the drafter and the sources need of a model.

A model pair is a folder with an ``as2d.models`` manifest (docs/models.md). Each of its
encoder-decoder models is loaded by :func:`as2d_cli.models.loader.open_seq2seq` into an object with the
:class:`DecoderModel` interface; the engine's target (:class:`~as2d_cli.models.target.OrtTarget`),
the prefix-conditioned drafter (:class:`~as2d_cli.models.drafter.OrtDrafter`), the As²d
drafter source, trace generation and calibration are written against this interface only.
Three implementations exist, opened by :data:`as2d_cli.models.loader.KINDS`: the bundled
models (``kind: seq2seq``, :class:`~as2d_cli.models.session.Seq2SeqModel`), Hugging Face
Whisper exports in the Optimum ONNX layout (``kind: whisper-onnx``,
:class:`~as2d_cli.models.whisper.WhisperModel`) and audio language models in the
ONNX-community layout (``kind: audio-llm-onnx``, :class:`~as2d_cli.models.audio_llm.AudioLlmModel`).

A decoder cache is ``(keys, values)``: per decoder layer one array (1, H, P, d/H) of the P
processed positions (H: the key/value heads, fewer than the query heads under grouped-query
attention) — a numpy array, or the OrtValue ONNX Runtime returned when the adapter keeps its
values in ORT (``io``, :mod:`as2d_cli.models.ortio`). A cache is read only through
:func:`~as2d_cli.models.session.cache_length` and
:func:`~as2d_cli.models.ortio.as_array`, rolled back (P sliced) only by
:func:`~as2d_cli.models.session.truncate_cache`, and never changed in place: a cache may be
decoded from any number of times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass
class Cross:
    """Per-request encoder output: every decoder layer's cross-attention K/V (a stacked
    array or a tuple of per-layer arrays, each layer (1, H, S, d/H); a model that computes
    them in its first decoder call leaves them None until then), the encoder's final states
    (``hidden``, which a drafter sharing this encoder reads) and the request's prompt: the
    tokens the decoder processes before the first generated one."""

    k: Any
    v: Any
    hidden: np.ndarray | None = None
    prompt: tuple[int, ...] = ()
    # An audio language model's: the prompt positions whose rows are the audio embeddings
    # (``hidden``, (1, N, d), in order) instead of their tokens' embeddings.
    audio_at: np.ndarray | None = None
    # The decoding model's per-request ONNX Runtime feeds (ortio.RequestFeeds), made on its
    # first decoder call under io="ortvalue": the constant inputs wrapped once.
    feeds: Any = field(default=None, repr=False, compare=False)

    @property
    def frames(self) -> int:
        if self.k is not None:
            return int(self.k[0].shape[2])
        return 0 if self.hidden is None else int(self.hidden.shape[1])


# A decoder cache: every layer's self-attention keys, then values, each (1, H, P, d/H): numpy
# arrays or onnxruntime OrtValues (which have no static types).
Cache = tuple[tuple[Any, ...], tuple[Any, ...]]


@runtime_checkable
class DecoderModel(Protocol):
    """One encoder-decoder: encode a request once, then decoder calls of K tokens over a cache."""

    name: str
    vocab: Any  # the pair's tokenizer (encode, decode, size, sot, eot)
    max_positions: int  # decoder positions, prompt included

    def prompt_for(
        self, language: str | None = None, question: str | None = None
    ) -> tuple[int, ...]:
        """The tokens processed before the first generated one (for Whisper: start of
        transcript, language, task, no-timestamps; for an audio LLM: its rendered chat
        template, the audio placeholder not yet expanded — a request's own prompt is
        :attr:`Cross.prompt`)."""
        ...

    def encode_request(
        self,
        audio: np.ndarray,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        question: str | None = None,
    ) -> Cross:
        """Encode one request's audio (or read ``hidden``, the encoder states of the model
        whose encoder this one shares); the result carries the request's prompt.
        ``language``: the window's spoken language; ``question``: the window's own question
        (``--task answer`` without ``--question``)."""
        ...

    def encode(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> Cross: ...

    def shares_encoder_of(self, other: Any) -> bool: ...

    def empty_cache(self) -> Cache: ...

    def decode(self, tokens: Sequence[int], past: Cache, cross: Cross) -> tuple[np.ndarray, Cache]:
        """Process ``tokens`` after the ``past`` positions in ONE call: the logits (K, V)
        at each of the K positions — with any token suppression the model's own greedy
        decoding applies, so their argmax is its greedy choice — and the present cache."""
        ...
