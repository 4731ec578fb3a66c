"""Export the trained checkpoints to ONNX and write the model manifest (as2d.models v2).

Usage: python training/export.py [--models target drafter ctc] [--ahead PATH]
       python training/export.py --only-ahead [--ahead PATH]

Writes to as2d_cli/assets/models/:
- <name>_encoder.onnx: mel (1,T,80) -> cross_k, cross_v (L,1,H,S,dh), hidden (1,S,d): the
  encoder plus every decoder layer's cross-attention K/V projection, computed once per
  request, and the encoder's final states;
- <name>_cross.onnx instead, for a drafter whose encoder is exactly the target's
  (train.py --shared-encoder): hidden (1,S,d_target) -> cross_k, cross_v; models.json then
  says ``encoder_from: target`` and the runtime hands it the target's states;
- <name>_decoder.onnx: tokens (1,K) int64, then per layer i past_k_i/past_v_i (1,H,T,dh) and
  cross_k_i/cross_v_i (1,H,S,dh) -> logits (1,K,V), present_k_i/present_v_i (1,H,T+K,dh);
  one call takes K = 1..16 new tokens. Per-layer tensors, because ONNX Runtime copies any
  slice it takes of a stacked input: splitting the stacked cross K/V and caches cost a quarter
  to a third of every decoder call (benchmarks/decoder_layout.py);
- drafter_ahead_decoder.onnx, when the drafter has a look-ahead head (training/train_ahead.py,
  --ahead): the drafter's decoder file with the same inputs and outputs, then ahead_logits
  (1,K,V): at every position, the head's logits of the token after the greedy one there (the
  argmax of that position's logits, taken in the graph). Its logits and caches are the plain
  file's; --only-ahead writes this file alone and adds it to the drafter's models.json entry,
  leaving every shipped file as it is;
- ctc.onnx: mel (1,T,80) -> log_probs (1,S,C);
- models.json: dimensions, file hashes, special ids, training summary; and the training logs.
Each export is checked against torch on random inputs before it is accepted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

import models as model_defs  # noqa: E402
from models import AheadHead, CtcModel, Dims, Seq2Seq  # noqa: E402

from as2d_cli.models.model_pair import SCHEMA as MODELS_SCHEMA  # noqa: E402
from as2d_cli.models.session import AHEAD_OUTPUT, decoder_io  # noqa: E402

WORK = ROOT / "training" / "work"
OUT = ROOT / "as2d_cli" / "assets" / "models"
AHEAD = WORK / "drafter" / "ahead.pt"  # train_ahead.py's look-ahead head of the drafter
OPSET = 17
# (past, new) positions of the random decoder calls each decoder export is checked on; the
# look-ahead file's also on longer calls, for its guesses' agreement with torch's
CHECK_SHAPES = [(0, 1), (7, 8), (2, 16), (30, 1)]
AHEAD_CHECK_SHAPES = [*CHECK_SHAPES, (5, 16), (20, 16), (60, 16), (120, 16)]


class EncoderExport(nn.Module):
    def __init__(self, m: Seq2Seq):
        super().__init__()
        self.m = m

    def forward(self, mel):
        enc, _ = self.m.encoder(mel)
        ck, cv = self.m.decoder.cross_kv(enc)
        return ck, cv, enc  # the final states too: a drafter sharing this encoder reads them


class CrossExport(nn.Module):
    """A drafter sharing another model's encoder: its cross-attention K/V from those states."""

    def __init__(self, m: Seq2Seq):
        super().__init__()
        self.m = m

    def forward(self, hidden):
        return self.m.decoder.cross_kv(hidden)


class DecoderExport(nn.Module):
    """The decoder with per-layer inputs and outputs in ``decoder_io`` order."""

    def __init__(self, m: Seq2Seq):
        super().__init__()
        self.m = m
        self.L = m.dm.dec_layers

    def forward(self, tokens, *per_layer):
        L = self.L
        pk, pv, ck, cv = (list(per_layer[i * L : (i + 1) * L]) for i in range(4))
        logits, k, v = self.m.decoder(tokens, pk, pv, ck, cv)
        return (logits, *k, *v)


