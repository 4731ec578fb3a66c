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
    set_dropout,
)
from models import out_frames  # noqa: E402

from as2d_cli.corpus.questions import ALL_KINDS, ask, words_of  # noqa: E402
from as2d_cli.models.prompting import PromptSpec, render_chat  # noqa: E402

WORK = ROOT / "training" / "work"
ALM = WORK / "alm"
# Requests per utterance kind: (translate, transcribe, answer).
TASK_MIX = {"parallel-foreign": (0.5, 0.35, 0.15), "other": (0.0, 0.8, 0.2)}
SPECIAL_TEXT = {"eos_token": EOS, "pad_token": PAD}
# A training unit's length in seconds is drawn in this range (epoch_units): the evaluation
# windows' 5th to 95th percentile.
UNIT_SECONDS = (3.0, 17.0)


def log(*a: object) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Prompts:
    """Token ids of the rendered prompt per instruction, the run-time renderer's."""

    def __init__(self, tok) -> None:  # noqa: ANN001 - tokenizers.Tokenizer
        self.tok = tok
        self.audio = tok.token_to_id(AUDIO)
        self.eos = tok.token_to_id(EOS)
        self.pad = tok.token_to_id(PAD)
        self.cache: dict[str, list[int]] = {}  # rendered prompt ids per instruction
        self.spoken_ids: dict[str, list[int]] = {}  # spoken-text ids per utterance text

    def ids(self, instruction: str) -> list[int]:
        got = self.cache.get(instruction)
        if got is None:
            text = render_chat(CHAT_TEMPLATE, instruction, SPECIAL_TEXT, "alm_train")
            got = self.cache[instruction] = self.tok.encode(text, add_special_tokens=False).ids
        return got

    def spoken(self, text: str) -> list[int]:
        """The token ids of what is spoken (cached per utterance text)."""
        got = self.spoken_ids.get(text)
        if got is None:
            got = self.spoken_ids[text] = self.tok.encode(text, add_special_tokens=False).ids
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
            for it in index["items"]:
                it["shard"] = k
                self.items.append(it)
            self.feats.append(np.load(d / "features.npy", mmap_mode="r"))
        # distillation: the target's answers per unit and request (alm_distill.py)
        self.labels: dict[str, dict[str, list[int]]] | None = None
        self.label_epochs = 0
        if labels == "target":
            doc = json.loads(answers_path(shards).read_text(encoding="utf-8"))
            self.labels = doc["answers"]
            self.label_epochs = int(doc["epochs"])
        log(f"data: {len(self.items)} utterances from shards {shards}")

    def features(self, it: dict) -> np.ndarray:
        return np.asarray(self.feats[it["shard"]][it["offset"] : it["offset"] + it["frames"]])

    def unit_key(self, unit: list[int]) -> str:
        return "+".join(self.items[i]["id"] for i in unit)


def answers_path(shards: list[int]) -> Path:
    """Where alm_distill.py writes the target's answers for a training run's shards."""
    return ALM / "distill" / f"shards-{','.join(str(s) for s in shards)}.json"


def epoch_units(data: Shards, epoch: int) -> list[list[int]]:
    """The epoch's training units: utterances of one kind (language; translated or not)
    joined end to end up to a length drawn per unit in UNIT_SECONDS, as long as the
    evaluation windows (the shards' utterances are mostly 1-4 s, the windows 4-17 s); an
    utterance longer than its draw stays alone."""
    rng = np.random.default_rng(777 + epoch)
    groups: dict[tuple[str, bool], list[int]] = {}
    for i, it in enumerate(data.items):
        groups.setdefault((it["language"], translates(it)), []).append(i)
    units: list[list[int]] = []
    for key in sorted(groups):
        idx = [int(i) for i in rng.permutation(groups[key])]
        cur: list[int] = []
        secs, goal = 0.0, rng.uniform(*UNIT_SECONDS)
        for i in idx:
            n = data.items[i]["frames"] / 100
            if cur and secs + n > goal:
                units.append(cur)
                cur, secs, goal = [], 0.0, rng.uniform(*UNIT_SECONDS)
            cur.append(i)
            secs += n
        if cur:
            units.append(cur)
    return units


def translates(it: dict) -> bool:
    return "translation" in it and it["language"] != "en"


def unit_item(data: Shards, unit: list[int]) -> dict:
    """The unit as one utterance: texts (and English sides) joined."""
    its = [data.items[i] for i in unit]
    out = {"text": " ".join(it["text"] for it in its), "language": its[0]["language"]}
    if translates(its[0]):
        out["translation"] = " ".join(it["translation"] for it in its)
    return out


