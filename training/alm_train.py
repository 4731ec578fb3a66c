"""Train the bundled audio LLM's target or drafter (resumable; CPU).

    python training/alm_train.py --model target --shards 1,2,3 [--minutes 120]

Data: the audio-LLM training shards (``make_corpus.py --only alm --shard N``: Whisper-style
features, texts, the grammar utterances' English side). Every epoch draws each utterance's
request afresh (seed 4242 + epoch): a translation into English for German and Spanish
grammar utterances (TASK_MIX), a transcription, or a spoken question of a random kind
(as2d_cli.corpus.questions) with its answer. The prompt is the chat template rendered by the
toolkit's own renderer with the instruction the toolkit sends for that task, its audio
placeholder expanded to the tower's rows, so training sees exactly the run-time prompt.
The loss is the cross-entropy of the answer's tokens and the end-of-turn token;
``--labels target`` (the drafter) takes the answers from ``alm_distill.py`` instead.

Model: training/alm_models.py. The audio tower's encoder is the bundled target's (from its
ONNX file), the adapter the least-squares fit of ``alm_prepare.py``; both stay frozen unless
``--tune-audio`` (then at a tenth of the learning rate). AdamW (0.9/0.98, weight decay 0.01),
warm-up over ``--warmup`` steps to ``--lr``, then inverse square root, or with
``--minutes`` a linear decay to zero at that wall-clock budget from the (re)start; a
checkpoint every ``--ckpt-seconds`` and on SIGTERM; greedy results on a few dev requests of
every task in the log every ``--eval-minutes``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

from alm_models import (  # noqa: E402
    AUDIO,
    CHAT_TEMPLATE,
    DRAFTER,
    EOS,
    PAD,
    TARGET,
    AlmConfig,
    AudioLM,
    audio_rows,
)
from models import out_frames  # noqa: E402

from as2d_cli.corpus.questions import ALL_KINDS, ask, words_of  # noqa: E402
from as2d_cli.models.prompting import PromptSpec, render_chat  # noqa: E402

WORK = ROOT / "training" / "work"
ALM = WORK / "alm"
# Requests per utterance kind: (translate, transcribe, answer).
TASK_MIX = {"parallel-foreign": (0.5, 0.35, 0.15), "other": (0.0, 0.8, 0.2)}
SPECIAL_TEXT = {"eos_token": EOS, "pad_token": PAD}


def log(*a: object) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Prompts:
    """Token ids of the rendered prompt per instruction, the run-time renderer's."""

    def __init__(self, tok) -> None:  # noqa: ANN001 - tokenizers.Tokenizer
        self.tok = tok
        self.audio = tok.token_to_id(AUDIO)
        self.eos = tok.token_to_id(EOS)
        self.pad = tok.token_to_id(PAD)
        self.cache: dict[str, list[int]] = {}

    def ids(self, instruction: str) -> list[int]:
        got = self.cache.get(instruction)
        if got is None:
            text = render_chat(CHAT_TEMPLATE, instruction, SPECIAL_TEXT, "alm_train")
            got = self.cache[instruction] = self.tok.encode(text, add_special_tokens=False).ids
        return got

    def example(self, instruction: str, rows: int, answer: list[int]) -> tuple[list[int], int, int]:
        """(ids with the placeholder expanded, where the audio rows begin, the prompt length)."""
        ids = self.ids(instruction)
        at = ids.index(self.audio)
        full = ids[:at] + [self.audio] * rows + ids[at + 1 :]
        return full + answer + [self.eos], at, len(full)


class Shards:
    def __init__(self, shards: list[int], labels: str) -> None:
        self.items: list[dict] = []
        self.feats: list[np.ndarray] = []
        for k, n in enumerate(shards):
            d = WORK / "alm_shards" / str(n)
            index = json.loads((d / "index.json").read_text(encoding="utf-8"))
            target = {}
            if labels == "target":
                target = json.loads((d / "target_answers.json").read_text(encoding="utf-8"))
            for it in index["items"]:
                it["shard"] = k
                if labels == "target":
                    it["labels"] = target.get(it["id"], {})
                self.items.append(it)
            self.feats.append(np.load(d / "features.npy", mmap_mode="r"))
        log(f"data: {len(self.items)} utterances from shards {shards}")

    def features(self, it: dict) -> np.ndarray:
        return np.asarray(self.feats[it["shard"]][it["offset"] : it["offset"] + it["frames"]])


