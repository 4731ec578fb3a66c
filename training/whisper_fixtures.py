"""Make the small Whisper-architecture pair the tests use (tests/data/whisper/).

A real model pair in the exact layouts `optimum-cli export onnx --task
automatic-speech-recognition-with-past` writes, small enough to commit (a few MB), trained
briefly on the development split so its greedy output depends on the audio (random weights
collapse to one repeated token). It is a fixture for the Whisper adapter, not a recogniser.

    python training/whisper_fixtures.py train  --model target   # ~10 min on one core
    python training/whisper_fixtures.py train  --model drafter
    python training/whisper_fixtures.py package                 # export, layouts, references

Needs the train extra plus transformers and optimum (`pip install transformers
'optimum[onnx]'`); none of them is a runtime dependency.

* target: 128 log-mel bins (the large-v3 family's), d 64, 2+2 layers, the flat layout with
  ``decoder_model_merged.onnx``.
* drafter: 80 bins, d 48, 2 encoder + 1 decoder layers, the ``onnx/`` layout with
  ``decoder_model.onnx`` + ``decoder_with_past_model.onnx`` and ``_quantized`` variants
  (dynamic int8, as the community's ONNX repositories ship them).
* both share one tokenizer: the bundled BPE plus Whisper's special tokens.
* reference.json: transformers' greedy generation for some windows (both models, both
  tasks); features.npz: WhisperFeatureExtractor's features for two windows (80 and 128 bins).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "training" / "work" / "whisper"
OUT = ROOT / "tests" / "data" / "whisper"
LANGUAGES = ["en", "de", "es", "fr"]
SPECIALS = (
    ["<|endoftext|>", "<|startoftranscript|>"]
    + [f"<|{x}|>" for x in LANGUAGES]
    + [
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
    ]
)
MAX_TARGET = 128
FEATURE_FRAMES = 500
DIMS = {
    "target": dict(
        num_mel_bins=128,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
    ),
    "drafter": dict(
        num_mel_bins=80,
        d_model=48,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=96,
        decoder_ffn_dim=96,
    ),
}
REFERENCE_WINDOWS = [
    "dev-read-000",
    "dev-meeting-001",
    "dev-sung-002",
    "dev-multilingual-000",
    "dev-accented-003",
    "val-read-004",
]


def tokenizer():
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(ROOT / "as2d_cli" / "assets" / "models" / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def ids(tok) -> dict[str, int]:
    return {s: tok.token_to_id(s) for s in SPECIALS}


def configs(name: str, tok):
    from transformers import GenerationConfig, WhisperConfig

    sp = ids(tok)
    vocab = tok.get_vocab_size()
    cfg = WhisperConfig(
        vocab_size=vocab,
        max_source_positions=1500,
        max_target_positions=MAX_TARGET,
        decoder_start_token_id=sp["<|startoftranscript|>"],
        eos_token_id=sp["<|endoftext|>"],
        bos_token_id=sp["<|endoftext|>"],
        pad_token_id=sp["<|endoftext|>"],
        begin_suppress_tokens=None,
        suppress_tokens=None,
        **DIMS[name],
    )
    gen = GenerationConfig(
        decoder_start_token_id=sp["<|startoftranscript|>"],
        eos_token_id=sp["<|endoftext|>"],
        bos_token_id=sp["<|endoftext|>"],
        pad_token_id=sp["<|endoftext|>"],
        max_length=MAX_TARGET,
        is_multilingual=True,
        lang_to_id={f"<|{x}|>": sp[f"<|{x}|>"] for x in LANGUAGES},
        task_to_id={"transcribe": sp["<|transcribe|>"], "translate": sp["<|translate|>"]},
        no_timestamps_token_id=sp["<|notimestamps|>"],
        # As Whisper's: never the special tokens below; not a space or EOS first.
        suppress_tokens=[sp["<|startoflm|>"], sp["<|startofprev|>"], sp["<|nospeech|>"], 0, 3],
        begin_suppress_tokens=[tok.token_to_id("▁"), sp["<|endoftext|>"]],
        forced_decoder_ids=None,
        return_timestamps=False,
    )
    return cfg, gen


def train(name: str, minutes: float, seed: int) -> None:
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    sys.path.insert(0, str(ROOT))
    from as2d_cli.corpus.manifest import load_corpus

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tok = tokenizer()
    sp = ids(tok)
    cfg, gen = configs(name, tok)
    model = WhisperForConditionalGeneration(cfg)
    fe = WhisperFeatureExtractor(feature_size=cfg.num_mel_bins)
    windows = [w for w in load_corpus().windows if w.split in ("dev", "val")]
    feats, seqs = [], []
    for w in windows:
        feats.append(fe(w.load_audio(), sampling_rate=16000, return_tensors="np").input_features[0])
        text = tok.encode(w.text, add_special_tokens=False).ids[: MAX_TARGET - 6]
        seqs.append(
            [
                sp["<|startoftranscript|>"],
                sp[f"<|{w.language}|>"],
                sp["<|transcribe|>"],
                sp["<|notimestamps|>"],
                *text,
                sp["<|endoftext|>"],
            ]
        )
    feats = torch.tensor(np.stack(feats))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    out = WORK / name
    out.mkdir(parents=True, exist_ok=True)
    t0, step = time.time(), 0
    model.train()
    while time.time() - t0 < minutes * 60:
        batch = rng.choice(len(seqs), size=8, replace=False)
        width = max(len(seqs[i]) for i in batch)
        inp = torch.full((8, width - 1), sp["<|endoftext|>"], dtype=torch.long)
        lab = torch.full((8, width - 1), -100, dtype=torch.long)
        for r, i in enumerate(batch):
            s = seqs[i]
            inp[r, : len(s) - 1] = torch.tensor(s[:-1])
            lab[r, : len(s) - 1] = torch.tensor(s[1:])
            lab[r, :3] = -100  # the prompt is given, not learned
        logits = model(input_features=feats[batch], decoder_input_ids=inp).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), lab.reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"{name} step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
        if step % 500 == 0:
            save(model, gen, tok, out)
    save(model, gen, tok, out)
    print(f"{name}: {step} steps, final loss {loss.item():.3f}")


def save(model, gen, tok, out: Path) -> None:
    model.save_pretrained(out)
    gen.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))


def optimum_export(tmp: Path) -> None:
    """Both trained models through optimum-cli into ``tmp``/<name>."""
    for name in ("target", "drafter"):
        dst = tmp / name
        if dst.exists():
            shutil.rmtree(dst)
        subprocess.run(
            [
                "optimum-cli",
                "export",
                "onnx",
                "--model",
                str(WORK / name),
                "--task",
                "automatic-speech-recognition-with-past",
                str(dst),
            ],
            check=True,
        )


def write_layouts(tmp: Path) -> None:
    """The target in the flat layout with the merged decoder; the drafter in the onnx/ layout
    with split decoders and dynamic-int8 variants."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keep_meta = ["config.json", "generation_config.json", "tokenizer.json"]
    t = OUT / "target"
    t.mkdir()
    for f in ["encoder_model.onnx", "decoder_model_merged.onnx"]:
        shutil.copy(tmp / "target" / f, t / f)
    for f in keep_meta:
        shutil.copy(WORK / "target" / f, t / f)
    d = OUT / "drafter"
    (d / "onnx").mkdir(parents=True)
    for f in keep_meta:
        shutil.copy(WORK / "drafter" / f, d / f)
    for f in ["encoder_model", "decoder_model", "decoder_with_past_model"]:
        shutil.copy(tmp / "drafter" / f"{f}.onnx", d / "onnx" / f"{f}.onnx")
        quantize_dynamic(
            str(d / "onnx" / f"{f}.onnx"),
            str(d / "onnx" / f"{f}_quantized.onnx"),
            weight_type=QuantType.QUInt8,
        )


