"""Hugging Face Whisper exports in the Optimum ONNX layout, behind the decoder-model contract.

An export folder is what ``optimum-cli export onnx --task
automatic-speech-recognition-with-past`` writes: ``config.json``, ``generation_config.json``,
``tokenizer.json`` and the ONNX files, either beside them (the flat layout) or under
``onnx/`` (as the community's ONNX repositories ship them, with ``_quantized``, ``_int8``,
``_q4``, ``_fp16``... variants). The decoder is ``decoder_model_merged.onnx`` (one file,
its ``use_cache_branch`` input choosing the branch) or ``decoder_model.onnx`` +
``decoder_with_past_model.onnx``.

:func:`find_export` reads a folder's layout; :class:`WhisperModel` runs one model of an
imported pair (:mod:`as2d_cli.models.pair`): Whisper's own features and prompt, the
decoder's first call (no cache) computing the cross-attention K/V it keeps for the request,
later calls of K tokens over the self-attention cache, and the token suppression
transformers' greedy generation applies (``suppress_tokens`` at every step,
``begin_suppress_tokens`` at the first generated token), so the argmax is its greedy choice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.errors import EngineError, UserError
from as2d_cli.models.export_files import (
    export_json,
    external_data,
    variant_folder,
)
from as2d_cli.models.ortio import (
    RequestFeeds,
    as_array,
    empty_kv,
    io_mode,
    request_feeds,
    writable_logits,
)
from as2d_cli.models.session import Cache, Cross, cache_length, make_session
from as2d_cli.models.suppression import Suppression
from as2d_cli.models.whisper_features import N_SAMPLES, SAMPLE_RATE, whisper_log_mel
from as2d_cli.models.whisper_prompt import HINT, build_prompt  # noqa: F401  (re-exported)

ENCODER = "encoder_model"
MERGED = "decoder_model_merged"
DECODER = "decoder_model"
WITH_PAST = "decoder_with_past_model"
META = ("config.json", "generation_config.json", "tokenizer.json")
TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class WhisperExport:
    """One export folder's files for one variant."""

    directory: Path
    layout: str  # "flat" | "onnx"
    variant: str | None
    encoder: Path
    decoder: Path  # the merged decoder, or the no-cache decoder
    with_past: Path | None  # None when the decoder is merged
    config: dict
    generation: dict

    @property
    def merged(self) -> bool:
        return self.with_past is None

    def external_data(self) -> list[Path]:
        """The ONNX files' external-data files (large exports keep their weights beside them:
        ``model.onnx_data``, or ``model.onnx.data``)."""
        return external_data((self.encoder, self.decoder, self.with_past))


def _json(path: Path, what: str) -> dict:
    return export_json(path, what, "a Hugging Face Whisper export", HINT)


