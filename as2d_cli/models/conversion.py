"""Drafting across vocabularies: a model with another tokenizer proposes the target's tokens.

A drafter whose tokenizer is not the target's (manifest ``conversion: text``: a Whisper
decoder drafting for an audio LLM, an audio LLM of another family) drafts through text
(the paper's Appendix A.1 conversion, which the CTC source applies per chunk): its tokens
are decoded to text and re-encoded with the target's tokenizer.

* :class:`TextConversion` — the As²d source side. Only the prefix that can no longer
  change when more text arrives is published: the text up to the last space (the target's
  tokenizer splits words at spaces, as every BPE of Whisper, Qwen, Llama and Mistral does,
  so later text cannot change how the words before that space are tokenized). The rest is
  published when the source ends with its EOS (then followed by the target's EOS). Each
  token published in a step carries the smallest confidence of the source tokens read
  since the previous publication.
* :class:`ConvertingSource` — any autoregressive source wrapped in that conversion.
* :class:`ConvertingDrafter` — the prefix-conditioned drafter (SD, SpecASR-ASP) wrapped:
  the target's committed prefix as text, re-encoded for the drafter; its draft back to
  the target's tokens, whole words only unless it ended.

The conversion never touches what is committed: every candidate is verified by the target
like any other. Its cost is counted (``convert_ns``, tokens published) for
``models check`` and the conversion benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from as2d_cli.engine.interfaces import Draft


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def stable_text(text: str, final: bool) -> str:
    """The part of ``text`` whose tokenization can no longer change: all of it when the
    text has ended, else everything before its last space."""
    text = " ".join(text.split())
    if final:
        return text
    cut = text.rfind(" ")
    return text[:cut] if cut > 0 else ""


class TextConversion:
    """Source tokens in, the target's stable tokens out (see the module docstring)."""

    def __init__(self, source_vocab: Any, target_vocab: Any) -> None:
        self.src, self.dst = source_vocab, target_vocab
        self.tokens: list[int] = []  # the source's tokens so far (its EOS excluded)
        self.published: list[int] = []
        self._conf: float | None = None
        self.ended = False
        self.convert_ns = 0
        self.held_back = 0  # steps whose re-encoding did not extend what was published

    def feed(
        self, tokens: Sequence[tuple[int, float | None]], final: bool = False
    ) -> list[tuple[int, float | None]]:
        """Add source tokens (with confidences); returns the target tokens now stable."""
        t0 = time.perf_counter_ns()
        for tok, conf in tokens:
            if int(tok) == self.src.eot:
                final = True
                break
            self.tokens.append(int(tok))
            if conf is not None:
                self._conf = conf if self._conf is None else min(self._conf, conf)
        out: list[int] = []
        if not self.ended:
            ids = self.dst.encode(stable_text(self.src.decode(self.tokens), final), start=True)
            if (
                self.dst.unk is not None and self.dst.unk in ids
            ):  # text it cannot encode: stop there
                ids = ids[: ids.index(self.dst.unk)]
            n = len(self.published)
            if ids[:n] == self.published:
                out = ids[n:]
            else:  # a re-encoding that would retract published tokens: wait for more text
                self.held_back += 1
            if final:
                out.append(self.dst.eot)
                self.ended = True
            self.published += out
        conf = self._conf
        if out:
            self._conf = None
        self.convert_ns += time.perf_counter_ns() - t0
        return [(t, conf) for t in out]


class ConvertingSource:
    """An autoregressive source whose tokenizer is not the target's, publishing the target's
    tokens (same protocol as the source it wraps)."""

    def __init__(self, inner: Any, target_vocab: Any) -> None:
        self.inner = inner
        self.source_id = inner.source_id
        self.kind = inner.kind
        self.conversion = TextConversion(inner.model.vocab, target_vocab)
        self._over = False

    def start(self) -> None:
        self.inner.start()

    def step(self) -> Sequence[tuple[int, float | None]] | None:
        if self._over or self.conversion.ended:
            return None
        got = self.inner.step()
        if got is None:  # the source stopped without its EOS (its limit): what is stable
            self._over = True
            return self.conversion.feed([]) or None
        return self.conversion.feed(got)


class ConvertingDrafter:
    """The prefix-conditioned drafter with its own tokenizer (see the module docstring)."""

    def __init__(self, inner: Any, target_vocab: Any) -> None:
        self.inner = inner
        self.model = inner.model
        self.src, self.dst = inner.model.vocab, target_vocab
        self.eos_id = target_vocab.eot
        self.convert_ns = 0

    def start(
        self,
        audio: Any,
        hidden: Any = None,
        language: str | None = None,
        question: str | None = None,
    ) -> None:
        self.inner.start(audio, hidden, language, question)

    def refresh(self, prefix: Sequence[int], reused: Sequence[int]) -> None:
        """SpecASR recycling is a cache warm-up for the next draft; across vocabularies the
        next draft re-encodes its prefix anyway, so there is nothing to warm."""

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Draft:
        if count <= 0:
            return Draft((), ())
        t0 = time.perf_counter_ns()
        text = self.dst.decode(list(prefix))
        src_prefix = self.src.encode(text, start=True)
        self.convert_ns += time.perf_counter_ns() - t0
        d = self.inner.draft(src_prefix, count, stop_below)
        t0 = time.perf_counter_ns()
        toks = [int(t) for t in d.tokens]
        ended = bool(toks) and toks[-1] == self.src.eot
        body = toks[:-1] if ended else toks
        full = self.src.decode([*src_prefix, *body])
        ids = self.dst.encode(stable_text(full, ended), start=True)
        if not ended and len(ids) <= len(
            prefix
        ):  # whole words only, unless that leaves nothing new
            ids = self.dst.encode(stable_text(full, True), start=True)
        out: list[int] = []
        if _common(ids, prefix) == len(prefix):
            out = ids[len(prefix) :]
            if ended:
                out.append(self.eos_id)
        if self.dst.unk is not None and self.dst.unk in out:
            out = out[: out.index(self.dst.unk)]
        out = out[:count]
        confs = None if d.confidences is None or not d.confidences else min(d.confidences)
        self.convert_ns += time.perf_counter_ns() - t0
        return Draft(tuple(out), None if confs is None else tuple(confs for _ in out))