class AheadDecoderExport(nn.Module):
    """:class:`DecoderExport` with the look-ahead head's logits last (``AHEAD_OUTPUT``): at
    every position, of the token after the greedy one there (argmax of the position's logits)."""

    def __init__(self, m: Seq2Seq, head: AheadHead):
        super().__init__()
        self.m, self.head = m, head
        self.L = m.dm.dec_layers

    def forward(self, tokens, *per_layer):
        L = self.L
        pk, pv, ck, cv = (list(per_layer[i * L : (i + 1) * L]) for i in range(4))
        dec = self.m.decoder
        h, k, v = dec.states(tokens, pk, pv, ck, cv)
        logits = h @ dec.emb.weight.T  # as Decoder.forward
        return (logits, *k, *v, self.head(h, logits.argmax(-1), dec.emb.weight))


def decoder_feeds(tokens, pk, pv, ck, cv) -> tuple:
    """Stacked (L,1,H,T,dh) caches and cross K/V as the decoder export's per-layer arguments."""
    return (tokens, *pk, *pv, *ck, *cv)


def export_decoder(
    model: Seq2Seq, path: Path, tokens, pk, pv, ck, cv, head: AheadHead | None = None
) -> list[str]:
    """Write the decoder file (models.json v2 layout) traced on these stacked example inputs,
    with ``head``'s look-ahead logits as a last output when given; returns its input names."""
    L = model.dm.dec_layers
    ins, outs = decoder_io(L)
    axes = {"tokens": {1: "new"}, "logits": {1: "new"}}
    axes.update({n: {2: "past"} for n in ins[1 : 1 + 2 * L]})
    axes.update({n: {2: "enc_frames"} for n in ins[1 + 2 * L :]})
    axes.update({n: {2: "total"} for n in outs[1:]})
    module: nn.Module = DecoderExport(model)
    if head is not None:
        module = AheadDecoderExport(model, head)
        outs = [*outs, AHEAD_OUTPUT]
        axes[AHEAD_OUTPUT] = {1: "new"}
    model_defs.STATIC_BATCH = True  # batch 1, constant reshapes: no per-call shape arithmetic
    try:
        _export(module, decoder_feeds(tokens, pk, pv, ck, cv), path, ins, outs, axes)
    finally:
        model_defs.STATIC_BATCH = False
    return ins


def decoder_cases(
    module: nn.Module, ins: list[str], dims: Dims, ck, cv, shapes: list[tuple[int, int]]
) -> list[tuple[dict, list]]:
    """(feeds, torch's outputs) of ``module`` on random calls of (past, new) ``shapes``."""
    L, H, dh = dims.dec_layers, dims.heads, dims.d // dims.heads
    cases = []
    for t, k in shapes:
        tokens = torch.randint(3, dims.vocab, (1, k))
        pk, pv = torch.randn(L, 1, H, t, dh), torch.randn(L, 1, H, t, dh)
        args = decoder_feeds(tokens, pk, pv, ck, cv)
        cases.append(
            ({n: a.numpy() for n, a in zip(ins, args)}, [e.numpy() for e in module(*args)])
        )
    return cases


class CtcExport(nn.Module):
    def __init__(self, m: CtcModel):
        super().__init__()
        self.m = m

    def forward(self, mel):
        return torch.log_softmax(self.m(mel), dim=-1)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(kind: str):
    saved = torch.load(WORK / kind / "ckpt.pt", weights_only=False)
    dims = Dims(**saved["dims"])
    if kind == "ctc":
        chars = json.loads((OUT / "ctc_chars.json").read_text())["chars"]
        model = CtcModel(dims, len(chars))
    else:
        model = Seq2Seq(dims)
    model.load_state_dict(saved["model"])
    model.eval()
    return model, dims, saved["state"]


