"""An audio language model (audio encoder → projected embeddings → decoder-only LM) behind
the decoder-model contract (manifest kind ``audio-llm-onnx``; files:
:mod:`as2d_cli.models.audio_llm_export`).

A request's encoding runs the audio encoder once and builds the prompt: the chat template
rendered for one user turn (the audio, then the task's instruction), tokenized without
added special tokens, its audio placeholder expanded to the encoder's N output rows — the
ids the model's Hugging Face processor builds. Every decoder call embeds its tokens with
the token-embedding graph, puts the audio embeddings in the rows of the placeholder
positions it covers (in order), and runs the merged decoder over the cache with an
all-ones attention mask and positions P..P+K-1. The cache is per layer (1, KV heads, P,
head dim), grouped-query attention included, rolled back by slicing P.

The argmax of the returned logits is the model's greedy choice: ``suppress_tokens`` and
``begin_suppress_tokens`` of its generation config are applied as transformers applies
them, and every end-of-text id is folded into the first (the pair's EOS), so a greedy run
stops where transformers' does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from as2d_cli.errors import EngineError, UserError
from as2d_cli.models.audio_llm_export import HINT, specials_text
from as2d_cli.models.contract import Cache, Cross
from as2d_cli.models.ortio import (
    cache_length,
    empty_kv,
    io_mode,
    request_feeds,
    writable_logits,
)
from as2d_cli.models.prompting import PromptSpec, render_chat
from as2d_cli.models.session import make_session
from as2d_cli.models.suppression import Suppression
from as2d_cli.models.whisper_features import HOP, N_SAMPLES, SAMPLE_RATE, whisper_log_mel

KIND = "audio-llm-onnx"


class AudioLlmModel:
    """One audio-LLM export of a pair as a DecoderModel."""

    def __init__(self, pair: Any, name: str, threads: int = 1, io: str | None = None) -> None:
        info = pair.model(name)
        self.name = name
        self.vocab = pair.vocab_for(name)
        self.spec: PromptSpec = pair.effective_prompt()
        files, dims = info["files"], info["dims"]
        hint = f"re-import the pair with `as2d models import` ({HINT})"
        self.encoder = make_session(pair.path(files["encoder"]), threads, hint)
        # A drafter whose audio encoder is the target's file (``encoder_from``): given the
        # target's audio embeddings for a request, it builds its prompt around them.
        self.encoder_from: str | None = info.get("encoder_from")
        self.embed = make_session(pair.path(files["embed"]), threads, hint)
        self.decoder = make_session(pair.path(files["decoder"]), threads, hint)
        self.max_positions = int(dims["max_tokens"])
        self.max_new_tokens: int | None = int(dims["max_new_tokens"])
        self.layers = int(dims["layers"])
        self.n_mels = int(dims["n_mels"])
        self.pad_to_window = bool(dims["pad_to_window"])
        self.audio_token = int(dims["audio_token"])
        inputs = dims["inputs"]
        self._feat_in, self._mask_in = inputs["features"], inputs.get("mask")
        self._positions = bool(inputs.get("position_ids", True))
        types = {i.name: i.type for i in self.encoder.get_inputs()}
        self._mask_dtype = {"tensor(bool)": np.bool_, "tensor(float)": np.float32}.get(
            types.get(self._mask_in or "", ""), np.int64
        )
        self._embed_out = self.embed.get_outputs()[0].name
        self._enc_out = self.encoder.get_outputs()[0].name
        tok_cfg = json.loads(pair.path(files["tokenizer_config"]).read_text(encoding="utf-8"))
        self.template = str(info["chat_template"])
        self._specials = specials_text(tok_cfg)
        gen = json.loads(pair.path(files["generation"]).read_text(encoding="utf-8"))
        self.suppression = Suppression(gen, int(dims["vocab"]))
        eos = [int(e) for e in dims["eos"]]
        self.eos = eos[0]
        self._eos_all = np.asarray(eos, dtype=np.int64)
        self._eos_rest = np.asarray(eos[1:], dtype=np.int64)
        self._past_in = [
            (f"past_key_values.{i}.key", f"past_key_values.{i}.value") for i in range(self.layers)
        ]
        self._out = [o.name for o in self.decoder.get_outputs()]
        self._present = [
            (self._out.index(f"present.{i}.key"), self._out.index(f"present.{i}.value"))
            for i in range(self.layers)
        ]
        self._logits = self._out.index("logits")
        self._extra: dict[str, Any] = {}
        for i in self.decoder.get_inputs():  # exports that can skip logits: keep every position's
            if i.name in ("num_logits_to_keep", "logits_to_keep"):
                self._extra[i.name] = None
        self.io = io_mode(io)  # ortio: OrtValues kept between calls, or numpy feeds
        self._empty: Cache = empty_kv(
            self.layers, int(dims["kv_heads"]), int(dims["head_dim"]), self.io
        )
        self._templates: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ prompts
    def instruction(self, question: str | None = None) -> str:
        return self.spec.for_window(question).instruction()

    def rendered(self, question: str | None = None) -> str:
        """The chat template rendered for this request (before the audio is expanded)."""
        return render_chat(
            self.template, self.instruction(question), self._specials, f"model {self.name!r}"
        )

    def _template_ids(self, question: str | None) -> list[int]:
        """The rendered template's ids, rendered and tokenized once per instruction (a
        request's encoding runs on the producer's clock for a decoupled source)."""
        instruction = self.instruction(question)
        ids = self._templates.get(instruction)
        if ids is None:
            text = render_chat(self.template, instruction, self._specials, f"model {self.name!r}")
            ids = self._templates[instruction] = self.vocab.ids(text)
        return ids

    def prompt_for(
        self, language: str | None = None, question: str | None = None
    ) -> tuple[int, ...]:
        """The prompt ids with the audio placeholder not yet expanded (one per audio); for
        ``answer`` with no question yet (each window asks its own), a one-character question's."""
        spec = self.spec.for_window(question)
        if spec.task == "answer" and spec.question is None and spec.text is None:
            question = "?"
        return tuple(self._template_ids(question))

    def expand(self, ids: Sequence[int], n: int) -> tuple[int, ...]:
        """``ids`` with its audio placeholder repeated to the encoder's ``n`` rows."""
        at = [i for i, t in enumerate(ids) if t == self.audio_token]
        if len(at) == n:
            return tuple(ids)
        if len(at) != 1:
            raise UserError(
                f"model {self.name!r}: the rendered prompt holds {len(at)} audio placeholders but the "
                f"audio encoder gives {n} rows; the chat template must place one placeholder "
                f"(token {self.audio_token}) per audio, or exactly one per row"
            )
        return (*ids[: at[0]], *([self.audio_token] * n), *ids[at[0] + 1 :])

    # ------------------------------------------------------------------ requests
    def features(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-mel features (1, n_mels, frames) and the frame mask (1, frames)."""
        if len(audio) > N_SAMPLES:
            raise UserError(
                f"{len(audio) / SAMPLE_RATE:.1f} s of audio is longer than the model's 30 s window; "
                "split it into windows of at most 30 s"
            )
        mel = whisper_log_mel(audio, self.n_mels, to_window=self.pad_to_window)
        frames = mel.shape[1]
        valid = min(frames, -(-len(audio) // HOP)) if self.pad_to_window else frames
        mask = np.zeros((1, frames), dtype=np.int64)
        mask[0, :valid] = 1
        return mel[None], mask

    def encode(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> Cross:
        mel, mask = self.features(audio)
        feeds: dict[str, Any] = {self._feat_in: mel}
        if self._mask_in:
            feeds[self._mask_in] = mask.astype(self._mask_dtype)
        (emb,) = self.encoder.run([self._enc_out], feeds)
        emb = np.ascontiguousarray(emb.reshape(-1, emb.shape[-1]), dtype=np.float32)[None]
        return self._cross(emb, question)

    def _cross(self, emb: np.ndarray, question: str | None) -> Cross:
        """The request's encoding around its audio embeddings ``emb`` (1, N, hidden)."""
        prompt = self.expand(self._template_ids(question), int(emb.shape[1]))
        if len(prompt) >= self.max_positions:
            raise UserError(
                f"model {self.name!r}: the prompt is {len(prompt)} tokens, the model holds "
                f"{self.max_positions} positions; shorten the audio or the --prompt/--question text"
            )
        at = np.flatnonzero(np.asarray(prompt) == self.audio_token)
        return Cross(None, None, emb, prompt, audio_at=at)

    def encode_request(
        self,
        audio: np.ndarray,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        question: str | None = None,
    ) -> Cross:
        """The request's encoding: around ``hidden`` (the target's audio embeddings for this
        audio) when this model's audio encoder is the target's and they are given, else
        its own encoding."""
        if hidden is not None and self.encoder_from is not None:
            return self._cross(hidden, question)
        return self.encode(audio, language, question)

    def shares_encoder_of(self, other: Any) -> bool:
        return self.encoder_from is not None and self.encoder_from == getattr(other, "name", None)

    def empty_cache(self) -> Cache:
        return self._empty

    # ------------------------------------------------------------------ decoder calls
    def decode(self, tokens: Sequence[int], past: Cache, cross: Cross) -> tuple[np.ndarray, Cache]:
        n, k = cache_length(past), len(tokens)
        if n + k > self.max_positions:
            raise UserError(
                f"{self.name}: {n + k} positions exceed the model's {self.max_positions}; lower the "
                "generation limit"
            )
        if cross.hidden is None or cross.audio_at is None:
            raise EngineError(f"{self.name}: a decoder call before the request was encoded")
        at = cross.audio_at
        lo, hi = np.searchsorted(at, n), np.searchsorted(at, n + k)
        if self.io == "numpy":
            ids = np.asarray(tokens, dtype=np.int64)[None]
            (emb,) = self.embed.run([self._embed_out], {"input_ids": ids})
            if hi > lo:  # this call covers audio placeholder positions: their rows are the audio's
                emb = np.array(emb, dtype=np.float32)
                emb[0, at[lo:hi] - n] = cross.hidden[0, lo:hi]
            feeds: dict[str, Any] = {
                "inputs_embeds": emb,
                "attention_mask": np.ones((1, n + k), dtype=np.int64),
            }
            if self._positions:
                feeds["position_ids"] = np.arange(n, n + k, dtype=np.int64)[None]
            for name in self._extra:
                feeds[name] = np.array(k, dtype=np.int64)
            for (kn, vn), kc, vc in zip(self._past_in, *past):
                feeds[kn], feeds[vn] = np.ascontiguousarray(kc), np.ascontiguousarray(vc)
            out = self.decoder.run(None, feeds)
        else:
            rf = request_feeds(cross, self, dict, self.max_positions)
            ids = rf.ids(tokens)
            # [0], not unpacking: iterating an OrtValueVector ends in a costly IndexError
            emb = self.embed.run_with_ort_values([self._embed_out], {"input_ids": ids})[0]
            if hi > lo:  # written into ORT's output buffer: no one else holds it
                emb.numpy()[0, at[lo:hi] - n] = cross.hidden[0, lo:hi]
            feeds = rf.values
            feeds["inputs_embeds"], feeds["attention_mask"] = emb, rf.ones(n + k)
            if self._positions:
                feeds["position_ids"] = rf.positions(n, k)
            for name in self._extra:
                feeds[name] = rf.scalar(k)
            for (kn, vn), kc, vc in zip(self._past_in, *past):
                feeds[kn], feeds[vn] = kc, vc
            out = self.decoder.run_with_ort_values(self._out, feeds)
        keys = tuple(out[i] for i, _ in self._present)
        values = tuple(out[j] for _, j in self._present)
        logits = writable_logits(out[self._logits], self.io)
        if self._eos_rest.size:  # every end-of-text id is the pair's EOS
            logits[:, self.eos] = logits[:, self._eos_all].max(axis=1)
            logits[:, self._eos_rest] = -np.inf
        self.suppression.apply(logits, len(cross.prompt), n)
        return logits, (keys, values)