def unit_frames(data: Shards, unit: list[int], encoded: bool) -> int:
    """The unit's feature frames as the tower sees them: with cached encoder frames (a
    frozen tower), 4 x the sum of each utterance's encoder frames (so ``audio_rows`` counts
    the joined frames); else the joined features' frames."""
    frames = [data.items[i]["frames"] for i in unit]
    if encoded:
        return 4 * int(sum(out_frames(torch.tensor(f), 4) for f in frames))
    return int(sum(frames))


def draw_request(it: dict, rng: np.random.Generator) -> tuple[str, str, str]:
    """(task, instruction, reference answer) for one utterance this epoch."""
    mix = TASK_MIX["parallel-foreign" if translates(it) else "other"]
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


def epoch_requests(data: Shards, epoch: int) -> list[tuple[list[int], str, str, str]]:
    """The epoch's (unit, task, instruction, reference answer)."""
    rng = np.random.default_rng(4242 + epoch)
    return [(u, *draw_request(unit_item(data, u), rng)) for u in epoch_units(data, epoch)]


def epoch_examples(
    data: Shards, prompts: Prompts, epoch: int, stack: int, encoded: bool
) -> list[dict]:
    out = []
    if data.labels is not None:  # the distilled epochs' units and requests, in turn
        epoch %= data.label_epochs
    for unit, task, instruction, reference in epoch_requests(data, epoch):
        if data.labels is not None:  # distillation: the target's own answer to this request
            answer = data.labels.get(data.unit_key(unit), {}).get(f"{task}|{instruction}")
            if answer is None:
                continue
        else:
            answer = prompts.tok.encode(reference, add_special_tokens=False).ids
        frames = unit_frames(data, unit, encoded)
        rows = int(audio_rows(torch.tensor(frames), stack))
        ids, at, plen = prompts.example(instruction, rows, answer)
        spoken = prompts.spoken(unit_item(data, unit)["text"])[:rows]  # the auxiliary CTC's
        ex = {"unit": unit, "frames": frames, "ids": ids, "at": at, "plen": plen}
        out.append({**ex, "task": task, "ctc": spoken})
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


def collate(batch: list[dict], data: Shards, pad: int, encoded: bool):  # noqa: ANN201
    frames = torch.tensor([e["frames"] for e in batch])
    x = torch.zeros(0)  # a frozen tower's batch: the cached encoder frames replace it
    if not encoded:
        feats = [np.concatenate([data.features(data.items[i]) for i in e["unit"]]) for e in batch]
        x = torch.zeros(len(batch), max(len(f) for f in feats), feats[0].shape[1])
        for i, f in enumerate(feats):
            x[i, : len(f)] = torch.from_numpy(f.astype(np.float32))
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


def guided_attention_loss(
    maps: list[torch.Tensor], batch: list[dict], rows: torch.Tensor, g: float = 0.2
) -> torch.Tensor:
    """Penalise a transcription answer's attention to audio rows far from the diagonal
    (answer token n of N ≈ audio row t of T; Tachibana et al., 2017, as ``train.py`` does for
    the encoder–decoders' cross-attention): speech is read in order, and without the prior the
    decoder loses its place in long windows. Only the audio share of a row is penalised, so
    attention to the prompt and the answer so far is free."""
    b, _, s, _ = maps[0].shape
    weight = torch.zeros(b, s, s)
    answer_rows = 0
    for i, e in enumerate(batch):
        if e["task"] != "transcribe":
            continue
        n_len, t_len = len(e["ids"]) - e["plen"], int(rows[i])
        tn = torch.arange(n_len, dtype=torch.float32)[:, None] / n_len
        ts = torch.arange(t_len, dtype=torch.float32)[None, :] / t_len
        p0, a0 = e["plen"] - 1, e["at"]
        weight[i, p0 : p0 + n_len, a0 : a0 + t_len] = 1.0 - torch.exp(
            -((tn - ts) ** 2) / (2 * g * g)
        )
        answer_rows += n_len
    if not answer_rows:
        return torch.tensor(0.0)
    total = sum((m.float() * weight[:, None]).sum() / m.shape[1] for m in maps)
    return total / (answer_rows * len(maps))


