"""The drafter's decoder in float32 against its 8-bit export (what training/export.py ships):
cost per free-running step and agreement with the target, on the same windows.

Usage: python benchmarks/drafter_int8.py [--windows 40] [--split dev] [--repeats 3]
Needs the training extra (torch, onnx-ir) and training/work/drafter/ckpt.pt of the shipped
drafter (training/from_onnx.py rebuilds one from the shipped files: its float weights are
then the 8-bit ones read back). Both decoder files are exported to a temporary folder from
that checkpoint; the drafter then runs as the As²d source does (greedy on its own history,
one K = 1 call per token, the bundled target's encoder states and the bundled cross-attention
projection) over windows spread across the settings, the two files interleaved window by
window, one thread. Prints the median milliseconds per step of each file, the edit distance
of each file's sequences to the target's greedy output, and how far the two agree.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

import export  # noqa: E402

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.corpus.text import edit_distance  # noqa: E402
from as2d_cli.evaluate.native import pick_windows  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from as2d_cli.models.session import Seq2SeqModel, make_session  # noqa: E402


def free_run(model: Seq2SeqModel, cross, limit: int) -> tuple[list[int], list[float]]:
    """The drafter on its own history: tokens up to EOS and each call's seconds."""
    cache, tok, out, times = model.empty_cache(), model.vocab.sot, [], []
    for _ in range(limit):
        t0 = time.perf_counter()
        logits, cache = model.decode([tok], cache, cross)
        times.append(time.perf_counter() - t0)
        tok = int(logits[-1].argmax())
        out.append(tok)
        if tok == model.vocab.eot:
            break
    return out, times


def export_pair(folder: Path) -> tuple[Path, Path]:
    model, dims, _ = export.load("drafter")
    L, H, dh = dims.dec_layers, dims.heads, dims.d // dims.heads
    f32, q8 = folder / "drafter_f32.onnx", folder / "drafter_int8.onnx"
    with torch.no_grad():
        export.export_decoder(
            model,
            f32,
            torch.randint(3, dims.vocab, (1, 3)),
            torch.randn(L, 1, H, 5, dh),
            torch.randn(L, 1, H, 5, dh),
            torch.randn(L, 1, H, 50, dh),
            torch.randn(L, 1, H, 50, dh),
        )
    shutil.copy(f32, q8)
    export.quantize_matmuls(q8)
    return f32, q8


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--split", default="dev")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed runs per window and file (median step)"
    )
    ap.add_argument("--limit", type=int, default=200, help="tokens per free run")
    a = ap.parse_args()
    pair = load_pair()
    target = Seq2SeqModel(pair, "target")
    drafter = Seq2SeqModel(pair, "drafter")
    ws = {w.id: w for w in load_corpus().split(a.split)}
    picked = [
        ws[i] for i in pick_windows(list(ws), {i: w.setting for i, w in ws.items()}, a.windows)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        f32, q8 = export_pair(Path(tmp))
        shipped = pair.path(pair.model("drafter")["files"]["decoder"])
        same = (
            hashlib.sha256(q8.read_bytes()).digest()
            == hashlib.sha256(shipped.read_bytes()).digest()
        )
        files = {"float32": make_session(f32), "int8": make_session(q8)}
        steps: dict[str, list[float]] = {k: [] for k in files}
        dist = {k: 0 for k in files}
        ref_tokens = agree = 0
        for n, w in enumerate(picked, 1):
            enc = target.encode(w.load_audio())
            ref, _ = free_run(target, enc, a.limit)
            assert enc.hidden is not None  # the target's encoder states
            cross = drafter.encode_hidden(enc.hidden)
            seqs = {}
            for rep in range(a.repeats):
                for name in list(files) if (n + rep) % 2 else list(files)[::-1]:
                    drafter.decoder = files[name]
                    seqs[name], times = free_run(drafter, cross, a.limit)
                    steps[name].append(statistics.median(times))
            for name, seq in seqs.items():
                dist[name] += edit_distance(seq, ref)
            ref_tokens += len(ref)
            agree += next(
                (i for i, (x, y) in enumerate(zip(seqs["float32"], seqs["int8"])) if x != y),
                min(len(seqs["float32"]), len(seqs["int8"])),
            )
            print(f"[{n}/{len(picked)}] {w.id}", file=sys.stderr, flush=True)
    ms = {k: 1e3 * statistics.median(v) for k, v in steps.items()}
    print(
        f"{len(picked)} {a.split} windows, {ref_tokens} target tokens (with EOS); the int8 file "
        f"{'is' if same else 'is NOT'} the shipped drafter_decoder.onnx"
    )
    for k in files:
        print(
            f"  {k:8} step {ms[k]:.3f} ms  edits to the target's output {dist[k]} ({dist[k] / ref_tokens:.3f})"
        )
    print(
        f"int8 / float32 step: {ms['int8'] / ms['float32']:.3f}; tokens before the two first differ: {agree}"
    )


if __name__ == "__main__":
    main()
