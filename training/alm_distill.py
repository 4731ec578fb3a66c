"""The trained audio-LLM target's own answers to the training requests, for the drafter's
``alm_train.py --model drafter --labels target``.

    python training/alm_distill.py --shards 1,2,3 [--epochs 2] [--ckpt PATH]

The requests ``alm_train.py --shards`` (the same list) draws in its first ``--epochs``
epochs (the same units and seeds, so the drafter's epochs find them) are answered greedily
by the target checkpoint (fp32, batched, left-padded, from the same cached encoder frames
training joins), and written to ``training/work/alm/distill/shards-<list>.json``:
``{"version": 1, "target": {...}, "epochs": E, "answers": {unit key: {"task|instruction":
token ids}}}`` (a unit key: its utterance ids joined by ``+``). Answers that reach the
generation limit without the end-of-turn token are left out. A file that names the same
checkpoint and epochs is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

from alm_models import AlmConfig, AudioLM, audio_rows  # noqa: E402
from alm_train import (  # noqa: E402
    ALM,
    Prompts,
    Shards,
    answers_path,
    cached_frames,
    epoch_requests,
    greedy_rows,
    log,
    unit_frames,
    unit_item,
)

VERSION = 1


def requests(data: Shards, epochs: int) -> list[tuple[list[int], str, str]]:
    """(unit, task, instruction) the first ``epochs`` epochs draw, each once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for epoch in range(epochs):
        for unit, task, instruction, _ in epoch_requests(data, epoch):
            key = (data.unit_key(unit), instruction)
            if key not in seen:
                seen.add(key)
                out.append((unit, task, instruction))
    return out


@torch.no_grad()
def answer_batch(
    model: AudioLM,
    prompts: Prompts,
    data: Shards,
    batch: list[tuple[list[int], str, str]],
    limit: int,
    cache: dict,
) -> list[list[int] | None]:
    """Greedy answers (EOS excluded; None at the limit) for a batch of requests, left-padded."""
    examples = [{"unit": u} for u, _, _ in batch]
    audio = model.tower.project(cached_frames(model, data, examples, cache))
    seqs = []
    for j, (unit, _, instruction) in enumerate(batch):
        rows = int(audio_rows(torch.tensor(unit_frames(data, unit, True)), model.cfg.stack))
        ids, at, plen = prompts.example(instruction, rows, [])
        emb = model.text.embed(torch.tensor(ids[:plen]))
        seqs.append(torch.cat([emb[:at], audio[j, :rows], emb[at + rows :]]))
    got = greedy_rows(model, seqs, prompts.eos, limit)
    return [o if ended else None for o, ended in got]


def distil(
    model: AudioLM, prompts: Prompts, shards: list[int], epochs: int, target: dict, size: int
) -> None:
    out = answers_path(shards)
    if out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        if old.get("target") == target and old.get("epochs") == epochs:
            log(f"{out}: answers of this target already written")
            return
    data = Shards(shards, "reference")
    reqs = requests(data, epochs)
    # length-sorted batches: similar prompts pad little
    reqs.sort(key=lambda r: (unit_frames(data, r[0], True), r[2]))
    answers: dict[str, dict[str, list[int]]] = {}
    at_limit = 0
    cache: dict[int, torch.Tensor] = {}
    t0 = time.time()
    for b in range(0, len(reqs), size):
        batch = reqs[b : b + size]
        longest = max(len(prompts.spoken(unit_item(data, u)["text"])) for u, _, _ in batch)
        got = answer_batch(model, prompts, data, batch, min(200, 2 * longest + 16), cache)
        for (unit, task, instruction), ids in zip(batch, got, strict=True):
            if ids is None:
                at_limit += 1
                continue
            answers.setdefault(data.unit_key(unit), {})[f"{task}|{instruction}"] = ids
        if (b // size) % 20 == 0:
            log(f"{b + len(batch)}/{len(reqs)} requests, {time.time() - t0:.0f} s")
    doc = {"version": VERSION, "target": target, "epochs": epochs, "answers": answers}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, out)
    log(f"{len(reqs) - at_limit} answers, {at_limit} at the limit -> {out}")


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
    shards = [int(s) for s in args.shards.split(",")]
    distil(model, prompts, shards, args.epochs, target, args.batch)


if __name__ == "__main__":
    main()
