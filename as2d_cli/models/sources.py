"""Target-decoupled sources over the request audio (the As²d producers).

Both implement the engine's :class:`~as2d_cli.engine.interfaces.Source` protocol: one
object per request, ``start()`` prepares it (encoder pass, or for a drafter sharing the
target's encoder the projection of the target's encoder states), each ``step()`` is one unit of
source work, and ``None`` means finished. They see only the audio and their own history,
never the target's prefix.

- :class:`DrafterSource` ("autoregressive"): the drafter decoding greedily on its own
  history, one token with its softmax-max confidence per K=1 call; its EOS is the last
  token it returns.
- :class:`CtcSource` ("chunked"): the CTC recognizer over 2.56 s chunks, each chunk's text
  returned at once without confidences, converted into the target vocabulary through text
  (the BPE pre-tokenises on spaces, so per-chunk conversion equals converting the joined
  text). The last chunk ends with EOS (the audio is over). English only: callers fall back
  for other languages (paper D.4.3) — see :meth:`CtcRecognizer.eligible`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from as2d_cli.errors import EngineError
from as2d_cli.models.contract import DecoderModel
from as2d_cli.models.ctc import CHUNK_SECONDS, ChunkedRecognizer, greedy_ctc  # noqa: F401  (re-exported)
from as2d_cli.models.external_ctc import ExternalCtc
from as2d_cli.models.features import log_mel
from as2d_cli.models.model_pair import ModelPair
from as2d_cli.models.session import (
    Cross,
    _check_io,
    cache_length,
    make_session,
    softmax_max,
    truncate_cache,
)


class DrafterSource:
    """The drafter as an independent producer (Qwen3-ASR 0.6B's role in the paper)."""

    source_id = "drafter"
    kind = "autoregressive"

    def __init__(
        self,
        model: DecoderModel,
        audio: np.ndarray,
        limit: int | None = None,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        prefix: Sequence[int] = (),
        question: str | None = None,
    ) -> None:
        self.model = model
        self.audio = audio
        # The target's encoder states for this request, when the drafter shares the target's
        # encoder: start() is then only the drafter's cross-attention projection.
        self.hidden = hidden
        self.language = language
        # The source's own earlier output over the same audio (a stream's context), forced
        # after the prompt: it then drafts only what follows. Never the target's text.
        self.prefix = [int(t) for t in prefix]
        self.question = question
        self._asked = limit  # the cap asked for; the request's prompt bounds it in start()
        room = model.max_positions - len(model.prompt_for(language)) - len(self.prefix)
        self.limit = min(limit or room, room)
        self.eos_id = model.vocab.eot
        self.tokens: list[int] = []
        self._cross: Cross | None = None
        self._cache = model.empty_cache()
        self._done = False

    def start(self) -> None:
        self._cross = self.model.encode_request(
            self.audio, self.hidden, self.language, self.question
        )
        room = self.model.max_positions - len(self._cross.prompt) - len(self.prefix)
        cap = getattr(self.model, "max_new_tokens", None)
        room = room if cap is None else min(room, cap)
        self.limit = min(self._asked or room, room)

    def step(self) -> Sequence[tuple[int, float | None]] | None:
        if self._cross is None:
            raise EngineError("source.step before start()")
        if self._done or len(self.tokens) >= self.limit:
            return None
        step = [self.tokens[-1]] if self.tokens else [*self._cross.prompt, *self.prefix]
        logits, self._cache = self.model.decode(step, self._cache, self._cross)
        tok = int(logits[-1].argmax())
        self.tokens.append(tok)
        self._done = tok == self.eos_id
        return [(tok, float(softmax_max(logits[-1:])[0]))]


class LookaheadSource(DrafterSource):
    """The drafter checking its own look-ahead guesses (``lookahead``, autoregressive).

    Its decoder file carries a head that guesses, at each position, the token after the
    greedy one (training/train_ahead.py). Each forward feeds the last emitted token and the
    guess for the token after it (K=2): the guess is kept when it is the drafter's greedy
    choice there, and then the forward's second position gives one more token. So a step
    emits one or two tokens, each the drafter's greedy choice after its own history (the
    drafter source's sequence, up to the rounding of two-token calls by the 8-bit decoder);
    only the pace changes. A rejected guess's position is dropped from the cache."""

    source_id = "lookahead"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guess: int | None = None

    def step(self) -> Sequence[tuple[int, float | None]] | None:
        if self._cross is None:
            raise EngineError("source.step before start()")
        if self._done or len(self.tokens) >= self.limit:
            return None
        if not self.tokens:
            feed = [*self._cross.prompt, *self.prefix]
        elif self._guess is None:
            feed = [self.tokens[-1]]
        else:
            feed = [self.tokens[-1], self._guess]
        logits, ahead, cache = self.model.decode_ahead(feed, self._cache, self._cross)  # type: ignore[attr-defined]
        # The position after the last emitted token: the last fed one, or the first when a
        # guess follows it.
        at = 0 if len(feed) == 2 and self.tokens else len(feed) - 1
        confs = softmax_max(logits[at : at + 2])  # the rows emitted from (a prompt has more)
        tok = int(logits[at].argmax())
        out: list[tuple[int, float | None]] = [(tok, float(confs[0]))]
        kept = (
            at + 1 < len(feed)
            and tok == feed[at + 1]
            and tok != self.eos_id
            and len(self.tokens) + 2 <= self.limit
        )
        if kept:
            second = int(logits[at + 1].argmax())
            out.append((second, float(confs[1])))
            self._guess = int(ahead[at + 1].argmax())
            self._cache = cache
        else:
            self._guess = int(ahead[at].argmax())
            self._cache = truncate_cache(cache, cache_length(cache) - (len(feed) - 1 - at))
        self.tokens += [t for t, _ in out]
        self._done = self.tokens[-1] == self.eos_id
        return out


def drafter_source(
    name: str, model: DecoderModel, audio: np.ndarray, target_vocab: Any = None, **kw: Any
) -> Any:
    """The autoregressive source ``name`` over ``model`` (for ``lookahead``, the drafter
    opened with its look-ahead decoder); keywords as :class:`DrafterSource`. A model whose
    tokenizer is not ``target_vocab`` (the pair's) drafts through the text conversion
    (:class:`~as2d_cli.models.conversion.ConvertingSource`)."""
    src = (LookaheadSource if name == "lookahead" else DrafterSource)(model, audio, **kw)
    if target_vocab is not None and model.vocab is not target_vocab:
        from as2d_cli.models.conversion import ConvertingSource

        return ConvertingSource(src, target_vocab)
    return src


class CtcRecognizer(ChunkedRecognizer):
    """The chunked CTC model (Parakeet CTC's role): one ORT session, English only."""

    def __init__(self, pair: ModelPair, threads: int = 1) -> None:
        info = pair.model("ctc")
        path = pair.path(info["files"]["model"])
        self.session = make_session(path, threads)
        _check_io(self.session, path, ["mel"], ["log_probs"])
        self.chars = pair.ctc_chars()
        self._chunking(pair, info)

    def transcribe(self, samples: np.ndarray) -> str:
        """Greedy CTC text of one chunk (blank-collapsed)."""
        if len(samples) < 400:  # shorter than one encoder frame's receptive field: no speech
            return ""
        lp = self.session.run(None, {"mel": log_mel(samples)[None]})[0][0]
        return " ".join("".join(self.chars[i] for i in greedy_ctc(lp.argmax(axis=-1), 0)).split())


def open_ctc(pair: ModelPair, threads: int = 1) -> Any:
    """The pair's chunked CTC recognizer (``ctc`` in its manifest): the bundled one, or an
    external ONNX CTC model (:mod:`as2d_cli.models.external_ctc`)."""
    from as2d_cli.errors import UserError

    if not pair.has("ctc"):
        raise UserError(
            f"the model pair {pair.directory} has no CTC source; use --source drafter, "
            "or import the pair with --ctc DIR"
        )
    kind = pair.model("ctc")["kind"]
    if kind == "ctc-onnx":
        return ExternalCtc(pair, threads)
    return CtcRecognizer(pair, threads)


class CtcSource:
    source_id = "ctc"
    kind = "chunked"

    def __init__(self, recognizer: CtcRecognizer, audio: np.ndarray) -> None:
        self.rec = recognizer
        self.audio = audio
        self.starts = list(range(0, max(len(audio), 1), recognizer.chunk_samples))
        self.texts: list[str] = []
        self._said = False  # some text published already (the next chunk's words follow it)
        self._next = 0
        self._started = False

    def start(self) -> None:
        self._started = True  # nothing to prefill: each chunk is independent

    def step(self) -> Sequence[tuple[int, float | None]] | None:
        if not self._started:
            raise EngineError("source.step before start()")
        if self._next >= len(self.starts):
            return None
        s = self.starts[self._next]
        text = self.rec.transcribe(self.audio[s : s + self.rec.chunk_samples])
        self.texts.append(text)
        tokens = self.rec.vocab.encode(text, start=not self._said)
        self._said = self._said or bool(tokens)
        self._next += 1
        if self._next == len(self.starts):
            tokens.append(self.rec.vocab.eot)
        return [(t, None) for t in tokens]