def ctc_targets(batch: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's spoken-text ids end to end and their lengths (the auxiliary CTC's)."""
    flat = [t for e in batch for t in e["ctc"]]
    return torch.tensor(flat, dtype=torch.long), torch.tensor([len(e["ctc"]) for e in batch])


@torch.no_grad()
def cached_frames(model: AudioLM, data: Shards, batch: list[dict], cache: dict) -> torch.Tensor:
    """The batch's encoder frames (B, S, d), each unit's utterances' frames joined and
    zero-padded; a frozen encoder's output per utterance is kept (float16) and reused."""
    for e in batch:
        todo = [i for i in e["unit"] if i not in cache]
        if todo:
            model.tower.eval()
            for i in todo:
                f = torch.from_numpy(data.features(data.items[i]).astype(np.float32))[None]
                cache[i] = model.tower.encode(f, torch.tensor([len(f[0])]))[0].to(torch.float16)
    rows = [torch.cat([cache[i] for i in e["unit"]]) for e in batch]
    out = torch.zeros(len(rows), max(len(r) for r in rows), rows[0].shape[1])
    for i, r in enumerate(rows):
        out[i, : len(r)] = r.float()
    return out


def mask_spans(
    x: torch.Tensor, lengths: torch.Tensor, share: float, rng: np.random.Generator
) -> torch.Tensor:
    """``x`` (B, S, d) with about ``share`` of each clip's frames zeroed in spans of 1-5."""
    x = x.clone()
    for i, n in enumerate(lengths.tolist()):
        for _ in range(int(rng.poisson(share * n / 3))):
            w = int(rng.integers(1, 6))
            s = int(rng.integers(0, max(1, n - w)))
            x[i, s : s + w] = 0
    return x


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
def greedy_rows(
    model: AudioLM, seqs: list[torch.Tensor], eos: int, limit: int
) -> list[tuple[list[int], bool]]:
    """Greedy continuations of prompt rows ``seqs`` (each (L, hidden)), left-padded into one
    batch with a KV cache: per row its tokens (EOS excluded, at most ``limit``) and whether
    it ended with EOS within the limit."""
    n = len(seqs)
    width = max(len(x) for x in seqs)
    emb = torch.zeros(n, width, model.cfg.hidden)
    mask = torch.zeros(n, width, dtype=torch.long)
    for j, x in enumerate(seqs):
        emb[j, width - len(x) :] = x
        mask[j, width - len(x) :] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    past = model.text.empty_past(n)
    out: list[list[int]] = [[] for _ in seqs]
    done = [False] * n
    for _ in range(limit + 1):
        logits, *past = model.text(emb, mask, pos, *past)
        nxt = logits[:, -1].argmax(-1)
        for j in range(n):
            if not done[j]:
                if int(nxt[j]) == eos:
                    done[j] = True
                else:
                    out[j].append(int(nxt[j]))
        if all(done):
            break
        emb = model.text.embed(nxt[:, None])
        pos = pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(n, 1, dtype=torch.long)], dim=1)
    return [(o[:limit], d) for o, d in zip(out, done, strict=True)]


@torch.no_grad()
def greedy(
    model: AudioLM, feats: np.ndarray, prompts: Prompts, instruction: str, limit: int = 120
) -> list[int]:
    """The model's greedy answer (token ids, EOS excluded, at most ``limit``)."""
    model.eval()
    x = torch.from_numpy(feats.astype(np.float32))[None]
    frames = torch.tensor([len(feats)])
    rows = int(audio_rows(frames, model.cfg.stack)[0])
    ids, at, plen = prompts.example(instruction, rows, [])
    emb = model.embed_batch(x, frames, torch.tensor([ids[:plen]]), torch.tensor([at]))
    ((out, _),) = greedy_rows(model, [emb[0]], prompts.eos, limit)
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


def save(path: Path, model: AudioLM, opt: torch.optim.Optimizer, state: dict, **extra) -> None:
    tmp = path.with_suffix(".tmp")
    doc = {"model": model.state_dict(), "opt": opt.state_dict(), "cfg": model.cfg.to_dict()}
    torch.save({**doc, **state, **extra}, tmp)
    os.replace(tmp, path)