def _export(
    module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str], axes: dict
) -> None:
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=inputs,
        output_names=outputs,
        dynamic_axes=axes,
        opset_version=OPSET,
        dynamo=False,
    )


def store_exact_fp16(path: Path, min_size: int = 256) -> int:
    """Store every float32 initializer whose values are all exactly float16 as float16 behind a
    Cast node (ONNX Runtime folds the casts when the session loads): lossless, and it halved
    the shared-encoder drafter's encoder file (target step 93,243), whose copy of the target's
    encoder was rounded to float16 before it trained. Returns the number of bytes saved."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    g = model.graph
    saved, keep, casts = 0, [], []
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if (
            arr.dtype != np.float32
            or arr.size < min_size
            or not np.array_equal(arr.astype(np.float16).astype(np.float32), arr)
        ):
            keep.append(init)
            continue
        half = numpy_helper.from_array(arr.astype(np.float16), init.name + "__fp16")
        keep.append(half)
        casts.append(
            helper.make_node(
                "Cast",
                [half.name],
                [init.name],
                to=onnx.TensorProto.FLOAT,
                name=init.name + "__cast",
            )
        )
        saved += arr.size * 2
    if casts:
        del g.initializer[:]
        g.initializer.extend(keep)
        nodes = list(g.node)
        del g.node[:]
        g.node.extend(casts + nodes)
        onnx.save(model, str(path))
    return saved


# The drafter's decoder ships with 8-bit weights: its calls are bound by reading weights and
# cross K/V from memory, not by arithmetic (a 192-wide step moved ~9 MB), and ONNX Runtime's
# MatMulNBits with int8 compute (accuracy_level 4) runs the weight MatMuls from a quarter of
# the bytes. Only proposals change — the target verifies every token, and stays float32.
INT8 = {
    "op": "com.microsoft.MatMulNBits",
    "bits": 8,
    "block_size": 32,
    "symmetric": True,
    "accuracy_level": 4,
}


def quantize_matmuls(path: Path) -> int:
    """Rewrite every MatMul with a constant weight in ``path`` as MatMulNBits (:data:`INT8`);
    returns how many were rewritten (training/from_onnx.py reads them back as float)."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(
        logging.WARNING
    )  # a line per node

    kw = {
        "bits": INT8["bits"],
        "block_size": INT8["block_size"],
        "is_symmetric": INT8["symmetric"],
        "accuracy_level": INT8["accuracy_level"],
    }
    q = MatMulNBitsQuantizer(
        onnx.load(str(path)), algo_config=DefaultWeightOnlyQuantConfig(**kw), **kw
    )
    q.process()
    q.model.save_model_to_file(str(path), use_external_data_format=False)
    return sum(n.op_type == "MatMulNBits" for n in onnx.load(str(path)).graph.node)