def references() -> tuple[dict, dict[str, np.ndarray]]:
    """transformers' greedy generation of both models on REFERENCE_WINDOWS (both tasks on the
    first), and WhisperFeatureExtractor's features of the first two windows."""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    from as2d_cli.corpus.manifest import load_corpus

    corpus = load_corpus()
    ref: dict = {
        "generator": "transformers " + __import__("transformers").__version__ + " greedy generate",
        "windows": {},
    }
    feats: dict[str, np.ndarray] = {}
    for name in ("target", "drafter"):
        model = WhisperForConditionalGeneration.from_pretrained(WORK / name).eval()
        fe = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
        for wid in REFERENCE_WINDOWS:
            w = corpus.get(wid)
            audio = w.load_audio()
            x = fe(audio, sampling_rate=16000, return_tensors="pt").input_features
            if wid in REFERENCE_WINDOWS[:2]:
                # the first 5 s of frames (the rest is more of the same; the file stays small)
                feats[f"{wid}.{model.config.num_mel_bins}"] = x[0].numpy()[:, :FEATURE_FRAMES]
            for task in ("transcribe", "translate"):
                if task == "translate" and wid != REFERENCE_WINDOWS[0]:
                    continue
                with torch.no_grad():
                    out = model.generate(
                        x,
                        language=w.language,
                        task=task,
                        do_sample=False,
                        num_beams=1,
                        return_timestamps=False,
                    )
                ref["windows"].setdefault(wid, {}).setdefault(name, {})[task] = {
                    "language": w.language,
                    "sequence": [int(i) for i in out[0].tolist()],
                }
    return ref, feats


