"""Audio language models in the Hugging Face ONNX-community layout (transformers.js's).

An export folder holds ``config.json`` (its ``model_type`` one of :data:`MODEL_TYPES`),
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json`` (with the
``chat_template``, or a ``chat_template.jinja`` / ``chat_template.json`` beside it) and
``preprocessor_config.json`` (a ``WhisperFeatureExtractor``'s), and under ``onnx/`` (or
beside them) three graphs, each with the same ``_quantized``/``_int8``/``_q4``/``_fp16``…
variants:

* ``audio_encoder.onnx``: log-mel features ``input_features`` (or ``audio_values``), (1,
  n_mels, frames), and optionally a frame mask (``feature_attention_mask`` or
  ``attention_mask``, (1, frames)) → ``audio_features``, the audio embeddings already
  projected into the language model's embedding space, (N, hidden) or (1, N, hidden);
* ``embed_tokens.onnx``: ``input_ids`` → ``inputs_embeds``;
* ``decoder_model_merged.onnx``: ``inputs_embeds``, ``attention_mask``, ``position_ids``
  (optional), ``past_key_values.<i>.key/value`` → ``logits``, ``present.<i>.key/value``;
  one graph for the prefill and for K-wide calls over the cache.

:func:`find_audio_llm_export` reads a folder; :func:`audio_llm_dims` checks it against
ONNX Runtime's view of the graphs and returns the manifest's ``dims``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from as2d_cli.errors import UserError
from as2d_cli.models.export_files import export_json, external_data, variant_folder

HINT = (
    "see docs/models.md, 'Audio language models', for the files an export must hold "
    "(the ONNX-community layout: onnx/audio_encoder.onnx, embed_tokens.onnx, decoder_model_merged.onnx)"
)
ENCODER, EMBED, DECODER = "audio_encoder", "embed_tokens", "decoder_model_merged"
META = ("config.json", "generation_config.json", "tokenizer.json", "preprocessor_config.json")
FEATURE_INPUTS = ("input_features", "audio_values")
MASK_INPUTS = ("feature_attention_mask", "attention_mask", "audio_attention_mask")
DEFAULT_MAX_NEW_TOKENS = 256  # when generation_config.json sets no max_new_tokens


@dataclass(frozen=True)
class AudioLlmType:
    """What differs between audio-LLM families: the audio placeholder's text and whether the
    features cover the audio padded to Whisper's 30 s window or the audio alone."""

    placeholder: str
    pad_to_window: bool


MODEL_TYPES: dict[str, AudioLlmType] = {
    "qwen2_audio": AudioLlmType("<|AUDIO|>", True),
    "voxtral": AudioLlmType("[AUDIO]", True),
    "ultravox": AudioLlmType("<|audio|>", False),
}


@dataclass(frozen=True)
class AudioLlmExport:
    """One audio-LLM export folder's files for one variant."""

    directory: Path
    layout: str  # "flat" | "onnx"
    variant: str | None
    encoder: Path
    embed: Path
    decoder: Path
    config: dict
    generation: dict
    preprocessor: dict
    tokenizer_config: dict
    chat_template: str

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    def external_data(self) -> list[Path]:
        return external_data((self.encoder, self.embed, self.decoder))


def _json(path: Path, what: str) -> dict:
    return export_json(path, what, "an audio-LLM export", HINT)


def model_type_of(directory: Path) -> str | None:
    """The ``model_type`` of the export in ``directory`` (None when there is no readable config)."""
    try:
        cfg = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return cfg.get("model_type") if isinstance(cfg, dict) else None


def read_chat_template(directory: Path, tokenizer_config: dict) -> str:
    """The chat template: tokenizer_config.json's ``chat_template``, else chat_template.jinja
    or chat_template.json beside it (where newer transformers save it)."""
    tpl: Any = tokenizer_config.get("chat_template")
    if isinstance(tpl, list):  # named templates: the default one
        tpl = next((t.get("template") for t in tpl if t.get("name") == "default"), None)
    if not tpl and (directory / "chat_template.jinja").is_file():
        tpl = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    if not tpl and (directory / "chat_template.json").is_file():
        tpl = _json(directory / "chat_template.json", "the chat template").get("chat_template")
    if not isinstance(tpl, str) or not tpl.strip():
        raise UserError(
            f"{directory / 'tokenizer_config.json'} has no chat_template (nor is there a "
            "chat_template.jinja beside it); save the model's tokenizer or processor with its chat "
            "template (processor.save_pretrained)"
        )
    return tpl