def _outputs(path: Path, cases: list[tuple[dict, list]]) -> list[list[np.ndarray]]:
    """The file's outputs on each case's feeds, one session for them all."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, feeds) for feeds, _ in cases]


def _errors(path: Path, cases: list[tuple[dict, list]]) -> dict[int, float]:
    """Largest absolute difference per checked output (expected None: not checked) over
    ``cases`` of (feeds, expected outputs), one session for them all."""
    return _worst(path, _outputs(path, cases), cases)


def _worst(
    path: Path, outputs: list[list[np.ndarray]], cases: list[tuple[dict, list]]
) -> dict[int, float]:
    """:func:`_errors` of outputs already computed (``_outputs(path, cases)``)."""
    worst: dict[int, float] = {}
    for got, (_, expected) in zip(outputs, cases):
        if len(got) != len(expected):
            raise SystemExit(
                f"{path} has {len(got)} outputs, expected {len(expected)}: export the target first "
                "(python training/export.py --models target drafter)"
            )
        for i, (g, e) in enumerate(zip(got, expected)):
            if e is not None:
                worst[i] = max(worst.get(i, 0.0), float(np.max(np.abs(g - e))))
    return worst


def _check(path: Path, feeds: dict, expected: list[np.ndarray]) -> float:
    return max(_errors(path, [(feeds, expected)]).values())


def step_macs(model: Seq2Seq) -> int:
    """The decoder's multiply-adds per generated position: its layers' linear maps and the tied
    output projection. The cross-attention K/V projections run once per request, not per step."""
    dec = model.decoder
    return (
        sum(
            m.in_features * m.out_features
            for layer in dec.layers
            for name, m in layer.named_modules()
            if isinstance(m, nn.Linear) and name not in ("ck", "cv")
        )
        + dec.emb.weight.numel()
    )


def load_head(head_path: Path, dims: Dims) -> tuple[AheadHead, dict]:
    """The look-ahead head saved by train_ahead.py and its training summary."""
    saved = torch.load(head_path, weights_only=False)
    head = AheadHead(dims.d, saved["info"]["hidden"])
    head.load_state_dict(saved["head"])
    head.eval()
    return head, saved["info"]


def quantized_ahead(path: Path, checks: list, layers: int) -> tuple[dict, list]:
    """Quantizes the look-ahead file as the plain decoder file; its rounding errors on the
    checks and the quantized file's outputs."""
    figures = {**INT8, "matmuls": quantize_matmuls(path)}
    got = _outputs(path, checks)  # the shipped (quantized) file's: checked, then compared
    errs = _worst(path, got, checks)
    figures.update(
        {
            "max_abs_error": max(errs.values()),
            "max_abs_logit_error": errs[0],
            "max_abs_ahead_logit_error": errs[1 + 2 * layers],
        }
    )
    # the head's own rounding: where the file's greedy token (the guess's input) is torch's
    figures["max_abs_ahead_logit_error_same_greedy"] = max(
        float(np.max(np.abs(g[-1][0][m] - e[-1][0][m]), initial=0.0))
        for g, (_, e) in zip(got, checks)
        for m in [g[0][0].argmax(-1) == e[0][0].argmax(-1)]
    )
    return figures, got


def export_ahead(
    entry: dict, kind: str, model: Seq2Seq, head_path: Path, ck, cv, int8: bool
) -> None:
    """Write ``<kind>_ahead_decoder.onnx``: the decoder file with the look-ahead head at
    ``head_path`` (train_ahead.py) as a last output, checked against torch, quantized as the
    plain decoder file (``int8``) and checked again; its logits and caches must be the plain
    file's. Lists it in the models.json ``entry`` (files, sha256, ``ahead``)."""
    dims = model.dm
    head, info = load_head(head_path, dims)
    L, H, dh = dims.dec_layers, dims.heads, dims.d // dims.heads
    dec_path, path = OUT / entry["files"]["decoder"], OUT / f"{kind}_ahead_decoder.onnx"
    with torch.no_grad():
        tokens = torch.randint(3, dims.vocab, (1, 3))
        pk = torch.randn(L, 1, H, 5, dh)
        pv = torch.randn(L, 1, H, 5, dh)
        ins = export_decoder(model, path, tokens, pk, pv, ck, cv, head)
        checks = decoder_cases(
            AheadDecoderExport(model, head), ins, dims, ck, cv, AHEAD_CHECK_SHAPES
        )
    err = max(_errors(path, checks).values())
    if err > 1e-3:
        raise SystemExit(f"{kind}: look-ahead ONNX differs from torch ({err:.2e})")
    figures: dict = {"export_max_abs_error": err}
    if int8:
        figures["quantized"], got = quantized_ahead(path, checks, L)
    else:
        got = _outputs(path, checks)
    plain = _outputs(dec_path, checks)
    # The self-speculating source emits the drafter's greedy tokens only if this file's logits
    # and caches are the plain decoder file's.
    same = max(float(np.max(np.abs(a - b))) for g, p in zip(got, plain) for a, b in zip(g, p))
    if same > 1e-4:
        raise SystemExit(
            f"{kind}: {path.name}'s logits or caches differ from {dec_path.name}'s by {same:.2e}"
        )
    hits = np.concatenate(
        [g[-1][0].argmax(-1) == e[-1][0].argmax(-1) for g, (_, e) in zip(got, checks)]
    )
    macs = step_macs(model)
    entry["files"]["ahead_decoder"] = path.name
    entry["sha256"][path.name] = sha256(path)
    entry["ahead"] = {
        **info,
        "step_macs": macs,
        "macs_share": round(info["macs"] / macs, 4),
        **figures,
        # on the checks' random calls: the shipped file's guess (argmax of ahead_logits) is
        # torch's at this share of positions; its logits and caches differ from the plain
        # decoder file's by at most decoder_max_abs_difference
        "checked_positions": int(hits.size),
        "argmax_agreement": round(float(hits.mean()), 4),
        "decoder_max_abs_difference": same,
    }
    print(
        f"{kind} ahead",
        json.dumps({k: entry["ahead"][k] for k in ("export_max_abs_error", *figures)}),
        f"argmax agreement {hits.mean():.4f} of {hits.size}, logits/caches vs "
        f"{dec_path.name} {same:.2e}",
        flush=True,
    )