def find_export(directory: Path, variant: str | None = None) -> WhisperExport:
    """Read an export folder (flat or ``onnx/`` layout) for ``variant`` (None: the plain
    float files). Raises one UserError naming the file and what to do."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(
            f"{directory} is not a folder; give the folder optimum-cli exported the model into"
        )
    config = _json(directory / "config.json", "the model configuration")
    if config.get("model_type") != "whisper":
        raise UserError(
            f"{directory / 'config.json'} describes a {config.get('model_type')!r} model, not Whisper; "
            "as2d reads Whisper-architecture encoder-decoder exports"
        )
    layout, onnx_dir, suffix = variant_folder(directory, ENCODER, variant, HINT)
    encoder = onnx_dir / f"{ENCODER}{suffix}.onnx"
    merged = onnx_dir / f"{MERGED}{suffix}.onnx"
    plain, past = onnx_dir / f"{DECODER}{suffix}.onnx", onnx_dir / f"{WITH_PAST}{suffix}.onnx"
    if merged.is_file():
        decoder, with_past = merged, None
    elif plain.is_file() and past.is_file():
        decoder, with_past = plain, past
    elif plain.is_file() or past.is_file():
        missing = past if plain.is_file() else plain
        raise UserError(
            f"{missing} is missing: a split decoder needs both {plain.name} and {past.name} "
            f"(or use {merged.name}); {HINT}"
        )
    else:
        raise UserError(
            f"{onnx_dir} has an encoder but no decoder ({merged.name}, or {plain.name} + {past.name}); "
            f"an encoder-only export cannot decode: {HINT}"
        )
    generation = _json(
        directory / "generation_config.json", "the decoder prompt and token suppression"
    )
    if not (directory / "tokenizer.json").is_file():
        raise UserError(
            f"{directory} has no tokenizer.json; save the model's fast tokenizer beside its config "
            "(tokenizer.save_pretrained)"
        )
    return WhisperExport(
        directory, layout, variant or None, encoder, decoder, with_past, config, generation
    )


class WhisperModel:
    """One Whisper export of a pair (manifest kind ``whisper-onnx``) as a DecoderModel."""

    def __init__(self, pair: Any, name: str, threads: int = 1, io: str | None = None) -> None:
        info = pair.model(name)
        self.name = name
        self.vocab = pair.vocab_for(name)
        self.task: str = getattr(pair, "task", None) or info.get("task", "transcribe")
        self.language: str | None = getattr(pair, "language", None)
        if pair.kind("target") == "audio-llm-onnx":
            # A Whisper drafter of an audio LLM: --language names the LLM's translation
            # target, so it hears each window's own language; it translates only into
            # English (its one translation target) and otherwise transcribes.
            into_english = (self.language or "en") == "en"
            self.task = "translate" if self.task == "translate" and into_english else "transcribe"
            self.language = None
        files = info["files"]
        self.generation = json.loads(pair.path(files["generation"]).read_text(encoding="utf-8"))
        dims = info["dims"]
        self.n_mels = int(dims["n_mels"])
        # A drafter that reads the target's encoder states (distil-whisper keeps its teacher's
        # encoder): given them for a request it needs no encoder pass of its own.
        self.encoder_from: str | None = info.get("encoder_from")
        self.max_positions = int(dims["max_tokens"])
        hint = f"re-import the pair with `as2d models import` ({HINT})"
        enc_path = pair.path(files["encoder"])
        self.encoder = make_session(enc_path, threads, hint)
        self._features_in = self.encoder.get_inputs()[0].name
        shape = self.encoder.get_inputs()[0].shape
        if len(shape) != 3 or shape[1] != self.n_mels:
            raise UserError(
                f"{enc_path} takes features of shape {shape}, but the model's config.json says "
                f"{self.n_mels} mel bins; the export and its config do not match: {hint}"
            )
        self.decoder = make_session(pair.path(files["decoder"]), threads, hint)
        self.with_past = (
            make_session(pair.path(files["with_past"]), threads, hint)
            if files.get("with_past")
            else None
        )
        self.layers = int(dims["dec_layers"])
        self._dec_out = [o.name for o in self.decoder.get_outputs()]
        self._past_out = [o.name for o in (self.with_past or self.decoder).get_outputs()]
        # Feed and fetch names per layer, built once (the decoder is called once per token).
        pkv = "past_key_values.{}.{}.{}"
        self._self_in = [
            (pkv.format(i, "decoder", "key"), pkv.format(i, "decoder", "value"))
            for i in range(self.layers)
        ]
        self._cross_in = [
            (pkv.format(i, "encoder", "key"), pkv.format(i, "encoder", "value"))
            for i in range(self.layers)
        ]
        self._self_out = [
            (f"present.{i}.decoder.key", f"present.{i}.decoder.value") for i in range(self.layers)
        ]
        self._cross_out = [
            (f"present.{i}.encoder.key", f"present.{i}.encoder.value") for i in range(self.layers)
        ]
        H, dh = int(dims["heads"]), int(dims["head_dim"])
        self.io = io_mode(io)  # ortio: OrtValues kept between calls, or numpy feeds
        self._empty: Cache = empty_kv(self.layers, H, dh, self.io)
        self._dummy_enc = np.zeros((1, H, 1, dh), dtype=np.float32)
        self._flags = (np.array([False]), np.array([True]))  # use_cache_branch
        self.suppression = Suppression(self.generation, int(dims["vocab"]))

    # ------------------------------------------------------------------ requests
    def prompt_for(
        self, language: str | None = None, question: str | None = None
    ) -> tuple[int, ...]:
        return build_prompt(
            self.generation, self.task, self.language or language, f"model {self.name!r}"
        )

    def features(self, audio: np.ndarray) -> np.ndarray:
        if len(audio) > N_SAMPLES:
            raise UserError(
                f"{len(audio) / SAMPLE_RATE:.1f} s of audio is longer than Whisper's 30 s window; "
                "split it into windows of at most 30 s"
            )
        return whisper_log_mel(audio, self.n_mels)[None]

    def encode(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> Cross:
        (hidden,) = self.encoder.run(None, {self._features_in: self.features(audio)})
        return Cross(None, None, hidden, self.prompt_for(language))

    def encode_request(
        self,
        audio: np.ndarray,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        question: str | None = None,
    ) -> Cross:
        """The request's encoding: ``hidden`` (the owner's encoder states for this audio)
        when this model reads another's encoder and they are given, else its own pass."""
        if hidden is not None and self.encoder_from is not None:
            return Cross(None, None, hidden, self.prompt_for(language))
        return self.encode(audio, language)

    def shares_encoder_of(self, other: Any) -> bool:
        return self.encoder_from is not None and self.encoder_from == getattr(other, "name", None)

    def empty_cache(self) -> Cache:
        return self._empty

    # ------------------------------------------------------------------ decoder calls
    def decode(self, tokens: Sequence[int], past: Cache, cross: Cross) -> tuple[np.ndarray, Cache]:
        n = cache_length(past)
        if n + len(tokens) > self.max_positions:
            raise UserError(
                f"{self.name}: {n + len(tokens)} decoder positions exceed the model's "
                f"{self.max_positions}; lower the generation limit"
            )
        if n == 0:  # the first call: no cache yet, it computes the cross-attention K/V
            out = self._first_call(tokens, past, cross)
        else:
            if cross.k is None:
                raise EngineError(
                    f"{self.name}: a cached decoder call before the first call of the request"
                )
            out = self._cached_call(tokens, past, cross)
        keys = tuple(out[k] for k, _ in self._self_out)
        values = tuple(out[v] for _, v in self._self_out)
        logits = writable_logits(out["logits"], self.io)
        self.suppression.apply(logits, len(cross.prompt), n)
        return logits, (keys, values)

    def _first_call(self, tokens: Sequence[int], past: Cache, cross: Cross) -> dict[str, Any]:
        """The no-cache call; it sets ``cross.k``/``cross.v`` (numpy) and, under
        ``io="ortvalue"``, the request's feeds with the cross K/V as ORT returned them."""
        ids = np.asarray(tokens, dtype=np.int64)[None]
        feeds: dict[str, Any] = {"input_ids": ids, "encoder_hidden_states": cross.hidden}
        if self.with_past is None:
            feeds["use_cache_branch"] = self._flags[0]
            for (sk, sv), (ck, cv), k, v in zip(self._self_in, self._cross_in, *past):
                feeds[sk], feeds[sv] = k, v
                feeds[ck], feeds[cv] = self._dummy_enc, self._dummy_enc
        if self.io == "numpy":
            out = dict(zip(self._dec_out, self.decoder.run(None, feeds)))
        else:
            once = RequestFeeds(self, feeds, 0)  # wraps the numpy feeds, keeping their memory
            vec = self.decoder.run_with_ort_values(self._dec_out, once.values)
            out = {name: vec[i] for i, name in enumerate(self._dec_out)}
        cross.k = tuple(as_array(out[k]) for k, _ in self._cross_out)
        cross.v = tuple(as_array(out[v]) for _, v in self._cross_out)
        if self.io != "numpy":  # the cached calls' feeds, with the cross K/V ORT returned
            cross.feeds = None
            kv = {ck: out[k] for (ck, _), (k, _) in zip(self._cross_in, self._cross_out)}
            kv |= {cv: out[v] for (_, cv), (_, v) in zip(self._cross_in, self._cross_out)}
            self._cached_feeds(cross, kv)
        return out

    def _cached_feeds(self, cross: Cross, kv: dict[str, Any] | None = None) -> Any:
        """The request's feeds for its cached calls, made once: the cross K/V (``kv``, or
        else ``cross.k``/``cross.v``) and, for a merged decoder, the branch flag and the
        encoder states."""

        def constant() -> dict[str, Any]:
            feeds = dict(kv) if kv is not None else {}
            if kv is None:
                for (ck, cv), k, v in zip(self._cross_in, cross.k, cross.v):
                    feeds[ck], feeds[cv] = k, v
            if self.with_past is None:
                feeds["use_cache_branch"] = self._flags[1]
                feeds["encoder_hidden_states"] = cross.hidden
            return feeds

        return request_feeds(cross, self, constant, self.max_positions)

    def _cached_call(self, tokens: Sequence[int], past: Cache, cross: Cross) -> dict[str, Any]:
        session = self.with_past or self.decoder
        if self.io == "numpy":
            feeds: dict[str, Any] = {"input_ids": np.asarray(tokens, dtype=np.int64)[None]}
            if self.with_past is None:
                feeds["use_cache_branch"] = self._flags[1]
                feeds["encoder_hidden_states"] = cross.hidden
            for (sk, sv), (ck, cv), k, v, xk, xv in zip(
                self._self_in, self._cross_in, *past, cross.k, cross.v
            ):
                feeds[sk], feeds[sv] = np.ascontiguousarray(k), np.ascontiguousarray(v)
                feeds[ck], feeds[cv] = xk, xv
            return dict(zip(self._past_out, session.run(None, feeds)))
        rf = self._cached_feeds(cross)
        feeds = rf.values
        feeds["input_ids"] = rf.ids(tokens)
        for (sk, sv), k, v in zip(self._self_in, *past):
            feeds[sk], feeds[sv] = k, v
        vec = session.run_with_ort_values(self._past_out, feeds)
        return {name: vec[i] for i, name in enumerate(self._past_out)}
