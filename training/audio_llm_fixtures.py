"""Make the small audio-language-model fixtures the tests use (tests/data/audio_llm/).

Tiny random-weight audio LLMs (audio encoder -> projector -> decoder-only LLM) exported to
ONNX in the Hugging Face ONNX-community / transformers.js layout, with transformers' own greedy
generation as the reference, so the numpy + onnxruntime adapter can be checked token for token.
They are fixtures, not recognisers: the weights are random, only scaled so that the greedy
output depends on the audio and the top-1/top-2 logit gaps are comfortable.

    python training/audio_llm_fixtures.py all        # build, export, reference, verify (~20 s)
    python training/audio_llm_fixtures.py build      # tokenizer, configs, weights -> training/work/audio_llm/
    python training/audio_llm_fixtures.py export     # ONNX + metadata -> tests/data/audio_llm/
    python training/audio_llm_fixtures.py reference  # transformers greedy generate -> reference.json
    python training/audio_llm_fixtures.py verify     # onnxruntime + numpy greedy loop == reference

Needs torch, transformers (5.x; written against 5.25), onnx, onnxruntime, tokenizers and the
project's corpus (as2d_cli); none is a runtime dependency. No downloads; fixed seeds, so a rerun
rewrites byte-identical files.

* qwen2_audio ``target``: Qwen2AudioForConditionalGeneration, 128 mel bins, encoder d 64 x 2
  layers (4 heads, ffn 128), Qwen2 text model hidden 64 x 2 layers, 4 heads / 2 key-value heads
  (GQA), head_dim 16, intermediate 128.
* qwen2_audio ``drafter``: 80 mel bins, encoder d 48 x 1 layer, text hidden 48 x 1 layer,
  4 heads / 1 key-value head (head_dim 12), plus dynamic-int8 ``_quantized`` variants of its
  three graphs (onnxruntime.quantization.quantize_dynamic, QInt8 weights).
* ``voxtral``: VoxtralForConditionalGeneration, 128 mel bins, encoder d 16 x 1 layer (4 frames
  stacked -> 375 audio tokens per 30 s), Llama text model hidden 32 x 1 layer, 4 / 2 heads.
* all share one byte-level BPE tokenizer.json (Qwen2's NFC + split regex + ByteLevel, 990 BPE
  tokens trained on the corpus texts, then the 12 special tokens of both families: 1002).
* weights: random, re-drawn with std 1/sqrt(fan_in) (embeddings std 1, lm_head x 24) so the
  output depends on the audio and logit gaps are large; seeds picked by trying 1-40. The
  target's <|im_end|> lm_head row copies (x 1.05) an ordinary token's, so some greedy sequences
  end with EOS; the drafter's reach EOS by themselves.
* layout per model: config.json, generation_config.json, tokenizer.json, tokenizer_config.json
  (with ``chat_template``), chat_template.jinja, preprocessor_config.json (+ the qwen2_audio
  processor_config.json) and onnx/{audio_encoder,embed_tokens,decoder_model_merged}.onnx,
  exported from the torch modules in training/audio_llm_graphs.py.
* reference.json: transformers' greedy generation (prompt ids, generated ids, min top-1/top-2
  logit gap) per window x model x task, and which ONNX variants reproduce it (``verify``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "training" / "work" / "audio_llm"
OUT = ROOT / "tests" / "data" / "audio_llm"

QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_bos|>",
    "<|AUDIO|>",
    "<|audio_eos|>",
]
VOXTRAL_SPECIALS = ["<s>", "</s>", "[INST]", "[/INST]", "[BEGIN_AUDIO]", "[AUDIO]"]
SPECIALS = QWEN_SPECIALS + VOXTRAL_SPECIALS
BPE_SIZE = 990  # byte alphabet + merges, before the special tokens

# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer / Qwen's tokenizer.json)
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

QWEN2_AUDIO_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)

# Voxtral: one user turn, audio then instruction -> <s>[INST][BEGIN_AUDIO][AUDIO]{text}[/INST]
VOXTRAL_TEMPLATE = (
    "<s>{% for message in messages %}{% if message['role'] == 'user' %}[INST]"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content or content['type'] == 'audio' %}"
    "[BEGIN_AUDIO][AUDIO]"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "[/INST]{% elif message['role'] == 'assistant' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{{ content['text'] }}{% endfor %}{% endif %}"
    "</s>{% endif %}{% endfor %}"
)

QWEN_MODELS = {
    "target": dict(
        audio=dict(
            num_mel_bins=128,
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
        ),
        text=dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=128,
        ),
        # chosen among seeds 1-40: distinct outputs for the reference prompts, large gaps
        seed=25,
        gains={"lm_head": 24.0},
        # <|im_end|>'s lm_head row := 1.05 x token 407's, so some greedy sequences end in EOS
        eos_like=407,
        eos_mult=1.05,
    ),
    "drafter": dict(
        audio=dict(
            num_mel_bins=80,
            d_model=48,
            encoder_layers=1,
            encoder_attention_heads=4,
            encoder_ffn_dim=96,
        ),
        text=dict(
            hidden_size=48,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=12,
            intermediate_size=96,
        ),
        seed=29,  # chosen among seeds 1-40; some sequences reach <|endoftext|> by themselves
        gains={"lm_head": 24.0},
    ),
}

TASKS = {
    "transcribe": "Transcribe the audio.",
    "translate": "Translate the audio into English.",
    "answer": "What is the last word spoken?",
}
REFERENCE_WINDOWS = ["dev-read-000", "dev-meeting-001", "dev-multilingual-000", "val-read-004"]
MAX_NEW_TOKENS = 40


def log(*a) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def corpus():
    sys.path.insert(0, str(ROOT))
    from as2d_cli.corpus.manifest import load_corpus

    return load_corpus()


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer():
    texts = sorted({w.text for w in corpus().windows})
    texts += list(TASKS.values()) * 20 + ["You are a helpful assistant."] * 20
    texts += ["system\n", "user\n", "assistant\n", "Audio 1: "] * 20
    return byte_level_bpe(texts, BPE_SIZE, SPECIALS)


def byte_level_bpe(texts: list[str], size: int, specials: list[str]):
    """A byte-level BPE of ``size`` tokens with Qwen2's pre-tokenizer split, trained on
    ``texts``, then ``specials`` after the BPE vocabulary, as in Qwen's tokenizer (also the
    bundled audio LLM's: training/alm_prepare.py)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    tok = Tokenizer(
        BPE(
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def special_ids(tok) -> dict[str, int]:
    return {s: tok.token_to_id(s) for s in SPECIALS}


def hf_tokenizer(tok_dir: Path, template: str, family: str):
    """The transformers tokenizer loaded from our tokenizer.json (Qwen2Tokenizer for qwen2_audio,
    a generic fast tokenizer for voxtral) with the chat template set."""
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

    if family == "qwen2_audio":
        t = Qwen2Tokenizer(
            tokenizer_file=str(tok_dir / "tokenizer.json"),
            unk_token=None,
            bos_token=None,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            errors="replace",
            model_max_length=32768,
            clean_up_tokenization_spaces=False,
            split_special_tokens=False,
            additional_special_tokens=QWEN_SPECIALS[1:],
        )
    else:
        t = PreTrainedTokenizerFast(
            tokenizer_file=str(tok_dir / "tokenizer.json"),
            bos_token="<s>",
            eos_token="</s>",
            pad_token="<|endoftext|>",
            unk_token=None,
            model_max_length=32768,
            clean_up_tokenization_spaces=False,
        )
    t.chat_template = template
    return t


# --------------------------------------------------------------------------- build


def qwen_config(name: str, tok):
    from transformers import GenerationConfig, Qwen2AudioConfig

    sp = special_ids(tok)
    d = QWEN_MODELS[name]
    vocab = tok.get_vocab_size()
    cfg = Qwen2AudioConfig(
        audio_config=dict(
            model_type="qwen2_audio_encoder",
            max_source_positions=1500,
            activation_function="gelu",
            scale_embedding=False,
            **d["audio"],
        ),
        text_config=dict(
            model_type="qwen2",
            vocab_size=vocab,
            max_position_embeddings=1024,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            hidden_act="silu",
            tie_word_embeddings=False,
            use_sliding_window=False,
            bos_token_id=sp["<|endoftext|>"],
            eos_token_id=sp["<|im_end|>"],
            pad_token_id=sp["<|endoftext|>"],
            **d["text"],
        ),
        audio_token_index=sp["<|AUDIO|>"],
    )
    cfg._attn_implementation = "eager"
    gen = GenerationConfig(
        bos_token_id=sp["<|endoftext|>"],
        eos_token_id=[sp["<|im_end|>"], sp["<|endoftext|>"]],
        pad_token_id=sp["<|endoftext|>"],
        do_sample=False,
        num_beams=1,
    )
    return cfg, gen


def scale_weights(model, seed: int, text_cfg, gains: dict) -> None:
    """Re-draw every weight with a fan-in scaled normal (std gain/sqrt(fan_in)) instead of the
    0.02 default, so that the residual stream carries the audio and the logits spread."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in sorted(model.named_parameters()):
            if n.endswith("layer_norm.weight") or n.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            if n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * gains.get("bias", 0.1))
                continue
            if "embed_positions" in n:
                continue  # keep (whatever post_init gave: Whisper's sinusoids or random)
            if n.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * gains.get("embed", 1.0))
                continue
            fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
            gain = 1.0
            for k, v in gains.items():
                if k in n:
                    gain = v
            p.copy_(torch.randn(p.shape, generator=g) * gain / math.sqrt(fan_in))


def build_qwen(name: str, tok_dir: Path) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import (
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    cfg, gen = qwen_config(name, tok)
    d = QWEN_MODELS[name]
    torch.manual_seed(d["seed"])
    model = Qwen2AudioForConditionalGeneration(cfg).eval()
    scale_weights(model, d["seed"], cfg.text_config, d["gains"])
    if d.get("eos_like"):
        # <|im_end|>'s output row: a scaled copy of one ordinary token's, so that some greedy
        # sequences end (with EOS) where they would have emitted that token
        with torch.no_grad():
            w = model.lm_head.weight
            w[tok.token_to_id("<|im_end|>")] = w[d["eos_like"]] * d["eos_mult"]
    model.generation_config = gen
    out = WORK / name
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    gen.save_pretrained(out)
    t = hf_tokenizer(tok_dir, QWEN2_AUDIO_TEMPLATE, "qwen2_audio")
    fe = WhisperFeatureExtractor(
        feature_size=cfg.audio_config.num_mel_bins,
        sampling_rate=16000,
        hop_length=160,
        chunk_length=30,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=True,
    )
    proc = Qwen2AudioProcessor(
        feature_extractor=fe, tokenizer=t, chat_template=QWEN2_AUDIO_TEMPLATE
    )
    proc.save_pretrained(out)  # processor_config.json, chat_template.jinja
    fe.save_pretrained(out)  # preprocessor_config.json
    t.save_pretrained(out, save_jinja_files=False)  # chat_template inside tokenizer_config.json
    shutil.copy(tok_dir / "tokenizer.json", out / "tokenizer.json")
    log(f"built {name}: {sum(p.numel() for p in model.parameters())} parameters -> {out}")


def build() -> None:
    import torch

    torch.set_num_threads(1)
    tok_dir = WORK / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.save(str(tok_dir / "raw_tokenizer.json"))
    # round-trip through transformers once so the shipped tokenizer.json is byte-identical to
    # what save_pretrained writes (it adds an empty TemplateProcessing post-processor)
    t = hf_tokenizer_from_raw(tok_dir)
    t.save_pretrained(tok_dir / "hf")
    shutil.copy(tok_dir / "hf" / "tokenizer.json", tok_dir / "tokenizer.json")
    log(f"tokenizer: {tok.get_vocab_size()} tokens, specials {special_ids(tok)}")
    for name in QWEN_MODELS:
        build_qwen(name, tok_dir)
    build_voxtral(tok_dir)


def hf_tokenizer_from_raw(tok_dir: Path):
    tmp = tok_dir / "raw"
    tmp.mkdir(exist_ok=True)
    shutil.copy(tok_dir / "raw_tokenizer.json", tmp / "tokenizer.json")
    return hf_tokenizer(tmp, QWEN2_AUDIO_TEMPLATE, "qwen2_audio")


# --------------------------------------------------------------------------- ONNX wrappers


def graphs():
    """training/audio_llm_graphs.py, the torch modules the ONNX graphs are exported from:
    imported here, by the stages that export, so that torch is imported only when needed."""
    if str(ROOT / "training") not in sys.path:
        sys.path.insert(0, str(ROOT / "training"))
    import audio_llm_graphs

    return audio_llm_graphs


# --------------------------------------------------------------------------- export

OPSET = 17
META_FILES = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "chat_template.jinja",
]


def load_model(name: str):
    import torch

    cfg = json.loads((WORK / name / "config.json").read_text())
    if cfg["model_type"] == "voxtral":
        from transformers import VoxtralForConditionalGeneration as cls
    else:
        from transformers import Qwen2AudioForConditionalGeneration as cls
    model = cls.from_pretrained(WORK / name, attn_implementation="eager", dtype=torch.float32)
    return model.eval()


def text_dims(model):
    tc = model.config.text_config
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    return tc.num_hidden_layers, tc.num_key_value_heads, head_dim, tc.hidden_size


def export_model(name: str, out: Path, quantize: bool) -> None:
    import torch

    torch.set_num_threads(1)
    model = load_model(name)
    voxtral = model.config.model_type == "voxtral"
    onnx_dir = model_dir(name, out)
    g = torch.Generator().manual_seed(0)  # the example inputs, drawn in this order
    with torch.no_grad():
        export_audio_encoder(model, onnx_dir / "audio_encoder.onnx", g, voxtral)
        export_embed_tokens(model, onnx_dir / "embed_tokens.onnx")
        export_decoder(model, onnx_dir / "decoder_model_merged.onnx", g)
    check_graphs(model, onnx_dir, voxtral)
    if quantize:
        quantize_graphs(onnx_dir)
    log(f"exported {name} -> {out}")


def model_dir(name: str, out: Path) -> Path:
    """``out`` made afresh with the model's metadata files; its empty onnx/ folder."""
    onnx_dir = out / "onnx"
    if out.exists():
        shutil.rmtree(out)
    onnx_dir.mkdir(parents=True)
    for f in META_FILES:
        if (WORK / name / f).exists():
            shutil.copy(WORK / name / f, out / f)
    return onnx_dir


def onnx_export(module, args: tuple, path: Path, **names) -> None:
    """torch's TorchScript-based exporter at OPSET, constants folded; ``names``: the input
    and output names and the dynamic axes."""
    import torch

    torch.onnx.export(
        module,
        args,
        str(path),
        opset_version=OPSET,
        dynamo=False,
        do_constant_folding=True,
        **names,
    )


def export_audio_encoder(model, path: Path, g, voxtral: bool) -> None:
    """audio_encoder.onnx: voxtral's over the whole 30 s chunk; qwen2_audio's with the feature
    mask, its rows those of the valid frames."""
    import torch

    feats = torch.randn(1, model.config.audio_config.num_mel_bins, 3000, generator=g)
    if voxtral:
        onnx_export(
            graphs().VoxtralAudioEncoder(model),
            (feats,),
            path,
            input_names=["input_features"],
            output_names=["audio_features"],
        )
        return
    fmask = torch.zeros(1, 3000, dtype=torch.long)
    fmask[:, :1234] = 1
    onnx_export(
        graphs().AudioEncoder(model),
        (feats, fmask),
        path,
        input_names=["input_features", "feature_attention_mask"],
        output_names=["audio_features"],
        dynamic_axes={"audio_features": {0: "num_audio_tokens"}},
    )


def export_embed_tokens(model, path: Path) -> None:
    import torch

    onnx_export(
        graphs().EmbedTokens(model),
        (torch.tensor([[1, 2, 3, 4, 5]]),),
        path,
        input_names=["input_ids"],
        output_names=["inputs_embeds"],
        dynamic_axes={
            "input_ids": {0: "batch_size", 1: "sequence_length"},
            "inputs_embeds": {0: "batch_size", 1: "sequence_length"},
        },
    )


def decoder_io(n_layers: int, n_kv: int, head_dim: int, p: int, g) -> tuple[list, list, list, dict]:
    """The merged decoder graph's example cache (``p`` positions, drawn from ``g``), input and
    output names and dynamic axes, in the ONNX-community layout (also the bundled audio
    LLM's export: training/alm_export.py)."""
    import torch

    past = []
    names_in = ["inputs_embeds", "attention_mask", "position_ids"]
    names_out = ["logits"]
    dyn = {
        "inputs_embeds": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size", 1: "sequence_length"},
        "logits": {0: "batch_size", 1: "sequence_length"},
    }
    for i in range(n_layers):
        for kv in ("key", "value"):
            past.append(torch.randn(1, n_kv, p, head_dim, generator=g))
            names_in.append(f"past_key_values.{i}.{kv}")
            names_out.append(f"present.{i}.{kv}")
            dyn[f"past_key_values.{i}.{kv}"] = {0: "batch_size", 2: "past_sequence_length"}
            dyn[f"present.{i}.{kv}"] = {0: "batch_size", 2: "total_sequence_length"}
    return past, names_in, names_out, dyn


def export_decoder(model, path: Path, g) -> None:
    """decoder_model_merged.onnx, traced on a 2-token call over a 3-token cache."""
    import torch

    n_layers, n_kv, head_dim, hidden = text_dims(model)
    p, s = 3, 2
    past, names_in, names_out, dyn = decoder_io(n_layers, n_kv, head_dim, p, g)
    onnx_export(
        graphs().Decoder(model, model.config.text_config),
        (
            torch.randn(1, s, hidden, generator=g),
            torch.ones(1, p + s, dtype=torch.long),
            torch.arange(p, p + s)[None],
            *past,
        ),
        path,
        input_names=names_in,
        output_names=names_out,
        dynamic_axes=dyn,
    )


def quantize_graphs(onnx_dir: Path) -> None:
    """The three graphs' dynamic-int8 ``_quantized`` variants (QInt8 weights), each loaded once."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for f in ("audio_encoder", "embed_tokens", "decoder_model_merged"):
        src, dst = onnx_dir / f"{f}.onnx", onnx_dir / f"{f}_quantized.onnx"
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def check_graphs(model, onnx_dir: Path, voxtral: bool) -> None:
    """The ONNX graphs against transformers (audio embeddings, logits of a prompt) and the merged
    decoder's S>1-over-cache calls against S single steps."""
    rng = np.random.default_rng(1)  # the audio features, then the token ids
    n_mels = model.config.audio_config.num_mel_bins
    feats = rng.standard_normal((1, n_mels, 3000)).astype(np.float32) * 0.5
    enc = session(onnx_dir / "audio_encoder.onnx")
    if voxtral:
        check_voxtral_audio(model, enc, feats)
    else:
        check_qwen_audio(model, enc, feats)
    run = DecoderCalls(model, onnx_dir, rng)
    scale = check_prefill(model, run)
    check_cached_chunks(run, scale)
    log(f"checked graphs in {onnx_dir}: audio and logits match transformers, chunks == steps")


def check_voxtral_audio(model, enc, feats: np.ndarray) -> None:
    """audio_encoder.onnx against transformers' audio embeddings (what is scattered into the
    audio positions)."""
    import torch

    hidden = text_dims(model)[3]
    with torch.no_grad():
        ref = model.get_audio_features(torch.from_numpy(feats))
        ref = getattr(ref, "pooler_output", ref)
        ref = ref.reshape(-1, hidden).numpy()
        got = enc.run(None, {"input_features": feats})[0]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    err = np.abs(got - ref).max()
    log(f"  audio_encoder -> {got.shape[0]} rows: max |onnx - torch| {err:.2e}")
    assert err < 1e-4, err


def check_qwen_audio(model, enc, feats: np.ndarray) -> None:
    """audio_encoder.onnx against transformers' audio embeddings for three numbers of valid
    frames (the rows kept: those the processor counts <|AUDIO|> tokens for)."""
    import torch

    hidden = text_dims(model)[3]
    with torch.no_grad():
        for length in (3000, 2345, 400):
            fmask = np.zeros((1, 3000), np.int64)
            fmask[:, :length] = 1
            n = (((length - 1) // 2 + 1) - 2) // 2 + 1
            ref = qwen_audio_embeddings(model, torch.from_numpy(feats), torch.from_numpy(fmask))
            got = enc.run(None, {"input_features": feats, "feature_attention_mask": fmask})[0]
            assert got.shape == (n, hidden), (got.shape, n)
            err = np.abs(got - ref).max()
            log(f"  audio_encoder, {length} valid frames -> {n} rows: max |onnx - torch| {err:.2e}")
            assert err < 1e-4, err


class DecoderCalls:
    """embed_tokens.onnx over 30 random token ids, then decoder_model_merged.onnx called on
    any slice of them over a cache (None: an empty one)."""

    def __init__(self, model, onnx_dir: Path, rng: np.random.Generator):
        self.n_layers, self.n_kv, self.head_dim, _ = text_dims(model)
        self.dec = session(onnx_dir / "decoder_model_merged.onnx")
        self.ids = rng.integers(0, model.config.text_config.vocab_size, (1, 30))
        emb = session(onnx_dir / "embed_tokens.onnx")
        self.embeds = emb.run(None, {"input_ids": self.ids})[0]

    def __call__(self, lo: int, hi: int, past: list | None) -> tuple[np.ndarray, list]:
        feed = {
            "inputs_embeds": self.embeds[:, lo:hi],
            "attention_mask": np.ones((1, hi), np.int64),
            "position_ids": np.arange(lo, hi, dtype=np.int64)[None],
        }
        empty = np.zeros((1, self.n_kv, 0, self.head_dim), np.float32)
        for i in range(self.n_layers):
            for j, kv in enumerate(("key", "value")):
                feed[f"past_key_values.{i}.{kv}"] = past[2 * i + j] if past else empty
        out = self.dec.run(None, feed)
        return out[0], out[1:]


def check_prefill(model, run: DecoderCalls) -> float:
    """The logits of the 30 tokens in one call against transformers'; their largest magnitude."""
    import torch

    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(run.ids)).logits.numpy()
    full, _ = run(0, 30, None)
    scale = np.abs(ref).max()
    err = np.abs(full - ref).max()
    log(f"  prefill logits (max |logit| {scale:.1f}): max |onnx - torch| {err:.2e}")
    assert err < 1e-5 * scale, err
    return scale


def check_cached_chunks(run: DecoderCalls, scale: float) -> None:
    """A 10-token prefill, then steps of 1 token against chunks of 2, 5 and 16 tokens."""
    _, cache0 = run(0, 10, None)
    steps, cache = [], cache0
    for t in range(10, 30):
        lg, cache = run(t, t + 1, cache)
        steps.append(lg)
    steps = np.concatenate(steps, axis=1)
    for chunk in (2, 5, 16):
        got, cache, t = [], cache0, 10
        while t < 30:
            hi = min(30, t + chunk)
            lg, cache = run(t, hi, cache)
            got.append(lg)
            t = hi
        got = np.concatenate(got, axis=1)
        err = np.abs(got - steps).max()
        log(f"  chunks of {chunk} over the cache vs single steps: max diff {err:.2e}")
        assert err < 1e-5 * max(1.0, scale / 10), (chunk, err)


def qwen_audio_embeddings(model, feats, fmask):
    """transformers' own computation of the rows Qwen2AudioModel scatters into <|AUDIO|>."""
    import torch
    from transformers.masking_utils import create_bidirectional_mask

    m = model.model
    conv_len, out_len = m.audio_tower._get_feat_extract_output_lengths(fmask.sum(-1))
    max_len = (feats.shape[-1] - 2) // 2 + 1
    mask2d = (torch.arange(max_len)[None] < conv_len[:, None]).long()
    mask = create_bidirectional_mask(
        config=m.audio_tower.config,
        inputs_embeds=torch.zeros(1, max_len, 1),
        attention_mask=mask2d,
    )
    h = m.audio_tower(feats, attention_mask=mask).last_hidden_state
    h = m.multi_modal_projector(h)
    return h[0, : int(out_len[0])].numpy()


def export() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in QWEN_MODELS:
        export_model(name, OUT / name, quantize=(name == "drafter"))
    if (WORK / "voxtral").exists():
        export_model("voxtral", OUT / "voxtral", quantize=False)


# --------------------------------------------------------------------------- references


def conversation(instruction: str) -> list:
    return [
        {
            "role": "user",
            "content": [
                {"type": "audio", "audio_url": "window.wav"},
                {"type": "text", "text": instruction},
            ],
        }
    ]


def qwen_inputs(proc, audio, instruction: str):
    text = proc.apply_chat_template(
        conversation(instruction), add_generation_prompt=True, tokenize=False
    )
    inputs = proc(text=text, audio=[audio], sampling_rate=16000, return_tensors="pt")
    return text, inputs


def greedy_reference(model, inputs: dict) -> tuple[list[int], float]:
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs,
            do_sample=False,
            num_beams=1,
            max_new_tokens=MAX_NEW_TOKENS,
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = [int(i) for i in out.sequences[0, inputs["input_ids"].shape[1] :].tolist()]
    logits = torch.stack(out.logits)[:, 0]
    top = logits.topk(2, dim=-1).values
    assert [int(i) for i in logits.argmax(-1).tolist()] == tokens
    return tokens, float((top[:, 0] - top[:, 1]).min())


def reference() -> None:
    import tokenizers
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import Qwen2AudioProcessor

    torch.set_num_threads(1)
    c = corpus()
    cases = []
    for name in QWEN_MODELS:
        model = load_model(name)
        proc = Qwen2AudioProcessor.from_pretrained(OUT / name)
        tok = Tokenizer.from_file(str(OUT / name / "tokenizer.json"))
        audio_id = model.config.audio_token_index
        for wid in REFERENCE_WINDOWS:
            audio = c.get(wid).load_audio()
            for task, instruction in TASKS.items():
                text, inputs = qwen_inputs(proc, audio, instruction)
                ids = [int(i) for i in inputs["input_ids"][0].tolist()]
                n_audio = ids.count(audio_id)
                # the prompt ids are plain tokenizer.json ids of the expanded template text
                expanded = text.replace("<|AUDIO|>", "<|AUDIO|>" * n_audio)
                assert tok.encode(expanded, add_special_tokens=False).ids == ids
                frames = int(inputs["feature_attention_mask"].sum())
                assert n_audio == (((frames - 1) // 2 + 1) - 2) // 2 + 1
                tokens, margin = greedy_reference(model, inputs)
                cases.append(
                    dict(
                        window=wid,
                        model=name,
                        task=task,
                        instruction=instruction,
                        rendered=text,
                        prompt_ids=ids,
                        n_audio_tokens=n_audio,
                        feature_frames=int(inputs["feature_attention_mask"].sum()),
                        tokens=tokens,
                        text=tok.decode(tokens, skip_special_tokens=False),
                        min_margin=round(margin, 6),
                    )
                )
                log(
                    f"{name} {wid} {task}: {len(ids)} prompt ids ({n_audio} audio), "
                    f"{len(tokens)} new, min margin {margin:.4f}"
                )
    if (WORK / "voxtral").exists():
        cases += voxtral_reference(c)
    ref = {
        "generator": {
            "script": "training/audio_llm_fixtures.py",
            "method": (
                "transformers model.generate(do_sample=False, num_beams=1, max_new_tokens="
                f"{MAX_NEW_TOKENS}) on the processor's inputs, float32, eager attention, CPU; "
                "tokens = generated ids after the prompt (with the final EOS if reached); "
                "min_margin = smallest top-1 minus top-2 raw logit over the generated steps"
            ),
            "conversation": conversation("<instruction>"),
            "windows": REFERENCE_WINDOWS,
            "tasks": TASKS,
            "versions": {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "tokenizers": tokenizers.__version__,
                "numpy": np.__version__,
            },
        },
        "cases": cases,
    }
    write_reference(ref)


def write_reference(ref: dict) -> None:
    # one case per line: readable diffs, small file
    lines = ["{", '"generator": ' + json.dumps(ref["generator"]) + ","]
    for k in [k for k in ref if k not in ("generator", "cases")]:
        lines.append(json.dumps(k) + ": " + json.dumps(ref[k]) + ",")
    lines.append('"cases": [')
    lines.append(",\n".join(json.dumps(c, ensure_ascii=False) for c in ref["cases"]))
    lines.append("]}")
    (OUT / "reference.json").write_text("\n".join(lines) + "\n")
    json.loads((OUT / "reference.json").read_text())


# --------------------------------------------------------------------------- verify


class OnnxAudioLM:
    """The adapter's loop in numpy + onnxruntime: audio_encoder -> embed_tokens -> audio rows
    into the audio-token positions -> decoder_model_merged prefill -> one token at a time."""

    def __init__(self, model_dir: Path, suffix: str = ""):
        cfg = json.loads((model_dir / "config.json").read_text())
        gen = json.loads((model_dir / "generation_config.json").read_text())
        self.audio_id = cfg.get("audio_token_index", cfg.get("audio_token_id"))
        eos = gen["eos_token_id"]
        self.eos = set(eos if isinstance(eos, list) else [eos])
        d = model_dir / "onnx"
        self.enc = session(d / f"audio_encoder{suffix}.onnx")
        self.emb = session(d / f"embed_tokens{suffix}.onnx")
        self.dec = session(d / f"decoder_model_merged{suffix}.onnx")
        self.enc_inputs = [i.name for i in self.enc.get_inputs()]
        self.past_names = [i.name for i in self.dec.get_inputs() if i.name.startswith("past_")]
        shape = [i.shape for i in self.dec.get_inputs() if i.name.startswith("past_")][0]
        self.n_kv, self.head_dim = shape[1], shape[3]

    def audio(self, feats: np.ndarray, fmask: np.ndarray | None) -> np.ndarray:
        feed = {"input_features": feats.astype(np.float32)}
        if "feature_attention_mask" in self.enc_inputs:
            feed["feature_attention_mask"] = fmask.astype(np.int64)
        return self.enc.run(None, feed)[0]

    def step(self, embeds: np.ndarray, past: list, start: int):
        s = embeds.shape[1]
        feed = {
            "inputs_embeds": embeds,
            "attention_mask": np.ones((1, start + s), np.int64),
            "position_ids": np.arange(start, start + s, dtype=np.int64)[None],
        }
        for n, p in zip(self.past_names, past):
            feed[n] = p
        out = self.dec.run(None, feed)
        return out[0], out[1:]

    def generate(self, feats, fmask, prompt_ids: list[int], max_new: int) -> list[int]:
        ids = np.array(prompt_ids, np.int64)
        audio = self.audio(feats, fmask)
        embeds = self.emb.run(None, {"input_ids": ids[None]})[0]
        where = np.flatnonzero(ids == self.audio_id)
        assert len(where) == audio.shape[0], (len(where), audio.shape)
        embeds[0, where] = audio
        past = [np.zeros((1, self.n_kv, 0, self.head_dim), np.float32) for _ in self.past_names]
        logits, past = self.step(embeds, past, 0)
        pos, out = len(ids), []
        while True:
            t = int(np.argmax(logits[0, -1]))
            out.append(t)
            if t in self.eos or len(out) >= max_new:
                return out
            e = self.emb.run(None, {"input_ids": np.array([[t]], np.int64)})[0]
            logits, past = self.step(e, past, pos)
            pos += 1


def verify() -> None:
    from transformers import AutoProcessor

    ref = json.loads((OUT / "reference.json").read_text())
    c = corpus()
    summary: dict = {}
    feats_cache: dict = {}
    runners: dict = {}
    for case in ref["cases"]:
        name = case["model"]
        key = (name, case["window"])
        if key not in feats_cache:
            audio = c.get(case["window"]).load_audio()
            if name == "voxtral":
                from transformers import WhisperFeatureExtractor

                x = voxtral_features(WhisperFeatureExtractor.from_pretrained(OUT / name), audio)
                feats_cache[key] = (x, None)
            else:
                proc = AutoProcessor.from_pretrained(OUT / name)
                _, inputs = qwen_inputs(proc, audio, case["instruction"])
                assert inputs["input_ids"][0].tolist() == case["prompt_ids"]
                feats_cache[key] = (
                    inputs["input_features"].numpy(),
                    inputs["feature_attention_mask"].numpy(),
                )
        feats, fmask = feats_cache[key]
        variants = [("float", "")]
        if (OUT / name / "onnx" / "decoder_model_merged_quantized.onnx").exists():
            variants.append(("quantized", "_quantized"))
        for label, suffix in variants:
            if (name, suffix) not in runners:
                runners[(name, suffix)] = OnnxAudioLM(OUT / name, suffix)
            got = runners[(name, suffix)].generate(feats, fmask, case["prompt_ids"], MAX_NEW_TOKENS)
            ok = got == case["tokens"]
            case[f"onnx_{label}_match"] = ok
            if label == "quantized":
                case["onnx_quantized_tokens"] = got
            s = summary.setdefault(name, {}).setdefault(label, [0, 0])
            s[0] += ok
            s[1] += 1
            log(
                f"verify {name}{suffix} {case['window']} {case['task']}: "
                f"{'match' if ok else 'DIFFER'} ({len(got)} tokens)"
            )
    ref["verify"] = {
        "method": (
            "OnnxAudioLM in training/audio_llm_fixtures.py: numpy + onnxruntime (CPU) greedy loop over "
            "the processor's input_features/feature_attention_mask and prompt_ids; audio_encoder rows "
            "replace the audio-token embeddings in order; prefill then one token per call with the cache"
        ),
        "onnxruntime": __import__("onnxruntime").__version__,
        "matches": {n: {k: f"{v[0]}/{v[1]}" for k, v in d.items()} for n, d in summary.items()},
        "note": (
            "float graphs must reproduce transformers exactly; the drafter's dynamic-int8 "
            "_quantized graphs need not (onnx_quantized_tokens = their own greedy output)"
        ),
    }
    write_reference(ref)
    log(f"verify: {ref['verify']['matches']}")
    bad = [n for n, d in summary.items() if d["float"][0] != d["float"][1]]
    if bad:
        raise SystemExit(f"float ONNX differs from transformers for {bad}")


# --------------------------------------------------------------------------- voxtral

VOXTRAL = dict(
    audio=dict(
        num_mel_bins=128,
        d_model=16,
        encoder_layers=1,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,  # = 4 x d_model: the projector input is 4 stacked frames
    ),
    text=dict(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
    ),
    seed=6,  # chosen among seeds 1-6: distinct outputs, large gaps
    gains={"lm_head": 24.0},
)
VOXTRAL_WINDOWS = ["dev-read-000", "dev-meeting-001"]
VOXTRAL_AUDIO_TOKENS = 375  # per 30 s chunk: 1500 encoder frames / 4 stacked


def voxtral_config(tok):
    from transformers import GenerationConfig, VoxtralConfig

    sp = special_ids(tok)
    d = VOXTRAL
    cfg = VoxtralConfig(
        audio_config=dict(
            model_type="voxtral_encoder",
            max_source_positions=1500,
            activation_function="gelu",
            scale_embedding=False,
            vocab_size=tok.get_vocab_size(),  # unused by the encoder
            **d["audio"],
        ),
        text_config=dict(
            model_type="llama",
            vocab_size=tok.get_vocab_size(),
            max_position_embeddings=1024,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 100000000.0},
            hidden_act="silu",
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            bos_token_id=sp["<s>"],
            eos_token_id=sp["</s>"],
            pad_token_id=sp["<|endoftext|>"],
            **d["text"],
        ),
        audio_token_id=sp["[AUDIO]"],
        projector_hidden_act="gelu",
    )
    cfg._attn_implementation = "eager"
    gen = GenerationConfig(
        bos_token_id=sp["<s>"],
        eos_token_id=sp["</s>"],
        pad_token_id=sp["<|endoftext|>"],
        do_sample=False,
        num_beams=1,
    )
    return cfg, gen


def build_voxtral(tok_dir: Path) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import VoxtralForConditionalGeneration, WhisperFeatureExtractor

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    cfg, gen = voxtral_config(tok)
    torch.manual_seed(VOXTRAL["seed"])
    model = VoxtralForConditionalGeneration(cfg).eval()
    scale_weights(model, VOXTRAL["seed"], cfg.text_config, VOXTRAL["gains"])
    model.generation_config = gen
    out = WORK / "voxtral"
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    gen.save_pretrained(out)
    fe = WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=16000,
        hop_length=160,
        chunk_length=30,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=False,
    )
    fe.save_pretrained(out)
    t = hf_tokenizer(tok_dir, VOXTRAL_TEMPLATE, "voxtral")
    t.save_pretrained(out, save_jinja_files=False)
    # transformers 5 writes its own class name ("TokenizersBackend"); the portable one loads in 4.x too
    tc = json.loads((out / "tokenizer_config.json").read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").write_text(VOXTRAL_TEMPLATE)
    shutil.copy(tok_dir / "tokenizer.json", out / "tokenizer.json")
    log(f"built voxtral: {sum(p.numel() for p in model.parameters())} parameters -> {out}")


def voxtral_render(tokenizer, instruction: str) -> str:
    return tokenizer.apply_chat_template(conversation(instruction), tokenize=False)


def voxtral_features(fe, audio) -> np.ndarray:
    x = fe(audio, sampling_rate=16000, padding="max_length", return_tensors="np").input_features
    assert x.shape == (1, 128, 3000), x.shape
    return x.astype(np.float32)


def voxtral_reference(c) -> list[dict]:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    model = load_model("voxtral")
    d = OUT / "voxtral"
    fe = WhisperFeatureExtractor.from_pretrained(d)
    t = AutoTokenizer.from_pretrained(d)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    cases = []
    for wid in VOXTRAL_WINDOWS:
        audio = c.get(wid).load_audio()
        feats = voxtral_features(fe, audio)
        instruction = TASKS["transcribe"]
        text = voxtral_render(t, instruction)
        expanded = text.replace("[AUDIO]", "[AUDIO]" * VOXTRAL_AUDIO_TOKENS)
        ids = tok.encode(expanded, add_special_tokens=False).ids
        assert t(expanded, add_special_tokens=False).input_ids == ids
        inputs = {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
            "input_features": torch.from_numpy(feats),
        }
        tokens, margin = greedy_reference(model, inputs)
        cases.append(
            dict(
                window=wid,
                model="voxtral",
                task="transcribe",
                instruction=instruction,
                rendered=text,
                prompt_ids=ids,
                n_audio_tokens=ids.count(model.config.audio_token_id),
                feature_frames=3000,
                tokens=tokens,
                text=tok.decode(tokens, skip_special_tokens=False),
                min_margin=round(margin, 6),
            )
        )
        log(f"voxtral {wid}: {len(ids)} prompt ids, {len(tokens)} new, min margin {margin:.4f}")
    return cases


def features() -> None:
    """features_unpadded.npz: WhisperFeatureExtractor's 80-bin features of a 3 s clip with
    padding="longest" (an ultravox model's features: the audio's own frames, no 30 s window)."""
    from transformers import WhisperFeatureExtractor

    audio = corpus().get("dev-read-000").load_audio()[:48123]
    fe = WhisperFeatureExtractor(feature_size=80)
    feats = fe(audio, sampling_rate=16000, padding="longest", return_tensors="np")[
        "input_features"
    ][0]
    np.savez_compressed(
        OUT / "features_unpadded.npz",
        audio=audio.astype(np.float32),
        features=feats.astype(np.float32),
    )
    log(f"features_unpadded.npz: {feats.shape}")


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["build", "export", "reference", "verify", "features", "all"])
    a = ap.parse_args()
    stages = (
        ["build", "export", "reference", "verify", "features"] if a.stage == "all" else [a.stage]
    )
    for st in stages:
        log(f"== {st}")
        globals()[st]()


if __name__ == "__main__":
    main()
