"""Rebuild a training checkpoint from the shipped ONNX files, so training can continue when
training/work/<model>/ckpt.pt is gone (a fresh checkout keeps only the exported models).

Usage: python training/from_onnx.py --model target|drafter|ctc [--force]

The legacy exporter keeps most parameters under their torch names ("m.encoder.ln.weight")
and stores each Linear weight transposed as an anonymous MatMul initializer; the MatMul
node's scope name ("/encoder/layers.0/mlp/mlp.0/MatMul", "/ck_2/MatMul") says which module
it belongs to. Every torch parameter must be recovered except the training-only encoder CTC
head (``ctc_head``, freshly initialised: it relearns in a few hundred steps). The rebuilt
model is checked against the ONNX files on random inputs before the checkpoint is written.

A decoder exported with 8-bit weights (export.py --int8, the drafter's by default) is read
back as the float weights its codes stand for: the continued run starts from the rounded
weights (within 0.4 % of each 32-weight block's largest), not the float ones it was exported from.

The checkpoint carries a fresh AdamW state and the step/epoch/wall figures of models.json;
``state["restored_from_onnx"]`` records that the optimiser moments and data position were
lost, so a continued run should re-warm (``--deadline`` with ``--warmup``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch
from onnx import load as onnx_load
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))

from export import decoder_feeds  # noqa: E402
from models import CtcModel, Dims, Seq2Seq  # noqa: E402

ASSETS = ROOT / "as2d_cli" / "assets" / "models"
WORK = ROOT / "training" / "work"
SEEDS = {"target": 11, "drafter": 22, "ctc": 33}


def _scope_to_param(scope: str) -> str:
    """'/encoder/layers.0/mlp/mlp.0/MatMul' -> 'encoder.layers.0.mlp.0.weight';
    '/ck_2/MatMul' (the encoder export's per-layer cross K/V) -> 'decoder.layers.2.ck.weight';
    '/m/head/MatMul' -> 'head.weight'."""
    parts = scope.strip("/").split("/")[:-1]
    if parts and parts[0] == "m":  # ctc.onnx keeps its export wrapper's scope: '/m/encoder/...'
        parts = parts[1:]
    m = re.fullmatch(r"(ck|cv)(?:_(\d+))?", parts[0]) if len(parts) == 1 else None
    if m:
        return f"decoder.layers.{int(m.group(2) or 0)}.{m.group(1)}.weight"
    path: list[str] = []
    for p in parts:  # a Sequential child's scope repeats its parent: 'mlp/mlp.0'
        path.append(p[len(path[-1]) + 1 :] if path and p.startswith(path[-1] + ".") else p)
    return ".".join(path) + ".weight"


def onnx_params(path: Path) -> dict[str, np.ndarray]:
    """Torch-named parameters found in one exported file."""
    g = onnx_load(str(path)).graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for node in g.node:  # export.store_exact_fp16: a float16 initializer behind a Cast
        if node.op_type == "Cast" and node.input[0] in inits:
            inits[node.output[0]] = inits.pop(node.input[0]).astype(np.float32)
    out = {k[2:]: v for k, v in inits.items() if k.startswith("m.")}
    for node in g.node:
        if (
            node.op_type == "MatMulNBits"
        ):  # export.quantize_matmuls: an 8-bit weight, read back as float
            weights = [_dequantize(node, inits)]
        elif node.op_type == "MatMul":
            weights = [inits[n] for n in node.input if n in inits and n.startswith("onnx::")]
        else:
            continue
        for w in weights:
            key = _scope_to_param(node.name)
            if key == "decoder.weight":  # logits @ emb.T: the tied copy of decoder.emb.weight
                continue
            out[key] = w.T.copy()
    return out


def _dequantize(node, inits: dict[str, np.ndarray]) -> np.ndarray:
    """A MatMulNBits weight as the float (K, N) matrix it stands for: ``B`` holds N rows of
    ceil(K / block) blocks of unsigned codes, one scale per block, and the zero point is
    ``zero_points`` or, for a symmetric export, 2^(bits-1)."""
    attr = {a.name: a.i for a in node.attribute}
    k, n, bits, block = attr["K"], attr["N"], attr["bits"], attr["block_size"]
    if bits != 8:
        raise SystemExit(
            f"{node.name}: {bits}-bit weights cannot be read back (export.py writes 8-bit)"
        )
    codes = inits[node.input[1]].reshape(n, -1, block).astype(np.float32)
    scales = inits[node.input[2]].reshape(n, -1, 1).astype(np.float32)
    zp = 2.0 ** (bits - 1)
    if len(node.input) > 3 and node.input[3]:
        zp = inits[node.input[3]].reshape(n, -1, 1).astype(np.float32)
    return ((codes - zp) * scales).reshape(n, -1)[:, :k].T.copy()


def owner_encoder(manifest: dict, entry: dict) -> Path | None:
    """The encoder file a model with ``encoder_from`` reads (None: it has its own)."""
    owner = entry.get("encoder_from")
    return ASSETS / manifest["models"][owner]["files"]["encoder"] if owner else None


def rebuild(kind: str, manifest: dict) -> tuple[torch.nn.Module, Dims, dict]:
    entry = manifest["models"][kind]
    dims = Dims(**entry["dims"])
    torch.manual_seed(SEEDS[kind])
    if kind == "ctc":
        chars = json.loads((ASSETS / "ctc_chars.json").read_text())["chars"]
        model: torch.nn.Module = CtcModel(dims, len(chars))
    else:
        model = Seq2Seq(dims)
    found: dict[str, np.ndarray] = {}
    shared = owner_encoder(manifest, entry)
    if shared is not None:  # a drafter reading another model's encoder: take only its encoder
        found.update({k: v for k, v in onnx_params(shared).items() if k.startswith("encoder.")})
    for f in entry["files"].values():
        found.update(onnx_params(ASSETS / f))
    sd = model.state_dict()
    missing = [k for k in sd if k not in found and not k.startswith("ctc_head.")]
    if missing:
        raise SystemExit(f"{kind}: parameters not found in the ONNX files: {missing[:5]}")
    extra = sorted(set(found) - set(sd))
    if extra:
        raise SystemExit(f"{kind}: ONNX parameters with no torch counterpart: {extra[:5]}")
    for k, v in found.items():
        if tuple(v.shape) != tuple(sd[k].shape):
            raise SystemExit(
                f"{kind}: {k} has shape {v.shape} in ONNX, {tuple(sd[k].shape)} in torch"
            )
        sd[k] = torch.from_numpy(np.array(v, copy=True))
    model.load_state_dict(sd)
    model.eval()
    return model, dims, entry


def check(model: torch.nn.Module, dims: Dims, manifest: dict, kind: str) -> float:
    """Largest absolute difference between the rebuilt torch model and the ONNX files."""
    import onnxruntime as ort

    entry = manifest["models"][kind]
    mel = torch.randn(1, 333, dims.n_mels) * 0.3
    with torch.no_grad():
        if kind == "ctc":
            sess = ort.InferenceSession(
                str(ASSETS / entry["files"]["model"]), providers=["CPUExecutionProvider"]
            )
            want = torch.log_softmax(model(mel), dim=-1).numpy()
            return float(np.abs(sess.run(None, {"mel": mel.numpy()})[0] - want).max())
        dec_s = ort.InferenceSession(
            str(ASSETS / entry["files"]["decoder"]), providers=["CPUExecutionProvider"]
        )
        enc, _ = model.encoder(mel)
        ck, cv = model.decoder.cross_kv(enc)
        shared = owner_encoder(manifest, entry)
        if shared is not None:
            enc_s = ort.InferenceSession(str(shared), providers=["CPUExecutionProvider"])
            cross_s = ort.InferenceSession(
                str(ASSETS / entry["files"]["cross"]), providers=["CPUExecutionProvider"]
            )
            (hidden,) = enc_s.run(["hidden"], {"mel": mel.numpy()})
            got_k, got_v = cross_s.run(None, {"hidden": hidden})
            err = float(np.abs(hidden - enc.numpy()).max())
        else:
            enc_s = ort.InferenceSession(
                str(ASSETS / entry["files"]["encoder"]), providers=["CPUExecutionProvider"]
            )
            got_k, got_v = enc_s.run(["cross_k", "cross_v"], {"mel": mel.numpy()})
            err = 0.0
        err = max(
            err, float(np.abs(got_k - ck.numpy()).max()), float(np.abs(got_v - cv.numpy()).max())
        )
        tokens = torch.randint(4, dims.vocab, (1, 8))
        pk, pv = model.decoder.empty_past(1)
        logits, _, _ = model.decoder(tokens, pk, pv, ck, cv)
        names = [i.name for i in dec_s.get_inputs()]
        if "past_k" in names:  # models.json v1: stacked (L,1,H,T,dh) caches and cross K/V
            feeds = {
                "tokens": tokens.numpy(),
                "past_k": pk.numpy(),
                "past_v": pv.numpy(),
                "cross_k": ck.numpy(),
                "cross_v": cv.numpy(),
            }
        else:  # v2: one input per layer (as2d_cli.models.session.decoder_io)
            feeds = dict(
                zip(
                    names,
                    decoder_feeds(tokens.numpy(), pk.numpy(), pv.numpy(), ck.numpy(), cv.numpy()),
                )
            )
        got = dec_s.run(None, feeds)[0]
        return max(err, float(np.abs(got - logits.numpy()).max()))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["target", "drafter", "ctc"], required=True)
    ap.add_argument("--force", action="store_true", help="replace an existing checkpoint")
    args = ap.parse_args()
    out = WORK / args.model
    ckpt = out / "ckpt.pt"
    if ckpt.exists() and not args.force:
        raise SystemExit(
            f"{ckpt} exists (it may be further along than the shipped model); pass --force to replace it"
        )
    manifest = json.loads((ASSETS / "models.json").read_text())
    model, dims, entry = rebuild(args.model, manifest)
    err = check(model, dims, manifest, args.model)
    # An 8-bit decoder (export.quantize_matmuls) also rounds its activations to int8 in every
    # MatMul: the float rebuild differs from it by about what the export measured against torch.
    tol = max(1e-3, 3 * entry.get("quantized", {}).get("max_abs_error", 0.0))
    if err > tol:
        raise SystemExit(
            f"{args.model}: rebuilt model differs from the ONNX files by {err:.2e} (allowed {tol:.2e})"
        )
    model.train()
    # A shared-encoder drafter (dims.enc_d) trains its decoder only: its encoder is a frozen
    # copy of the target's, and the optimiser must hold the same parameters train.py gives it.
    frozen = dims.enc_d > 0
    if frozen:
        model.freeze_encoder()
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=1e-4,
        betas=(0.9, 0.98),
        weight_decay=0.01,
    )
    tr = entry["trained"]
    state = {
        "step": tr["steps"],
        "epoch": tr["epochs"] + 1,
        "pos": 0,
        "wall": float(tr["wall_seconds"]),
        "restored_from_onnx": True,
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "ckpt.tmp"
    torch.save(
        {
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "state": state,
            "dims": dims.to_dict(),
            "frozen_encoder": frozen,
            "torch_rng": torch.get_rng_state(),
        },
        tmp,
    )
    tmp.replace(ckpt)
    log = ASSETS / "training_logs" / f"{args.model}.jsonl"
    if (
        log.exists() and not (out / "log.jsonl").exists()
    ):  # the continued run appends to the shipped history
        (out / "log.jsonl").write_text(log.read_text())
    with open(out / "log.jsonl", "a") as fh:
        fh.write(
            json.dumps({"event": "restored_from_onnx", "step": state["step"], "max_abs_error": err})
            + "\n"
        )
    print(
        f"{args.model}: checkpoint rebuilt at step {state['step']} (max |ONNX − torch| {err:.2e}) -> {ckpt}"
    )


if __name__ == "__main__":
    main()