def draw_request(it: dict, rng: np.random.Generator) -> tuple[str, str, str]:
    """(task, instruction, reference answer) for one utterance this epoch."""
    foreign = "translation" in it and it["language"] != "en"
    mix = TASK_MIX["parallel-foreign" if foreign else "other"]
    task = ("translate", "transcribe", "answer")[int(rng.choice(3, p=mix))]
    if task == "translate":
        return task, PromptSpec(task="translate", language="en").instruction(), it["translation"]
    if task == "transcribe":
        return task, PromptSpec(task="transcribe").instruction(), it["text"]
    words = words_of(it["text"])
    start = int(rng.integers(len(ALL_KINDS)))
    for j in range(len(ALL_KINDS)):
        q = ask(
            ALL_KINDS[(start + j) % len(ALL_KINDS)], words, it["language"], int(rng.integers(2**31))
        )
        if q is not None:
            return task, q.question, q.answer
    raise AssertionError("the language question serves every utterance")


def epoch_examples(data: Shards, prompts: Prompts, epoch: int, stack: int) -> list[dict]:
    rng = np.random.default_rng(4242 + epoch)
    out = []
    for i, it in enumerate(data.items):
        task, instruction, reference = draw_request(it, rng)
        labels = it.get("labels")
        if labels is not None:  # distillation: the target's own answer to this request
            key = f"{task}|{instruction}"
            if key not in labels:
                continue
            answer = labels[key]
        else:
            answer = prompts.tok.encode(reference, add_special_tokens=False).ids
        rows = int(audio_rows(torch.tensor(it["frames"]), stack))
        ids, at, plen = prompts.example(instruction, rows, answer)
        out.append({"item": i, "ids": ids, "at": at, "plen": plen, "task": task})
    return out