def package() -> None:
    """Export both models with optimum-cli into the two layouts, quantize the drafter's
    variants, and record transformers' references."""
    # A missing export dependency fails here, before the fixture folder is removed.
    import onnxruntime.quantization  # noqa: F401
    import transformers  # noqa: F401

    sys.path.insert(0, str(ROOT))
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tmp = WORK / "export"
    optimum_export(tmp)
    write_layouts(tmp)
    make_ctc(OUT / "ctc", tmp)
    ref, feats = references()
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    np.savez_compressed(OUT / "features.npz", **feats)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


def make_ctc(dst: Path, tmp: Path) -> None:
    """A tiny wav2vec2 CTC model (random weights: its text is noise) exported by optimum-cli,
    with its character vocab.json and preprocessor_config.json: the external-CTC fixture."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    torch.manual_seed(2)
    chars = ["<pad>", "<s>", "</s>", "<unk>", "|"] + list("abcdefghijklmnopqrstuvwxyz'")
    vocab = {c: i for i, c in enumerate(chars)}
    cfg = Wav2Vec2Config(
        vocab_size=len(chars),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 4, 4),
        conv_kernel=(10, 4, 4),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        pad_token_id=0,
        do_stable_layer_norm=False,
        feat_extract_norm="group",
    )
    src = tmp / "ctc-hf"
    Wav2Vec2ForCTC(cfg).save_pretrained(src)
    Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=False).save_pretrained(src)
    (src / "vocab.json").write_text(json.dumps(vocab))
    out = tmp / "ctc-onnx"
    if out.exists():
        shutil.rmtree(out)
    subprocess.run(
        [
            "optimum-cli",
            "export",
            "onnx",
            "--model",
            str(src),
            "--task",
            "automatic-speech-recognition",
            str(out),
        ],
        check=True,
    )
    dst.mkdir(parents=True)
    shutil.copy(out / "model.onnx", dst / "model.onnx")
    shutil.copy(src / "vocab.json", dst / "vocab.json")
    shutil.copy(src / "preprocessor_config.json", dst / "preprocessor_config.json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", choices=["train", "package"])
    ap.add_argument("--model", choices=["target", "drafter"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.stage == "train":
        train(a.model, a.minutes, a.seed)
    else:
        package()


if __name__ == "__main__":
    main()
