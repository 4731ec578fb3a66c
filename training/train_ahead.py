"""Train the drafter's look-ahead head on the frozen drafter (models.AheadHead).

Usage: python training/train_ahead.py [--sets 24,...,33] [--hidden 384] [--steps 8000]

The drafter runs teacher-forced over the target's transcripts of the training shards. At
every position p where its greedy token equals the transcript's next token (so the history
is one the drafter would have produced itself), the head sees the drafter's final state at
p and that token's embedding, and learns the drafter's own greedy token at p + 1. Only the
head trains; the drafter's weights stay as they are, so a source that checks each guess
with its next forward emits the drafter's own greedy choices.

Writes training/work/drafter/ahead.pt (refuses to overwrite; --force), which
training/export.py turns into drafter_ahead_decoder.onnx.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))

from models import AheadHead, Seq2Seq  # noqa: E402
from train import WORK, Data, DataOptions  # noqa: E402


@torch.no_grad()
def positions(
    model: Seq2Seq, data: Data, batches: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(states, next tokens, labels) at the positions where the drafter follows the text."""
    hs, xs, ys = [], [], []
    dec = model.decoder
    for b in batches:
        mel, lengths, _, inp, tgt, _, _ = data.batch(b, "drafter")
        enc, mask = model.encoder(mel, lengths)
        ck, cv = dec.cross_kv(enc)
        pk, pv = dec.empty_past(mel.shape[0])
        h, _, _ = dec.states(inp, pk, pv, ck, cv, mask)
        greedy = (h @ dec.emb.weight.T).argmax(-1)  # (B, n): the drafter's choice after p
        # position p: state h[p], its greedy token greedy[p] (== inp[p+1] when kept), label
        # greedy[p+1]; both p+1 and p+2 must be real transcript positions (EOS counts).
        keep = (tgt[:, 1:] != -100) & (greedy[:, :-1] == inp[:, 1:]) & (inp[:, 1:] != 0)
        hs.append(h[:, :-1][keep])
        xs.append(greedy[:, :-1][keep])
        ys.append(greedy[:, 1:][keep])
    return torch.cat(hs), torch.cat(xs), torch.cat(ys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", default=str(WORK / "drafter" / "ckpt.pt"))
    ap.add_argument("--sets", default="24,25,26,27,28,29,30,31,32,33")
    ap.add_argument("--batches", type=int, default=1600, help="training batches of features")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(WORK / "drafter" / "ahead.pt"))
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists() and not args.force:
        raise SystemExit(f"{out} exists; pass --force to replace it or choose another --out")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    saved = torch.load(args.drafter, map_location="cpu", weights_only=False)
    model = Seq2Seq.from_saved(saved)
    only = {int(s) for s in args.sets.split(",")}
    data = Data("drafter", DataOptions(max_items=64, only=only, labels="target"))
    order = list(range(len(data.batches)))
    random.Random(1).shuffle(order)
    order = order[: args.batches]
    held = max(1, len(order) // 20)  # 5 % of the batches judge the head
    t0 = time.time()
    h, x, y = positions(model, data, order[held:])
    hv, xv, yv = positions(model, data, order[:held])
    print(
        f"{len(h)} training and {len(hv)} held-out positions in {time.time() - t0:.0f} s",
        flush=True,
    )
    emb = model.decoder.emb.weight.detach()
    head = AheadHead(model.dm.d, args.hidden)
    opt = torch.optim.AdamW(head.parameters(), args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.steps)
    gen = torch.Generator().manual_seed(0)

    def agreement() -> float:
        with torch.no_grad():
            return float((head(hv[None], xv[None], emb)[0].argmax(-1) == yv).float().mean())

    for step in range(1, args.steps + 1):
        i = torch.randint(len(h), (1024,), generator=gen)
        loss = F.cross_entropy(head(h[i][None], x[i][None], emb)[0], y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 1000 == 0 or step == args.steps:
            print(
                f"step {step}: loss {loss.item():.3f}, held-out agreement {agreement():.3f}",
                flush=True,
            )
    vocab = model.dm.vocab
    info = {
        "hidden": args.hidden,
        "steps": args.steps,
        "positions": len(h),
        "held_out_agreement": round(agreement(), 4),
        "sets": args.sets,
        "macs": head.macs(vocab),
        "wall_seconds": round(time.time() - t0),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"head": head.state_dict(), "info": info}, out)
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