def parse_args() -> argparse.Namespace:
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
    ap.add_argument(
        "--ctc-weight",
        type=float,
        default=0.3,
        help="weight of the auxiliary CTC from the audio embeddings to the spoken tokens",
    )
    ap.add_argument(
        "--init-from",
        default=None,
        help="a target checkpoint: the drafter starts as its audio tower, embeddings, first "
        "blocks, final norm and CTC head (a fresh run only)",
    )
    ap.add_argument(
        "--freeze-shared",
        action="store_true",
        help="with --init-from: keep the warm start's audio projector and token embeddings "
        "(the drafter's audio-encoder and embedding graphs are then the target's, byte for byte)",
    )
    ap.add_argument(
        "--guide-weight",
        type=float,
        default=0.0,
        help="guided attention from transcription answers to the audio rows (0: off)",
    )
    ap.add_argument("--dropout", type=float, default=0.0, help="residual dropout in the decoder")
    ap.add_argument(
        "--mask-frames",
        type=float,
        default=0.0,
        help="SpecAugment-style: share of a clip's encoder frames zeroed, in spans of up to "
        "5 frames (0.2 s), when the tower is frozen",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-seconds", type=int, default=300)
    ap.add_argument("--eval-minutes", type=float, default=20)
    return ap.parse_args()


class Run:
    """One training run: the model, its optimiser, the position in the data (``state``,
    checkpointed) and the log."""

    def __init__(self, args: argparse.Namespace) -> None:
        from tokenizers import Tokenizer

        self.args = args
        tok = Tokenizer.from_file(str(ALM / "tokenizer.json"))
        self.prompts = Prompts(tok)
        base = TARGET if args.model == "target" else DRAFTER
        self.cfg = AlmConfig(**{**base.to_dict(), "vocab": tok.get_vocab_size()})
        self.out = Path(args.out) if args.out else ALM / args.model
        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt = self.out / "ckpt.pt"
        self.model = init_model(self.cfg, args.tune_audio)
        # Auxiliary CTC from the audio embeddings to the spoken text's tokens (blank: the
        # last class; training only): the projector learns token-like embeddings, which the
        # decoder then reads in order.
        self.ctc_head = torch.nn.Linear(self.cfg.hidden, self.cfg.vocab + 1)
        self.opt = optimiser(self.model, args.lr)
        self.opt.add_param_group({"params": list(self.ctc_head.parameters()), "scale": 1.0})
        self.rewarm_from: int | None = None
        self.last_guide = 0.0
        self.rng = np.random.default_rng(7 + int(time.time()))  # augmentation only
        set_dropout(self.model, args.dropout)
        self.state = {"step": 0, "epoch": 0, "batch": 0, "anneal_from": None}
        if self.ckpt.exists():
            self.resume()
        elif args.init_from:
            self.warm_start(Path(args.init_from))
        set_audio_trainable(self.model, args.tune_audio)
        if args.freeze_shared:  # the drafter keeps the target's projector and embeddings
            for p in [*self.model.tower.proj.parameters(), self.model.text.embed.weight]:
                p.requires_grad_(False)
        self.data = Shards([int(s) for s in args.shards.split(",")], args.labels)
        self.cache: dict[int, torch.Tensor] = {}  # frozen encoder frames per utterance
        self.logf = open(self.out / "log.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        params = sum(p.numel() for p in self.model.parameters())
        self.write(
            {"start": time.time(), "args": vars(args), "cfg": self.cfg.to_dict(), "params": params}
        )
        log(f"{args.model}: {params / 1e6:.2f} M parameters")
        self.t_start = time.time()
        self.deadline = self.t_start + 60 * args.minutes if args.minutes else None
        self.start_step = self.state["step"]
        self.last_ckpt = self.last_eval = time.time()

    def resume(self) -> None:
        saved = torch.load(self.ckpt, weights_only=False)
        self.model.load_state_dict(saved["model"])
        if "ctc_head" in saved:
            self.ctc_head.load_state_dict(saved["ctc_head"])
        self.state = {k: saved[k] for k in self.state}
        try:
            self.opt.load_state_dict(saved["opt"])
        except ValueError:  # the trainable set changed: a fresh optimiser, re-warmed
            log("optimiser state not reused (trainable parameters changed)")
            self.rewarm_from = self.state["step"]
        st = self.state
        log(f"resumed at step {st['step']} (epoch {st['epoch']}, batch {st['batch']})")

    def warm_start(self, path: Path) -> None:
        """Take every parameter whose name and shape the checkpoint has (the drafter's blocks
        are the target's first ones)."""
        saved = torch.load(path, weights_only=False)
        own = self.model.state_dict()
        taken = {k: v for k, v in saved["model"].items() if k in own and own[k].shape == v.shape}
        self.model.load_state_dict(taken, strict=False)
        if "ctc_head" in saved:
            self.ctc_head.load_state_dict(saved["ctc_head"])
        log(f"warm start from {path} (step {saved['step']}): {len(taken)}/{len(own)} tensors")

    def write(self, rec: dict, echo: bool = False) -> None:
        self.logf.write(json.dumps(rec) + "\n")
        self.logf.flush()
        if echo:
            log(rec)

    def learning_rate(self) -> float:
        """Warm-up then inverse square root; with --minutes, a linear decay to zero at the
        budget (after a resume: a 100-step re-warm)."""
        args, step = self.args, self.state["step"]
        warm = min(1.0, (step + 1) / args.warmup)
        if self.rewarm_from is not None:  # a fresh optimiser: 100 steps back to the schedule
            warm = min(warm, (step - self.rewarm_from + 1) / 100)
        if self.deadline is None:
            return args.lr * warm * min(1.0, math.sqrt(args.warmup / max(step + 1, 1)))
        frac = max(0.0, (self.deadline - time.time()) / (self.deadline - self.t_start))
        if self.start_step:
            warm = min(1.0, (step - self.start_step + 1) / 100)
        return args.lr * min(warm, frac)

    def step(self, batch: list[dict]) -> tuple[float, float]:
        """One optimiser step on ``batch``: (loss, learning rate)."""
        encoded = not self.args.tune_audio
        x, frames, ids, at, mask, labels = collate(batch, self.data, self.prompts.pad, encoded)
        if encoded:  # the frozen tower's encoder frames: computed once per utterance
            x = cached_frames(self.model, self.data, batch, self.cache)
            if self.args.mask_frames > 0:
                x = mask_spans(x, out_frames(frames, 4), self.args.mask_frames, self.rng)
        lr = self.learning_rate()
        for g in self.opt.param_groups:
            g["lr"] = lr * g["scale"]
        keep: list[torch.Tensor] = []
        guide = self.args.guide_weight > 0
        for blk in self.model.text.blocks:
            blk.keep = [] if guide else None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.args.bf16):
            logits = self.model(x, frames, ids, at, mask, encoded, keep)
            aux = self.ctc_head(keep[0])
        maps = [m for blk in self.model.text.blocks for m in (blk.keep or [])]
        for blk in self.model.text.blocks:
            blk.keep = None
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
        )
        rows = audio_rows(frames, self.cfg.stack)
        if self.args.ctc_weight > 0:
            targets, lengths = ctc_targets(batch)
            lp = F.log_softmax(aux.float(), dim=-1).transpose(0, 1)
            ctc = F.ctc_loss(lp, targets, rows, lengths, blank=self.cfg.vocab, zero_infinity=True)
            loss = loss + self.args.ctc_weight * ctc
        if maps:
            ga = guided_attention_loss(maps, batch, rows)
            loss = loss + self.args.guide_weight * ga
            self.last_guide = float(ga)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.state["step"] += 1
        self.state["batch"] += 1
        return float(loss), lr

    def housekeeping(self, loss: float, lr: float, size: int) -> bool:
        """Log, evaluate on dev and checkpoint when due; whether the budget is spent."""
        st, now = self.state, time.time()
        if st["step"] % 10 == 0:
            rec = {"step": st["step"], "epoch": st["epoch"], "loss": round(loss, 4), "lr": lr}
            if self.args.guide_weight > 0:
                rec["guide"] = round(self.last_guide, 4)
            self.write({**rec, "t": round(now - self.t_start, 1), "batch": size}, echo=True)
        if now - self.last_eval > 60 * self.args.eval_minutes:
            self.write({"step": st["step"], "dev": dev_report(self.model, self.prompts)}, echo=True)
            self.last_eval = time.time()
        if now - self.last_ckpt > self.args.ckpt_seconds:
            save(self.ckpt, self.model, self.opt, st, ctc_head=self.ctc_head.state_dict())
            self.last_ckpt = now
        return self.deadline is not None and now >= self.deadline

    def finish(self) -> None:
        save(self.ckpt, self.model, self.opt, self.state, ctc_head=self.ctc_head.state_dict())
        rep = {"step": self.state["step"], "dev": dev_report(self.model, self.prompts)}
        self.write({**rep, "stop": time.time()}, echo=True)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(11 if args.model == "target" else 22)
    run = Run(args)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    run.model.train()
    st = run.state
    while not stop["now"]:
        ex = epoch_examples(run.data, run.prompts, st["epoch"], run.cfg.stack, not args.tune_audio)
        bs = batches(ex, args.budget, np.random.default_rng(99 + st["epoch"]))
        while st["batch"] < len(bs) and not stop["now"]:
            b = bs[st["batch"]]
            loss, lr = run.step(b)
            if run.housekeeping(loss, lr, len(b)):
                stop["now"] = True
        if st["batch"] >= len(bs):
            st["epoch"] += 1
            st["batch"] = 0
    run.finish()


if __name__ == "__main__":
    main()