def find_audio_llm_export(directory: Path, variant: str | None = None) -> AudioLlmExport:
    """Read an audio-LLM export folder for ``variant`` (None: the plain files)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(
            f"{directory} is not a folder; give the folder holding the model's config.json"
        )
    config = _json(directory / "config.json", "the model configuration")
    mt = config.get("model_type")
    if mt not in MODEL_TYPES:
        raise UserError(
            f"{directory / 'config.json'} describes a {mt!r} model; audio language models of type "
            f"{', '.join(MODEL_TYPES)} are supported"
        )
    layout, onnx_dir, suffix = variant_folder(directory, ENCODER, variant, HINT)
    files = {k: onnx_dir / f"{k}{suffix}.onnx" for k in (ENCODER, EMBED, DECODER)}
    for f in files.values():
        if not f.is_file():
            raise UserError(
                f"{f} is missing: an audio-LLM export needs {ENCODER}, {EMBED} and {DECODER} "
                f"(each {suffix or 'plain'}); {HINT}"
            )
    generation = _json(directory / "generation_config.json", "the end-of-text tokens")
    pre = _json(directory / "preprocessor_config.json", "the audio feature extractor")
    if not (directory / "tokenizer.json").is_file():
        raise UserError(
            f"{directory} has no tokenizer.json; save the model's fast tokenizer beside its config"
        )
    tok_cfg = _json(directory / "tokenizer_config.json", "the tokenizer's chat template")
    return AudioLlmExport(
        directory,
        layout,
        variant or None,
        files[ENCODER],
        files[EMBED],
        files[DECODER],
        config,
        generation,
        pre,
        tok_cfg,
        read_chat_template(directory, tok_cfg),
    )


def text_config(config: dict) -> dict:
    """The language model's configuration (``text_config``, or the top level)."""
    tc = config.get("text_config")
    return tc if isinstance(tc, dict) else config


def eos_ids(generation: dict, config: dict) -> list[int]:
    """The end-of-text ids, the first the pair's primary one (generation_config.json's
    ``eos_token_id``, an id or a list; else the text config's)."""
    raw: Any = generation.get("eos_token_id", text_config(config).get("eos_token_id"))
    ids = raw if isinstance(raw, list) else [raw]
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise UserError(
            f"generation_config.json: eos_token_id is {raw!r}, not a token id or a list of them; "
            "export the model with its generation config"
        )
    return [int(i) for i in ids]


def specials_text(tokenizer_config: dict) -> dict[str, str]:
    """The special-token strings a chat template may read (bos_token, eos_token, …)."""
    out: dict[str, str] = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        v = tokenizer_config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def audio_llm_dims(export: AudioLlmExport, tokenizer: Any) -> dict[str, Any]:
    """The manifest's ``dims`` of an export, checked against its graphs and tokenizer."""
    kind = MODEL_TYPES[export.model_type]
    text = _text_dims(export)
    n_mels = _n_mels(export)
    placeholder, audio_id = _audio_token(export, tokenizer, kind.placeholder)
    sessions = _sessions(export)
    feat, mask = _encoder_inputs(export, sessions["encoder"], n_mels)
    embed_in = [i.name for i in sessions["embed"].get_inputs()]
    if embed_in != ["input_ids"]:
        raise UserError(f"{export.embed} takes {embed_in}, not input_ids alone; {HINT}")
    dec_in = {i.name: i for i in sessions["decoder"].get_inputs()}
    vocab = _check_decoder(export, sessions["decoder"], dec_in, text)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    eos = eos_ids(export.generation, export.config)
    max_new = export.generation.get("max_new_tokens")
    return {
        "model_type": export.model_type,
        "n_mels": int(n_mels),
        "pad_to_window": kind.pad_to_window,
        "layers": text["layers"],
        "hidden": text["hidden"],
        "heads": text["heads"],
        "kv_heads": text["kv_heads"],
        "head_dim": text["head_dim"],
        "vocab": vocab,
        "tokenizer_size": size,
        "max_tokens": text["max_positions"],
        "max_new_tokens": int(max_new) if isinstance(max_new, int) else DEFAULT_MAX_NEW_TOKENS,
        "audio_token": int(audio_id),
        "placeholder": placeholder,
        "eos": eos,
        "inputs": {"features": feat, "mask": mask, "position_ids": "position_ids" in dec_in},
    }