def only_ahead(manifest: dict, head_path: Path) -> None:
    """--only-ahead: the drafter's look-ahead file alone, added to its models.json entry; the
    shipped files stay as they are (quantized if the shipped decoder is)."""
    entry = manifest.get("models", {}).get("drafter")
    if entry is None or not head_path.exists():
        raise SystemExit(
            f"--only-ahead needs the drafter in {OUT / 'models.json'} and a head at {head_path}"
        )
    model, dims, _ = load("drafter")
    if dims.to_dict() != entry["dims"]:
        raise SystemExit(f"{WORK / 'drafter' / 'ckpt.pt'} is not the shipped drafter (dims differ)")
    with torch.no_grad():
        ck, cv, _ = EncoderExport(model)(torch.randn(1, 437, 80) * 0.3)
    export_ahead(entry, "drafter", model, head_path, ck, cv, "quantized" in entry)


def shares_target_encoder(model: Seq2Seq) -> bool:
    """A drafter whose encoder is exactly the target checkpoint's (train.py --shared-encoder)."""
    path = WORK / "target" / "ckpt.pt"
    if model.dm.enc_d == 0 or not path.exists():
        return False
    tgt = torch.load(path, weights_only=False)["model"]
    own = {k: v for k, v in model.state_dict().items() if k.startswith("encoder.")}
    return all(
        k in tgt and tgt[k].shape == v.shape and torch.equal(tgt[k], v) for k, v in own.items()
    )


def export_cross(model: Seq2Seq, cross_path: Path, mel, ck, cv, hidden) -> float:
    """A drafter sharing the target's encoder: its cross-attention file, checked, and the
    target's shipped encoder checked to produce the states this model was trained on."""
    _export(
        CrossExport(model),
        (hidden,),
        cross_path,
        ["hidden"],
        ["cross_k", "cross_v"],
        {
            "hidden": {1: "enc_frames"},
            "cross_k": {3: "enc_frames"},
            "cross_v": {3: "enc_frames"},
        },
    )
    return max(
        _check(OUT / "target_encoder.onnx", {"mel": mel.numpy()}, [None, None, hidden.numpy()]),
        _check(cross_path, {"hidden": hidden.numpy()}, [ck.numpy(), cv.numpy()]),
    )


