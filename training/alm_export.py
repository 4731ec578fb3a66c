"""Export a trained audio LLM (alm_train.py checkpoint) to the ONNX-community layout the
toolkit's audio-LLM adapter reads (docs/models.md, "Audio language models").

    python training/alm_export.py --model target [--ckpt PATH] [--out DIR] [--quantize]

Writes ``DIR`` (default training/work/alm/export/<model>): config.json (``model_type``
``ultravox``: the audio placeholder ``<|audio|>``, features of the audio alone, not padded
to 30 s), generation_config.json, tokenizer.json, tokenizer_config.json (the chat
template), preprocessor_config.json (a WhisperFeatureExtractor's, 80 bins) and onnx/:

* audio_encoder.onnx: ``input_features`` (1, 80, frames) -> ``audio_features`` (N, hidden);
* embed_tokens.onnx: ``input_ids`` -> ``inputs_embeds``;
* decoder_model_merged.onnx: ``inputs_embeds``, ``attention_mask``, ``position_ids``,
  ``past_key_values.<i>.key/value`` -> ``logits``, ``present.<i>.key/value``;

each checked against torch on random inputs; ``--quantize`` adds ``_quantized`` variants
(8-bit MatMulNBits weights, block 32, the bundled drafter's quantisation).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))

from alm_models import AUDIO, CHAT_TEMPLATE, EOS, PAD, AlmConfig, AudioLM  # noqa: E402
from audio_llm_fixtures import decoder_io  # noqa: E402

ALM = ROOT / "training" / "work" / "alm"
OPSET = 17
MAX_NEW_TOKENS = 256


class EncoderGraph(torch.nn.Module):
    def __init__(self, model: AudioLM) -> None:
        super().__init__()
        self.tower = model.tower

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.tower(input_features.transpose(1, 2))[0]


class EmbedGraph(torch.nn.Module):
    def __init__(self, model: AudioLM) -> None:
        super().__init__()
        self.embed = model.text.embed

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed(input_ids)


def load(ckpt: Path) -> AudioLM:
    saved = torch.load(ckpt, weights_only=False, map_location="cpu")
    model = AudioLM(AlmConfig(**saved["cfg"]))
    model.load_state_dict(saved["model"])
    return model.eval()


def export_graphs(model: AudioLM, onnx_dir: Path) -> None:
    cfg = model.cfg
    kw = {"opset_version": OPSET, "dynamo": False, "do_constant_folding": True}
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        torch.onnx.export(
            EncoderGraph(model),
            (torch.randn(1, cfg.n_mels, 777, generator=g),),
            str(onnx_dir / "audio_encoder.onnx"),
            input_names=["input_features"],
            output_names=["audio_features"],
            dynamic_axes={"input_features": {2: "frames"}, "audio_features": {0: "audio_rows"}},
            **kw,
        )
        torch.onnx.export(
            EmbedGraph(model),
            (torch.tensor([[1, 2, 3]]),),
            str(onnx_dir / "embed_tokens.onnx"),
            input_names=["input_ids"],
            output_names=["inputs_embeds"],
            dynamic_axes={
                "input_ids": {0: "batch_size", 1: "sequence_length"},
                "inputs_embeds": {0: "batch_size", 1: "sequence_length"},
            },
            **kw,
        )
        p, s = 3, 2
        past, names_in, names_out, dyn = decoder_io(cfg.layers, cfg.kv_heads, cfg.head_dim, p, g)
        torch.onnx.export(
            model.text,
            (
                torch.randn(1, s, cfg.hidden, generator=g),
                torch.ones(1, p + s, dtype=torch.long),
                torch.arange(p, p + s)[None],
                *past,
            ),
            str(onnx_dir / "decoder_model_merged.onnx"),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes=dyn,
            **kw,
        )


def check_graphs(model: AudioLM, onnx_dir: Path, suffix: str = "") -> float:
    """Largest absolute difference between torch and the ONNX graphs on random inputs."""
    import onnxruntime as ort

    def sess(name: str) -> ort.InferenceSession:
        return ort.InferenceSession(
            str(onnx_dir / f"{name}{suffix}.onnx"), providers=["CPUExecutionProvider"]
        )

    cfg = model.cfg
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    with torch.no_grad():
        for frames in (401, 1234):
            f = torch.randn(1, cfg.n_mels, frames, generator=g)
            (got,) = sess("audio_encoder").run(None, {"input_features": f.numpy()})
            worst = max(worst, float(np.abs(got - EncoderGraph(model)(f).numpy()).max()))
        ids = torch.tensor([[5, 9, 2, 7]])
        (got,) = sess("embed_tokens").run(None, {"input_ids": ids.numpy()})
        worst = max(worst, float(np.abs(got - model.text.embed(ids).numpy()).max()))
        dec = sess("decoder_model_merged")
        for p, s in ((0, 40), (40, 1), (41, 6)):
            x = torch.randn(1, s, cfg.hidden, generator=g)
            past = [
                torch.randn(1, cfg.kv_heads, p, cfg.head_dim, generator=g)
                for _ in range(2 * cfg.layers)
            ]
            mask = torch.ones(1, p + s, dtype=torch.long)
            pos = torch.arange(p, p + s)[None]
            want = model.text(x, mask, pos, *past)
            feeds = {
                "inputs_embeds": x.numpy(),
                "attention_mask": mask.numpy(),
                "position_ids": pos.numpy(),
            }
            for i in range(cfg.layers):
                feeds[f"past_key_values.{i}.key"] = past[2 * i].numpy()
                feeds[f"past_key_values.{i}.value"] = past[2 * i + 1].numpy()
            got = dec.run(None, feeds)
            worst = max(
                worst,
                max(float(np.abs(a - b.numpy()).max()) for a, b in zip(got, want, strict=True)),
            )
    return worst


def quantize(onnx_dir: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    for name in ("audio_encoder", "embed_tokens", "decoder_model_merged"):
        m = onnx.load(str(onnx_dir / f"{name}.onnx"))
        q = MatMulNBitsQuantizer(m, block_size=32, is_symmetric=True, bits=8, accuracy_level=4)
        q.process()
        q.model.save_model_to_file(str(onnx_dir / f"{name}_quantized.onnx"), False)


def write_metadata(model: AudioLM, out: Path) -> None:
    from tokenizers import Tokenizer

    cfg = model.cfg
    shutil.copy(ALM / "tokenizer.json", out / "tokenizer.json")
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos, audio = tok.token_to_id(EOS), tok.token_to_id(AUDIO)
    enc = cfg.encoder_dims()
    config = {
        "model_type": "ultravox",
        "architectures": ["As2dAudioLM"],
        "audio_token_index": audio,
        "stack_factor": cfg.stack,
        "projector_act": "gelu",
        "audio_config": {
            "model_type": "as2d_speech_encoder",
            "num_mel_bins": cfg.n_mels,
            "d_model": enc.d,
            "encoder_layers": enc.enc_layers,
            "encoder_attention_heads": enc.heads,
            "encoder_ffn_dim": enc.ffn,
            "frames_per_second": 25,
            "feature_adapter": "linear",
        },
        "text_config": {
            "model_type": "llama",
            "hidden_size": cfg.hidden,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "intermediate_size": cfg.intermediate,
            "vocab_size": cfg.vocab,
            "max_position_embeddings": cfg.max_positions,
            "rope_theta": cfg.rope_theta,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "eos_token_id": eos,
        },
    }
    files = {
        "config.json": config,
        "generation_config.json": {
            "eos_token_id": eos,
            "max_new_tokens": MAX_NEW_TOKENS,
            "do_sample": False,
        },
        "tokenizer_config.json": {
            "chat_template": CHAT_TEMPLATE,
            "eos_token": EOS,
            "pad_token": PAD,
            "bos_token": None,
            "model_max_length": cfg.max_positions,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
        "preprocessor_config.json": {
            "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": cfg.n_mels,
            "sampling_rate": 16000,
            "hop_length": 160,
            "n_fft": 400,
            "chunk_length": 30,
            "padding_value": 0.0,
            "return_attention_mask": False,
            "audio_token": AUDIO,
        },
    }
    for name, doc in files.items():
        (out / name).write_text(
            json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["target", "drafter"], required=True)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quantize", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load(Path(args.ckpt) if args.ckpt else ALM / args.model / "ckpt.pt")
    out = Path(args.out) if args.out else ALM / "export" / args.model
    if out.exists():
        shutil.rmtree(out)
    (out / "onnx").mkdir(parents=True)
    export_graphs(model, out / "onnx")
    err = check_graphs(model, out / "onnx")
    print(f"{args.model}: ONNX vs torch max abs error {err:.2e}")
    if err > 1e-3:
        raise SystemExit(f"{args.model}: the exported graphs differ from torch by {err:.2e}")
    if args.quantize:
        quantize(out / "onnx")
        print(
            f"{args.model}: 8-bit variant max abs error {check_graphs(model, out / 'onnx', '_quantized'):.2e}"
        )
    write_metadata(model, out)
    print(f"exported -> {out}")


if __name__ == "__main__":
    main()