def _text_dims(export: AudioLlmExport) -> dict[str, int]:
    """The text decoder's sizes from config.json's text_config."""
    tc = text_config(export.config)
    try:  # in this order: the first key missing is the one named
        layers = int(tc["num_hidden_layers"])
        hidden = int(tc["hidden_size"])
        heads = int(tc["num_attention_heads"])
        kv_heads = int(tc.get("num_key_value_heads") or heads)
        head_dim = int(tc.get("head_dim") or hidden // heads)
        vocab = int(tc["vocab_size"])
        max_positions = int(tc["max_position_embeddings"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{export.directory / 'config.json'}: text_config key {exc} is missing or not a "
            f"number; {HINT}"
        ) from None
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab": vocab,
        "max_positions": max_positions,
    }


def _n_mels(export: AudioLlmExport) -> int:
    """The mel bins of the export's Whisper-style feature extractor."""
    n_mels = export.preprocessor.get("feature_size")
    fe = export.preprocessor.get("feature_extractor_type", "WhisperFeatureExtractor")
    if fe != "WhisperFeatureExtractor" or not isinstance(n_mels, int):
        raise UserError(
            f"{export.directory / 'preprocessor_config.json'} names a {fe} with feature_size "
            f"{n_mels!r}; as2d computes Whisper-style log-mel features (80 or 128 bins)"
        )
    return n_mels


def _audio_token(export: AudioLlmExport, tokenizer: Any, default: str) -> tuple[str, int]:
    """The audio placeholder and its token id, which the chat template must place in a
    user turn holding audio."""
    where = export.directory / "config.json"
    placeholder = str(
        export.preprocessor.get("audio_token")
        or export.preprocessor.get("audio_placeholder")
        or default
    )
    audio_id = export.config.get("audio_token_id", export.config.get("audio_token_index"))
    tok_id = tokenizer.token_to_id(placeholder)
    if not isinstance(audio_id, int):
        audio_id = tok_id
    if audio_id is None:
        raise UserError(
            f"{export.directory / 'tokenizer.json'} has no audio placeholder token {placeholder!r} and "
            f"{where} names no audio_token_id; export the model with its processor's tokenizer"
        )
    from as2d_cli.models.prompting import render_chat

    tpl_file = export.directory / "tokenizer_config.json"
    rendered = render_chat(
        export.chat_template,
        "Transcribe the audio.",
        specials_text(export.tokenizer_config),
        str(tpl_file),
    )
    if audio_id not in tokenizer.encode(rendered, add_special_tokens=False).ids:
        raise UserError(
            f"{tpl_file}: the chat template renders no audio placeholder {placeholder!r} (token "
            f"{audio_id}) for a user turn holding audio; save the model's processor chat template "
            "(processor.save_pretrained), which places it"
        )
    return placeholder, audio_id


def _sessions(export: AudioLlmExport) -> dict[str, Any]:
    """ONNX Runtime sessions of the encoder, the embedding and the decoder graphs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sessions = {}
    for key, path in (
        ("encoder", export.encoder),
        ("embed", export.embed),
        ("decoder", export.decoder),
    ):
        try:
            sessions[key] = ort.InferenceSession(
                str(path), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises its own exception types for bad files
            raise UserError(
                f"ONNX Runtime cannot load {path} ({str(exc).splitlines()[0]}); {HINT}"
            ) from None
    return sessions


def _encoder_inputs(export: AudioLlmExport, encoder: Any, n_mels: int) -> tuple[str, str | None]:
    """The encoder's feature input (of ``n_mels`` bins) and its optional frame mask."""
    enc_in = {i.name: i for i in encoder.get_inputs()}
    feat = next((n for n in FEATURE_INPUTS if n in enc_in), None)
    mask = next((n for n in MASK_INPUTS if n in enc_in), None)
    extra = set(enc_in) - {feat, mask}
    if feat is None or extra:
        raise UserError(
            f"{export.encoder} takes inputs {sorted(enc_in)}; an audio encoder takes "
            f"{' or '.join(FEATURE_INPUTS)} and optionally a frame mask ({', '.join(MASK_INPUTS)}); {HINT}"
        )
    shape = enc_in[feat].shape
    if len(shape) != 3 or (isinstance(shape[1], int) and shape[1] != n_mels):
        raise UserError(
            f"{export.encoder} takes features of shape {shape} but preprocessor_config.json says "
            f"feature_size {n_mels}: the export and its configs do not match; {HINT}"
        )
    return feat, mask


def _check_decoder(
    export: AudioLlmExport, decoder: Any, dec_in: dict[str, Any], text: dict[str, int]
) -> int:
    """The merged decoder's cache inputs checked against config.json; returns the vocabulary
    size (the logits' when the graph fixes it)."""
    layers = text["layers"]
    want = {"inputs_embeds", "attention_mask"} | {
        f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")
    }
    if not want <= set(dec_in):
        missing = sorted(want - set(dec_in))
        raise UserError(
            f"{export.decoder} lacks the inputs {missing[:4]}{' …' if len(missing) > 4 else ''} of a "
            f"merged decoder with {layers} layers (config.json); {HINT}"
        )
    kv_shape = dec_in["past_key_values.0.key"].shape
    if len(kv_shape) == 4:
        for axis, want_v, name in (
            (1, text["kv_heads"], "num_key_value_heads"),
            (3, text["head_dim"], "head_dim"),
        ):
            if isinstance(kv_shape[axis], int) and kv_shape[axis] != want_v:
                raise UserError(
                    f"{export.decoder}'s cache has {kv_shape[axis]} on axis {axis} but config.json "
                    f"gives {name} {want_v}; {HINT}"
                )
    logits = {o.name: o for o in decoder.get_outputs()}.get("logits")
    if logits is None:
        raise UserError(f"{export.decoder} has no logits output; {HINT}")
    if isinstance(logits.shape[-1], int):
        return int(logits.shape[-1])
    return text["vocab"]