def export_encoder(kind: str, model: Seq2Seq, enc_path: Path, mel, ck, cv, hidden) -> float:
    """The model's own encoder file (exactly-float16 weights stored as float16), checked."""
    _export(
        EncoderExport(model),
        (mel,),
        enc_path,
        ["mel"],
        ["cross_k", "cross_v", "hidden"],
        {
            "mel": {1: "frames"},
            "cross_k": {3: "enc_frames"},
            "cross_v": {3: "enc_frames"},
            "hidden": {1: "enc_frames"},
        },
    )
    halved = store_exact_fp16(enc_path)
    if halved:
        print(
            f"{kind}: {halved / 1e6:.1f} MB of exactly-float16 encoder weights stored as float16",
            flush=True,
        )
    return _check(enc_path, {"mel": mel.numpy()}, [ck.numpy(), cv.numpy(), hidden.numpy()])


def export_checked_decoder(model: Seq2Seq, dec_path: Path, ck, cv) -> tuple[list, float]:
    """The decoder file and its check cases; the largest error against torch on them."""
    dims = model.dm
    L, H, dh = dims.dec_layers, dims.heads, dims.d // dims.heads
    tokens = torch.randint(3, dims.vocab, (1, 3))
    pk = torch.randn(L, 1, H, 5, dh)
    pv = torch.randn(L, 1, H, 5, dh)
    ins = export_decoder(model, dec_path, tokens, pk, pv, ck, cv)
    checks = decoder_cases(DecoderExport(model), ins, dims, ck, cv, CHECK_SHAPES)
    return checks, max(_errors(dec_path, checks).values())


def trained_summary(state: dict) -> dict:
    return {
        "steps": state["step"],
        "epochs": state["epoch"],
        "wall_seconds": round(state["wall"]),
        # weights averaged over this many checkpoints of the run's last minutes
        **(
            {"averaged_checkpoints": len(state["averaged_from"])}
            if state.get("averaged_from")
            else {}
        ),
    }


def export_seq2seq(kind: str, int8: bool = False, ahead: Path | None = None) -> dict:
    """``ahead``: a look-ahead head checkpoint; when it exists, the look-ahead decoder file is
    written too (:func:`export_ahead`)."""
    model, dims, state = load(kind)
    enc_path, dec_path = OUT / f"{kind}_encoder.onnx", OUT / f"{kind}_decoder.onnx"
    cross_path = OUT / f"{kind}_cross.onnx"
    shared = kind != "target" and shares_target_encoder(model)
    mel = torch.randn(1, 437, 80) * 0.3
    with torch.no_grad():
        ck, cv, hidden = EncoderExport(model)(mel)
        if shared:
            # No encoder file: at run time this model reads the target's encoder states.
            err_enc = export_cross(model, cross_path, mel, ck, cv, hidden)
            enc_path.unlink(missing_ok=True)  # a previous export's own encoder is not shipped
        else:
            err_enc = export_encoder(kind, model, enc_path, mel, ck, cv, hidden)
            cross_path.unlink(missing_ok=True)
        checks, err_dec = export_checked_decoder(model, dec_path, ck, cv)
    if err_enc > 1e-3 or err_dec > 1e-3:
        raise SystemExit(
            f"{kind}: ONNX differs from torch (encoder {err_enc:.2e}, decoder {err_dec:.2e})"
        )
    quant = None
    if int8:  # checked in float first (above): the quantized file's error is the rounding's alone
        quant = {**INT8, "matmuls": quantize_matmuls(dec_path)}
        errs = _errors(dec_path, checks)
        quant["max_abs_error"], quant["max_abs_logit_error"] = max(errs.values()), errs[0]
    first = cross_path if shared else enc_path
    entry = {
        "kind": "seq2seq",
        "dims": dims.to_dict(),
        "files": {"cross" if shared else "encoder": first.name, "decoder": dec_path.name},
        "sha256": {first.name: sha256(first), dec_path.name: sha256(dec_path)},
        # a sharing drafter's count leaves out the target's encoder it reads
        "params": sum(
            p.numel()
            for n, p in model.named_parameters()
            if not n.startswith("ctc_head") and not (shared and n.startswith("encoder."))
        ),
        "trained": trained_summary(state),
        "export_max_abs_error": {"encoder": err_enc, "decoder": err_dec},
    }
    if quant is not None:
        entry["quantized"] = quant
    if shared:
        entry["encoder_from"] = "target"
    if ahead is not None and ahead.exists():
        export_ahead(entry, kind, model, ahead, ck, cv, int8)
    elif ahead is not None:
        print(f"{kind}: no look-ahead head at {ahead}; {kind}_ahead_decoder.onnx not written")
    return entry