def batches(examples: list[dict], budget: int, rng: np.random.Generator) -> list[list[dict]]:
    """Length-bucketed batches of at most ``budget`` padded decoder positions."""
    order = sorted(examples, key=lambda e: len(e["ids"]))
    out, cur, longest = [], [], 0
    for e in order:
        n = len(e["ids"])
        if cur and max(longest, n) * (len(cur) + 1) > budget:
            out.append(cur)
            cur, longest = [], 0
        cur.append(e)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(batch: list[dict], data: Shards, pad: int):  # noqa: ANN201
    feats = [data.features(data.items[e["item"]]) for e in batch]
    t = max(len(f) for f in feats)
    x = torch.zeros(len(batch), t, feats[0].shape[1])
    for i, f in enumerate(feats):
        x[i, : len(f)] = torch.from_numpy(f.astype(np.float32))
    frames = torch.tensor([len(f) for f in feats])
    n = max(len(e["ids"]) for e in batch)
    ids = torch.full((len(batch), n), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    labels = torch.full((len(batch), n), -100, dtype=torch.long)
    for i, e in enumerate(batch):
        k = len(e["ids"])
        ids[i, :k] = torch.tensor(e["ids"])
        mask[i, :k] = 1
        # position p predicts token p + 1: the answer and EOS are predicted from plen - 1 on
        labels[i, e["plen"] - 1 : k - 1] = torch.tensor(e["ids"][e["plen"] : k])
    at = torch.tensor([e["at"] for e in batch])
    return x, frames, ids, at, mask, labels


@torch.no_grad()
def cached_frames(
    model: AudioLM, batch: list[dict], x: torch.Tensor, frames: torch.Tensor, cache: dict
) -> torch.Tensor:
    """The batch's encoder frames (B, S, d), zero-padded; a frozen encoder's output per
    utterance is kept (float16) and reused in later epochs."""
    keys = [e["item"] for e in batch]
    if any(k not in cache for k in keys):
        model.tower.eval()
        enc = model.tower.encode(x, frames)
        n = out_frames(frames, 4)
        for i, k in enumerate(keys):
            cache[k] = enc[i, : int(n[i])].to(torch.float16)
    rows = [cache[k] for k in keys]
    out = torch.zeros(len(rows), max(len(r) for r in rows), rows[0].shape[1])
    for i, r in enumerate(rows):
        out[i, : len(r)] = r.float()
    return out


def init_model(cfg: AlmConfig, tune_audio: bool) -> AudioLM:
    from from_onnx import rebuild

    model = AudioLM(cfg)
    manifest = json.loads((ROOT / "as2d_cli/assets/models/models.json").read_text())
    seq2seq, _, _ = rebuild("target", manifest)
    model.tower.encoder.load_state_dict(seq2seq.encoder.state_dict())
    fit = np.load(ALM / "adapter.npz")
    with torch.no_grad():
        model.tower.adapter.weight.copy_(torch.from_numpy(fit["weight"]))
        model.tower.adapter.bias.copy_(torch.from_numpy(fit["bias"]))
    set_audio_trainable(model, tune_audio)
    return model


def set_audio_trainable(model: AudioLM, on: bool) -> None:
    for p in [*model.tower.encoder.parameters(), *model.tower.adapter.parameters()]:
        p.requires_grad_(on)


def optimiser(model: AudioLM, lr: float) -> torch.optim.Optimizer:
    audio = [*model.tower.encoder.parameters(), *model.tower.adapter.parameters()]
    ids = {id(p) for p in audio}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": rest, "scale": 1.0}, {"params": audio, "scale": 0.1}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)


@torch.no_grad()
def greedy(
    model: AudioLM, feats: np.ndarray, prompts: Prompts, instruction: str, limit: int = 120
) -> list[int]:
    """The model's greedy answer (token ids, EOS excluded) with a KV cache."""
    model.eval()
    x = torch.from_numpy(feats.astype(np.float32))[None]
    frames = torch.tensor([len(feats)])
    rows = int(audio_rows(frames, model.cfg.stack)[0])
    ids, at, plen = prompts.example(instruction, rows, [])
    ids = ids[:plen]
    emb = model.embed_batch(x, frames, torch.tensor([ids]), torch.tensor([at]))
    past = model.text.empty_past(1)
    out: list[int] = []
    pos = 0
    while len(out) < limit:
        n = emb.shape[1]
        mask = torch.ones(1, pos + n, dtype=torch.long)
        logits, *past = model.text(emb, mask, torch.arange(pos, pos + n)[None], *past)
        pos += n
        nxt = int(logits[0, -1].argmax())
        if nxt == prompts.eos:
            break
        out.append(nxt)
        emb = model.text.embed(torch.tensor([[nxt]]))
    model.train()
    return out


def dev_report(model: AudioLM, prompts: Prompts, per_task: int = 4) -> dict:
    """Greedy answers on a few dev requests per task: word error rate (transcribe,
    translate) and exact-match share (answer)."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.corpus.text import wer
    from as2d_cli.models.whisper_features import whisper_log_mel

    corpus = load_corpus()
    out = {}
    for task in ("transcribe", "translate", "answer"):
        reqs = corpus.requests(task, "dev")[
            :: max(1, len(corpus.requests(task, "dev")) // per_task)
        ][:per_task]
        refs, hyps = [], []
        for r in reqs:
            feats = whisper_log_mel(r.load_audio(), 80, to_window=False).T
            spec = PromptSpec(
                task=task, language="en", question=r.question if task == "answer" else None
            )
            ids = greedy(model, feats, prompts, spec.instruction())
            refs.append(r.reference)
            hyps.append(prompts.tok.decode(ids))
        if task == "answer":
            out[task] = sum(
                h.strip().lower() == r.strip().lower() for r, h in zip(refs, hyps, strict=True)
            ) / len(refs)
        else:
            out[task] = round(wer(refs, hyps), 4)
        out[f"{task}_example"] = hyps[0][:80]
    return out


def save(path: Path, model: AudioLM, opt: torch.optim.Optimizer, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"model": model.state_dict(), "opt": opt.state_dict(), "cfg": model.cfg.to_dict(), **state},
        tmp,
    )
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", choices=["target", "drafter"], required=True)
    ap.add_argument("--shards", default="1")
    ap.add_argument("--out", default=None)
    ap.add_argument("--labels", choices=["reference", "target"], default="reference")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--budget", type=int, default=4000, help="padded decoder positions per batch")
    ap.add_argument("--tune-audio", action="store_true")
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="forward under bfloat16 autocast (weights, optimiser fp32)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-seconds", type=int, default=300)
    ap.add_argument("--eval-minutes", type=float, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(11 if args.model == "target" else 22)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ALM / "tokenizer.json"))
    prompts = Prompts(tok)
    cfg = AlmConfig(
        **{
            **(TARGET if args.model == "target" else DRAFTER).to_dict(),
            "vocab": tok.get_vocab_size(),
        }
    )
    out = Path(args.out) if args.out else ALM / args.model
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "ckpt.pt"
    model = init_model(cfg, args.tune_audio)
    opt = optimiser(model, args.lr)
    state = {"step": 0, "epoch": 0, "batch": 0, "anneal_from": None}
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        try:
            opt.load_state_dict(saved["opt"])
        except ValueError:  # --tune-audio changed the trainable set: a fresh optimiser
            log("optimiser state not reused (trainable parameters changed)")
        state = {k: saved[k] for k in state}
        log(f"resumed at step {state['step']} (epoch {state['epoch']}, batch {state['batch']})")
    set_audio_trainable(model, args.tune_audio)
    data = Shards([int(s) for s in args.shards.split(",")], args.labels)
    params = sum(p.numel() for p in model.parameters())
    logf = open(out / "log.jsonl", "a", encoding="utf-8")
    logf.write(
        json.dumps(
            {"start": time.time(), "args": vars(args), "cfg": cfg.to_dict(), "params": params}
        )
        + "\n"
    )
    log(f"{args.model}: {params / 1e6:.2f} M parameters")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    t_start = time.time()
    deadline = t_start + 60 * args.minutes if args.minutes else None
    start_step = state["step"]
    last_ckpt = last_eval = time.time()
    cache: dict[int, torch.Tensor] = {}
    model.train()
    while not stop["now"]:
        ex = epoch_examples(data, prompts, state["epoch"], cfg.stack)
        bs = batches(ex, args.budget, np.random.default_rng(99 + state["epoch"]))
        while state["batch"] < len(bs) and not stop["now"]:
            b = bs[state["batch"]]
            x, frames, ids, at, mask, labels = collate(b, data, prompts.pad)
            encoded = not args.tune_audio
            if encoded:  # the frozen tower's encoder frames: computed once per utterance
                x = cached_frames(model, b, x, frames, cache)
            step = state["step"]
            warm = min(1.0, (step + 1) / args.warmup)
            if deadline is not None:
                frac = max(0.0, (deadline - time.time()) / (deadline - t_start))
                base = args.lr * min(
                    warm if start_step == 0 else min(1.0, (step - start_step + 1) / 100), frac
                )
            else:
                base = args.lr * warm * min(1.0, math.sqrt(args.warmup / max(step + 1, 1)))
            for g in opt.param_groups:
                g["lr"] = base * g["scale"]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(x, frames, ids, at, mask, encoded)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            state["batch"] += 1
            if state["step"] % 10 == 0:
                rec = {
                    "step": state["step"],
                    "epoch": state["epoch"],
                    "loss": round(float(loss), 4),
                    "lr": base,
                    "t": round(time.time() - t_start, 1),
                    "batch": len(b),
                }
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
                log(rec)
            now = time.time()
            if now - last_eval > 60 * args.eval_minutes:
                rep = {"step": state["step"], "dev": dev_report(model, prompts)}
                logf.write(json.dumps(rep) + "\n")
                logf.flush()
                log(rep)
                last_eval = time.time()
            if now - last_ckpt > args.ckpt_seconds:
                save(ckpt, model, opt, state)
                last_ckpt = now
            if deadline is not None and now >= deadline:
                stop["now"] = True
        if state["batch"] >= len(bs):
            state["epoch"] += 1
            state["batch"] = 0
    save(ckpt, model, opt, state)
    rep = {"step": state["step"], "dev": dev_report(model, prompts), "stop": time.time()}
    logf.write(json.dumps(rep) + "\n")
    log(rep)


if __name__ == "__main__":
    main()
