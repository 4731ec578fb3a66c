"""Per-call cost of the decoder's ONNX layouts: stacked caches (models.json v1) against
per-layer caches and cross K/V (v2, what training/export.py writes), same weights.

Usage: python benchmarks/decoder_layout.py [--models target drafter] [--frames 500] [--past 0 100]
Needs the training extra (torch) and training/work/<model>/ckpt.pt (training/from_onnx.py
rebuilds it from the shipped files). Both layouts are exported to a temporary folder from the
same checkpoint, checked against each other, and timed in one process on one thread,
interleaved in blocks, so both see the same machine; prints median ms per call and v2 / v1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

import export  # noqa: E402

from as2d_cli.models.session import decoder_io, make_session  # noqa: E402

V1_IO = (["tokens", "past_k", "past_v", "cross_k", "cross_v"], ["logits", "present_k", "present_v"])


class StackedDecoder(nn.Module):
    """The v1 export: stacked (L,1,H,T,dh) caches and cross K/V."""

    def __init__(self, m: nn.Module):
        super().__init__()
        self.m = m

    def forward(self, tokens, past_k, past_v, cross_k, cross_v):
        return self.m.decoder(tokens, past_k, past_v, cross_k, cross_v)


def export_both(kind: str, folder: Path, frames: int) -> tuple[Path, Path, int, int]:
    model, dims, _ = export.load(kind)
    L, H, dh = dims.dec_layers, dims.heads, dims.d // dims.heads
    tokens = torch.randint(3, dims.vocab, (1, 3))
    pk, pv = torch.randn(L, 1, H, 5, dh), torch.randn(L, 1, H, 5, dh)
    ck, cv = torch.randn(L, 1, H, frames, dh), torch.randn(L, 1, H, frames, dh)
    v1, v2 = folder / f"{kind}_v1.onnx", folder / f"{kind}_v2.onnx"
    with torch.no_grad():
        export._export(
            StackedDecoder(model),
            (tokens, pk, pv, ck, cv),
            v1,
            *V1_IO,
            {
                "tokens": {1: "new"},
                "past_k": {3: "past"},
                "past_v": {3: "past"},
                "cross_k": {3: "s"},
                "cross_v": {3: "s"},
                "logits": {1: "new"},
                "present_k": {3: "t"},
                "present_v": {3: "t"},
            },
        )
        export.export_decoder(model, v2, tokens, pk, pv, ck, cv)
    return v1, v2, L, H


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="+", default=["target", "drafter"])
    ap.add_argument(
        "--frames", type=int, default=500, help="encoder frames S (500 = a 20 s window)"
    )
    ap.add_argument("--past", type=int, nargs="+", default=[0, 100], help="cached positions P")
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--calls", type=int, default=60, help="calls per block")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':8} {'P':>4} {'K':>3} {'v1 ms':>8} {'v2 ms':>8} {'v2/v1':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.models:
            v1, v2, L, H = export_both(kind, Path(tmp), a.frames)
            s1, s2 = make_session(v1), make_session(v2)
            # distinct arrays for keys and values, as at run time (one shared array would
            # stay hotter in the caches than a real call's inputs do)
            ck, cv = (
                rng.standard_normal((L, 1, H, a.frames, 64), dtype=np.float32) for _ in range(2)
            )
            for past_len in a.past:
                pk, pv = (
                    rng.standard_normal((L, 1, H, past_len, 64), dtype=np.float32) for _ in range(2)
                )
                for k in a.widths:
                    toks = np.full((1, k), 5, np.int64)
                    f1 = dict(zip(V1_IO[0], [toks, pk, pv, ck, cv]))
                    f2 = dict(zip(decoder_io(L)[0], export.decoder_feeds(toks, pk, pv, ck, cv)))
                    o1, o2 = s1.run(None, f1), s2.run(None, f2)
                    err = float(np.abs(o1[0] - o2[0]).max())
                    if err > 1e-4:
                        raise SystemExit(f"{kind}: the two layouts disagree by {err:.2e}")
                    times: list[list[float]] = [[], []]
                    for _ in range(a.blocks):
                        for i, (s, f) in enumerate(((s1, f1), (s2, f2))):
                            for _ in range(a.calls):
                                t0 = time.perf_counter()
                                s.run(None, f)
                                times[i].append(time.perf_counter() - t0)
                    m1, m2 = (float(np.median(t)) * 1e3 for t in times)
                    print(
                        f"{kind:8} {past_len:>4} {k:>3} {m1:>8.3f} {m2:>8.3f} {m2 / m1:>6.3f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