def export_ctc() -> dict:
    model, dims, state = load("ctc")
    path = OUT / "ctc.onnx"
    mel = torch.randn(1, 256, 80) * 0.3
    with torch.no_grad():
        _export(
            CtcExport(model),
            (mel,),
            path,
            ["mel"],
            ["log_probs"],
            {"mel": {1: "frames"}, "log_probs": {1: "enc_frames"}},
        )
        mel2 = torch.randn(1, 311, 80) * 0.3
        err = _check(path, {"mel": mel2.numpy()}, [CtcExport(model)(mel2).numpy()])
    if err > 1e-3:
        raise SystemExit(f"ctc: ONNX differs from torch ({err:.2e})")
    return {
        "kind": "ctc",
        "dims": dims.to_dict(),
        "files": {"model": path.name},
        "sha256": {path.name: sha256(path)},
        "params": sum(p.numel() for p in model.parameters()),
        "chars": "ctc_chars.json",
        "languages": ["en"],
        "chunk_seconds": 2.56,
        "trained": {
            "steps": state["step"],
            "epochs": state["epoch"],
            "wall_seconds": round(state["wall"]),
        },
        "export_max_abs_error": {"model": err},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["target", "drafter", "ctc"])
    ap.add_argument(
        "--int8",
        nargs="*",
        default=["drafter"],
        choices=["target", "drafter"],
        help="decoders shipped with 8-bit weights (default: the drafter's; the target's output "
        "is the reference every method must reproduce, so it stays float32)",
    )
    ap.add_argument(
        "--ahead",
        type=Path,
        default=AHEAD,
        help="the drafter's look-ahead head (train_ahead.py); when it exists, exporting the "
        "drafter also writes drafter_ahead_decoder.onnx (default: %(default)s)",
    )
    ap.add_argument(
        "--only-ahead",
        action="store_true",
        help="write drafter_ahead_decoder.onnx alone and add it to the drafter's models.json "
        "entry, leaving every other file and entry as it is (--models and --int8 ignored)",
    )
    args = ap.parse_args()
    manifest_path = OUT / "models.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if args.only_ahead:
        only_ahead(manifest, args.ahead)
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        return
    manifest.update(
        {
            "schema": MODELS_SCHEMA,
            "version": 2,  # a trained pair's manifest; 3 is an imported pair's
            "tokenizer": "tokenizer.json",
            "specials": {"pad": 0, "sot": 1, "eot": 2, "unk": 3},
            "sample_rate": 16000,
            "features": "as2d_cli.models.features.log_mel (80 log-mel, 10 ms hop)",
        }
    )
    manifest.setdefault("models", {})
    manifest["sha256"] = {
        "tokenizer.json": sha256(OUT / "tokenizer.json"),
        "ctc_chars.json": sha256(OUT / "ctc_chars.json"),
    }
    logs = OUT / "training_logs"
    logs.mkdir(exist_ok=True)
    for kind in sorted(
        args.models, key=["target", "drafter", "ctc"].index
    ):  # a sharing drafter checks the target's file
        manifest["models"][kind] = (
            export_ctc()
            if kind == "ctc"
            else export_seq2seq(kind, kind in args.int8, args.ahead if kind == "drafter" else None)
        )
        shutil.copy(WORK / kind / "log.jsonl", logs / f"{kind}.jsonl")
        print(kind, json.dumps(manifest["models"][kind]["export_max_abs_error"]), flush=True)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
