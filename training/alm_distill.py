"""The trained audio-LLM target's own answers to the training requests, for the drafter's
``alm_train.py --model drafter --labels target``.

    python training/alm_distill.py --shards 1,2,3 [--epochs 2] [--ckpt PATH]

For each shard, the requests ``alm_train.py`` draws in its first ``--epochs`` epochs (the
same seeds, so the drafter's epochs find them) are answered greedily by the target
checkpoint (fp32, batched, left-padded), and written to ``target_answers.json`` beside the
shard's ``index.json``: ``{"version": 1, "target": {...}, "answers": {utterance id:
{"task|instruction": token ids}}}``. Answers that reach the generation limit without the
end-of-turn token are left out. Resumable per shard (a shard whose file names the same
checkpoint step is skipped).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

from alm_models import AlmConfig, AudioLM, audio_rows  # noqa: E402
from alm_train import ALM, WORK, Prompts, Shards, draw_request, log  # noqa: E402

VERSION = 1


def requests(data: Shards, epochs: int) -> list[tuple[int, str, str]]:
    """(item index, task, instruction) the first ``epochs`` epochs draw, each once."""
    seen: set[tuple[int, str]] = set()
    out = []
    for epoch in range(epochs):
        rng = np.random.default_rng(4242 + epoch)  # epoch_examples' draws, in its order
        for i, it in enumerate(data.items):
            task, instruction, _ = draw_request(it, rng)
            if (i, instruction) not in seen:
                seen.add((i, instruction))
                out.append((i, task, instruction))
    return out


@torch.no_grad()
def answer_batch(
    model: AudioLM, prompts: Prompts, data: Shards, batch: list[tuple[int, str, str]], limit: int
) -> list[list[int] | None]:
    """Greedy answers (EOS excluded; None at the limit) for a batch of requests, left-padded."""
    items = [data.items[i] for i, _, _ in batch]
    feats = [data.features(it) for it in items]
    t = max(len(f) for f in feats)
    x = torch.zeros(len(batch), t, feats[0].shape[1])
    for j, f in enumerate(feats):
        x[j, : len(f)] = torch.from_numpy(f.astype(np.float32))
    frames = torch.tensor([len(f) for f in feats])
    audio = model.tower(x, frames)
    n_rows = audio_rows(frames, model.cfg.stack)
    seqs = []
    for j, (_, _, instruction) in enumerate(batch):
        rows = int(n_rows[j])
        ids, at, plen = prompts.example(instruction, rows, [])
        ids = ids[:plen]
        emb = model.text.embed(torch.tensor(ids))
        seqs.append(torch.cat([emb[:at], audio[j, :rows], emb[at + rows :]]))
    width = max(len(s) for s in seqs)
    hidden = model.cfg.hidden
    emb = torch.zeros(len(batch), width, hidden)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for j, s in enumerate(seqs):
        emb[j, width - len(s) :] = s
        mask[j, width - len(s) :] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    past = model.text.empty_past(len(batch))
    out: list[list[int]] = [[] for _ in batch]
    done = [False] * len(batch)
    for _ in range(limit + 1):
        logits, *past = model.text(emb, mask, pos, *past)
        nxt = logits[:, -1].argmax(-1)
        for j in range(len(batch)):
            if not done[j]:
                if int(nxt[j]) == prompts.eos:
                    done[j] = True
                else:
                    out[j].append(int(nxt[j]))
        if all(done):
            break
        emb = model.text.embed(nxt[:, None])
        pos = pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(len(batch), 1, dtype=torch.long)], dim=1)
    return [o if d else None for o, d in zip(out, done, strict=True)]


def distil_shard(
    model: AudioLM, prompts: Prompts, shard: int, epochs: int, target: dict, batch_size: int
) -> None:
    out = WORK / "alm_shards" / str(shard) / "target_answers.json"
    if out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        if old.get("target") == target and old.get("epochs") == epochs:
            log(f"shard {shard}: answers of this target already written")
            return
    data = Shards([shard], "reference")
    reqs = requests(data, epochs)
    # length-sorted batches: similar prompts pad little
    reqs.sort(key=lambda r: (data.items[r[0]]["frames"], r[2]))
    answers: dict[str, dict[str, list[int]]] = {}
    at_limit = 0
    t0 = time.time()
    for b in range(0, len(reqs), batch_size):
        batch = reqs[b : b + batch_size]
        longest = max(len(prompts.spoken(data.items[i]["text"])) for i, _, _ in batch)
        got = answer_batch(model, prompts, data, batch, limit=min(200, 2 * longest + 16))
        for (i, task, instruction), ids in zip(batch, got, strict=True):
            if ids is None:
                at_limit += 1
                continue
            answers.setdefault(data.items[i]["id"], {})[f"{task}|{instruction}"] = ids
        if (b // batch_size) % 20 == 0:
            log(f"shard {shard}: {b + len(batch)}/{len(reqs)} requests, {time.time() - t0:.0f} s")
    doc = {"version": VERSION, "target": target, "epochs": epochs, "answers": answers}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, out)
    log(f"shard {shard}: {len(reqs) - at_limit} answers, {at_limit} at the limit -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shards", default="1")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--ckpt", default=str(ALM / "target" / "ckpt.pt"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer

    prompts = Prompts(Tokenizer.from_file(str(ALM / "tokenizer.json")))
    saved = torch.load(args.ckpt, weights_only=False)
    model = AudioLM(AlmConfig(**saved["cfg"]))
    model.load_state_dict(saved["model"])
    model.eval()
    digest = hashlib.sha256(Path(args.ckpt).read_bytes()).hexdigest()[:16]
    target = {"ckpt": Path(args.ckpt).name, "step": saved["step"], "sha256_16": digest}
    for shard in (int(s) for s in args.shards.split(",")):
        distil_shard(model, prompts, shard, args.epochs, target, args.batch)


if __name__ == "__main__":
    main()
