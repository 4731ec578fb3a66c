"""Train one model (target, drafter or ctc) on the synthetic training set; resumable.

Usage: python training/train.py --model target|drafter|ctc [--threads 2] [--max-steps N]

Fixed seeds; a checkpoint (model, optimiser, step, data position, RNG) is written atomically
every --ckpt-seconds to training/work/<model>/ckpt.pt and a run restarts from it. The log
(training/work/<model>/log.jsonl) records losses, learning rate, wall time and periodic
greedy WER on the shipped dev windows; training/export.py copies it next to the models.
Features are the runtime's numpy log-mel (as2d_cli/models/features.py), precomputed by
training/make_corpus.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import random
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

from models import CTC, DRAFTER, SHARED_DRAFTER, TARGET, CtcModel, Dims, Seq2Seq, out_frames  # noqa: E402

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.corpus.text import normalize_text, wer  # noqa: E402
from as2d_cli.models.features import log_mel  # noqa: E402

WORK = ROOT / "training" / "work"
ASSETS = ROOT / "as2d_cli" / "assets" / "models"
SOT, EOT, PAD = 1, 2, 0
SEEDS = {"target": 11, "drafter": 22, "ctc": 33}


def load_tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(ASSETS / "tokenizer.json"))


def char_table() -> dict[str, int]:
    chars = json.loads((ASSETS / "ctc_chars.json").read_text())["chars"]
    return {c: i for i, c in enumerate(chars) if i > 0}


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """Which training sets, which labels, and how items are packed into batches."""

    batch_frames: int = 4000
    max_items: int = 48
    short_frames: int = 1000
    shards: int | None = None  # extra shards 1..N (training/make_corpus.py --shard N); None: all
    aux: str = "tokens"
    only: set[int] | None = None  # exactly these sets (0 = the base set)
    labels: str = "reference"
    concat: float = 0.0
    max_tokens: int = 240
    fresh_concat: bool = False
    error_weight: float = 1.0


def set_number(d: Path) -> int:
    """A training set's number: 0 for the base set, N for train_shards/N."""
    return 0 if d == WORK / "train" else int(d.name)


def training_dirs(shards: int | None, only: set[int] | None) -> list[Path]:
    """The base set plus extra shards 1..``shards`` (None: every shard present)."""
    extra = (
        sorted((WORK / "train_shards").glob("*"), key=lambda p: int(p.name))
        if (WORK / "train_shards").exists()
        else []
    )
    if shards is not None:
        extra = [d for d in extra if int(d.name) <= shards]
    dirs = [d for d in [WORK / "train", *extra] if (d / "index.json").exists()]
    if only is not None:
        dirs = [d for d in dirs if set_number(d) in only]
        if not dirs:
            raise SystemExit(f"none of the training sets {sorted(only)} exist under {WORK}")
    return dirs


def distilled_labels(dirs: list[Path], idx: list[dict]) -> dict[str, list[int] | None]:
    """The target's greedy transcripts of every item (training/distill.py)."""
    distilled: dict[str, list[int] | None] = {}
    for d in dirs:
        path = d / "target_tokens.json"
        if not path.exists():
            raise SystemExit(
                f"{path} is missing: run training/distill.py --set {set_number(d)} first"
            )
        distilled.update(json.loads(path.read_text())["items"])
    missing = [it["id"] for it in idx if it["id"] not in distilled]
    if missing:
        raise SystemExit(
            f"{len(missing)} utterances (first {missing[0]}) have no target transcript: "
            "finish training/distill.py on their set"
        )
    return distilled


def label_ids(kind: str, idx: list[dict], distilled: dict | None) -> list[list[int]]:
    """Each item's decoder (tokens) or CTC (characters) targets."""
    if kind == "ctc":
        table = char_table()
        if distilled is not None:
            tok = load_tokenizer()
            texts = [normalize_text(tok.decode(distilled[it["id"]])) for it in idx]
        else:
            texts = [it["text"] for it in idx]
        return [[table[c] for c in text if c in table] for text in texts]
    tok = load_tokenizer()
    if distilled is not None:
        return [list(distilled[it["id"]]) for it in idx]
    return [tok.encode(it["text"]).ids for it in idx]


def phone_targets(dirs: list[Path], raw: list[list[dict]], idx: list[dict]) -> list[list[int]]:
    """The encoder's auxiliary targets as espeak-ng phonemes of the text (--aux phones)."""
    import phonemes

    per_dir = [phonemes.transcriptions(d, items) for d, items in zip(dirs, raw)]
    table = phonemes.inventory(WORK / "phoneme_inventory.json", per_dir)
    by_id = {it["id"]: ph for items, group in zip(raw, per_dir) for it, ph in zip(items, group)}
    return [[table[c] for c in by_id[it["id"]]] for it in idx]


class Data:
    """Training items bucketed into padded batches of at most `batch_frames` mel frames."""

    def __init__(self, kind: str, options: DataOptions) -> None:
        dirs = training_dirs(options.shards, options.only)
        self.feats = [np.load(d / "features.npy", mmap_mode="r") for d in dirs]
        raw = [json.loads((d / "index.json").read_text())["items"] for d in dirs]
        idx = []
        for k, items in enumerate(raw):
            idx += [{**it, "shard": k} for it in items]
        self.shards = [str(d.relative_to(WORK)) for d in dirs]
        distilled = None
        if options.labels == "target":
            distilled = distilled_labels(dirs, idx)
            idx = [it for it in idx if distilled[it["id"]] is not None]  # no repetition loops
        if kind == "ctc":
            idx = [it for it in idx if it["language"] == "en"]
        self.labels = label_ids(kind, idx, distilled)
        self.aux = self.labels  # the encoder's auxiliary CTC targets
        # Per-token loss weights (--error-weight): the target's tokens outside the matching
        # blocks against the reference text's tokens (its own errors) count error_weight times.
        self.weights: list[list[float]] | None = None
        if options.error_weight != 1.0:
            if distilled is None or kind == "ctc":
                raise SystemExit("--error-weight needs --labels target and a decoder model")
            tok = load_tokenizer()
            self.weights = [
                error_weights(lab, tok.encode(it["text"]).ids, options.error_weight)
                for lab, it in zip(self.labels, idx)
            ]
        if kind != "ctc" and options.aux == "phones":
            self.aux = phone_targets(dirs, raw, idx)
        for it in idx:
            it["pieces"] = [(it["shard"], it["offset"], it["frames"])]
        self.items = idx
        self.base_items = len(idx)  # the single utterances; composites follow them
        self._concat = (kind, options.concat, options.max_tokens)
        self._limits = (options.batch_frames, options.max_items, options.short_frames)
        self.fresh_concat = options.fresh_concat and options.concat > 0
        self.built_for: int | None = None
        self._build(0)

    def _build(self, epoch: int) -> None:
        """Composites (seed 4242, or 4242 + epoch with ``fresh_concat``) and the batches."""
        kind, concat, max_tokens = self._concat
        batch_frames, max_items, short_frames = self._limits
        idx = self.items
        del idx[self.base_items :], self.labels[self.base_items :]
        if self.aux is not self.labels:
            del self.aux[self.base_items :]
        if self.weights is not None:
            del self.weights[self.base_items :]
        if concat > 0:
            self._add_composites(
                idx, kind, concat, max_tokens, 4242 + (epoch if self.fresh_concat else 0)
            )
        self.built_for = epoch
        order = sorted(range(len(idx)), key=lambda i: idx[i]["frames"])
        self.batches: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            longest = max([idx[j]["frames"] for j in cur] + [idx[i]["frames"]])
            if cur and (longest * (len(cur) + 1) > batch_frames or len(cur) >= max_items):
                self.batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            self.batches.append(cur)
        # Curriculum: the first epoch uses only batches of short utterances (cheap steps
        # while the model learns to listen); later epochs use everything.
        self.short = [
            b
            for b, ids in enumerate(self.batches)
            if max(idx[i]["frames"] for i in ids) <= short_frames
        ]

    def _add_composites(
        self, idx: list[dict], kind: str, fraction: float, max_tokens: int, seed: int
    ) -> None:
        """Packs a fraction of the short single utterances, each used once more, into long
        items of 6-20 s (same language and setting, features and labels joined end to end).

        80 % of every training set are single sentences of 1-9 s while evaluation windows
        run 4-20 s (about 100 tokens): the decoder rarely trained at late positions, and the
        target's words were right 61 % of the time in the first quarter of a test window but
        26 % in the last. The features are fixed-normalised log-mels, so joining two
        utterances' features equals (up to one boundary frame) the features of the joined audio.
        """
        rng = np.random.default_rng(seed)
        space = [char_table()[" "]] if kind == "ctc" else []
        groups: dict[tuple[str, str], list[int]] = {}
        for i, it in enumerate(idx):
            if it["frames"] <= 900:
                groups.setdefault((it["language"], it["setting"]), []).append(i)
        made = []
        for key in sorted(groups):
            members = [groups[key][j] for j in rng.permutation(len(groups[key]))]
            members = members[: int(round(fraction * len(members)))]
            cur: list[int] = []
            goal = int(rng.integers(600, 2001))
            for i in members:
                frames = sum(idx[j]["frames"] for j in cur) + idx[i]["frames"]
                tokens = sum(len(self.labels[j]) for j in cur) + len(self.labels[i])
                if cur and (frames > 2000 or tokens > max_tokens):
                    made.append(cur)
                    cur, goal = [], int(rng.integers(600, 2001))
                cur.append(i)
                if sum(idx[j]["frames"] for j in cur) >= goal:
                    made.append(cur)
                    cur, goal = [], int(rng.integers(600, 2001))
        for group in made:
            if len(group) < 2:
                continue
            first = idx[group[0]]
            idx.append(
                {
                    "id": "+".join(idx[j]["id"] for j in group),
                    "setting": first["setting"],
                    "language": first["language"],
                    "text": " ".join(idx[j]["text"] for j in group),
                    "frames": sum(idx[j]["frames"] for j in group),
                    "shard": first["shard"],
                    "pieces": [p for j in group for p in idx[j]["pieces"]],
                }
            )
            self.labels.append(
                [t for k, j in enumerate(group) for t in (space if k else []) + self.labels[j]]
            )
            if self.aux is not self.labels:
                self.aux.append([t for j in group for t in self.aux[j]])
            if self.weights is not None:  # decoder items only: no separator tokens
                self.weights.append([w for j in group for w in self.weights[j]])
        self.composites = sum(len(g) >= 2 for g in made)

    def epoch_order(self, epoch: int) -> list[int]:
        """The batch order of an epoch (with ``fresh_concat``: that epoch's own composites,
        so the same epoch always gets the same batches, also after a resume)."""
        if self.fresh_concat and self.built_for != epoch:
            self._build(epoch)
        rng = np.random.default_rng(1000 + epoch)
        if epoch == 0:
            return [self.short[i] for i in rng.permutation(len(self.short))]
        return list(rng.permutation(len(self.batches)))

    def batch(self, b: int, kind: str):
        ids = self.batches[b]
        frames = [self.items[i]["frames"] for i in ids]
        t = max(frames)
        mel = torch.zeros(len(ids), t, 80)
        for k, i in enumerate(ids):
            at = 0
            for shard, offset, n in self.items[i]["pieces"]:
                mel[k, at : at + n] = torch.from_numpy(
                    np.array(self.feats[shard][offset : offset + n], dtype=np.float32)
                )
                at += n
        lengths = torch.tensor(frames)
        labs = [self.labels[i] for i in ids]
        if kind == "ctc":
            return mel, lengths, labs
        aux = [self.aux[i] for i in ids]
        n = max(len(x) for x in labs) + 1
        inp = torch.full((len(ids), n), PAD, dtype=torch.long)
        tgt = torch.full((len(ids), n), -100, dtype=torch.long)
        for k, x in enumerate(labs):
            inp[k, : len(x) + 1] = torch.tensor([SOT] + x)
            tgt[k, : len(x) + 1] = torch.tensor(x + [EOT])
        wts = None
        if self.weights is not None:
            wts = torch.zeros(len(ids), n)
            for k, i in enumerate(ids):
                wts[k, : len(self.weights[i]) + 1] = torch.tensor(self.weights[i] + [1.0])
        return mel, lengths, labs, inp, tgt, aux, wts


def error_weights(labels: list[int], reference: list[int], weight: float) -> list[float]:
    """1.0 per label token, ``weight`` where the label (the target's transcript) is outside
    every difflib matching block against the reference text's tokens: where the target errs.
    The drafter departs from the target mostly there (benchmarks/model_quality.py)."""
    w = [weight] * len(labels)
    sm = difflib.SequenceMatcher(a=labels, b=reference, autojunk=False)
    for i, _, n in sm.get_matching_blocks():
        w[i : i + n] = [1.0] * n
    return w


def spec_augment(mel: torch.Tensor, lengths: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """SpecAugment (Park et al., 2019), in place: two frequency masks of up to 12 mel
    bins and one time mask of up to 15 frames per 1.5 s of audio, filled with the mean
    feature value. Against memorising the small synthetic training set."""
    fill = -0.09  # the training features' mean
    b, _, n_mels = mel.shape
    for i in range(b):
        t = int(lengths[i])
        for _ in range(2):
            w = int(torch.randint(0, 13, (1,), generator=gen))
            f0 = int(torch.randint(0, n_mels - w + 1, (1,), generator=gen))
            mel[i, :t, f0 : f0 + w] = fill
        for _ in range(max(1, t // 150)):
            w = int(torch.randint(0, 16, (1,), generator=gen))
            if t > w:
                s0 = int(torch.randint(0, t - w, (1,), generator=gen))
                mel[i, s0 : s0 + w] = fill
    return mel


def ctc_loss(
    logits: torch.Tensor, mel_lengths: torch.Tensor, labs: list[list[int]], stride: int
) -> torch.Tensor:
    lp = F.log_softmax(logits, dim=-1).transpose(0, 1)  # (S,B,C)
    in_len = out_frames(mel_lengths, stride)
    flat = torch.tensor([t for x in labs for t in x], dtype=torch.long)
    tl = torch.tensor([len(x) for x in labs])
    return F.ctc_loss(lp, flat, in_len, tl, blank=0, reduction="mean", zero_infinity=True)


def ctc_infeasible(items: list[dict], labels: list[list[int]], stride: int) -> float:
    """Fraction of utterances whose CTC target cannot be aligned at all (fewer encoder
    frames than labels plus the blanks between repeats): zero_infinity silently drops them."""
    bad = 0
    for it, lab in zip(items, labels):
        need = len(lab) + sum(1 for a, b in zip(lab, lab[1:]) if a == b)
        bad += int(out_frames(torch.tensor(it["frames"]), stride)) < need
    return bad / max(1, len(items))


def guided_attention_loss(
    model: Seq2Seq, mel_lengths: torch.Tensor, labs: list[list[int]], g: float = 0.2
) -> torch.Tensor:
    """Penalise cross-attention far from the diagonal token n/N ≈ frame t/T (Tachibana et
    al., 2017): speech is roughly monotonic and evenly paced, and the decoder otherwise
    takes thousands of steps to find where it is in long windows."""
    maps = [w for layer in model.decoder.layers for w in (layer.keep or [])]
    if not maps:
        return torch.tensor(0.0)
    b, _, n, s = maps[0].shape
    t_len = out_frames(mel_lengths, model.encoder.stride).float()
    n_len = torch.tensor([len(x) + 1 for x in labs], dtype=torch.float32)
    tn = torch.arange(n, dtype=torch.float32)[None, :, None] / n_len[:, None, None]
    ts = torch.arange(s, dtype=torch.float32)[None, None, :] / t_len[:, None, None]
    penalty = 1.0 - torch.exp(-((tn - ts) ** 2) / (2 * g * g))  # (B,N,S)
    rows = (torch.arange(n)[None, :] < n_len[:, None]).float()  # (B,N) real token rows
    total = sum((w * penalty[:, None]).sum(-1).mean(1) for w in maps)  # (B,N)
    return (total * rows).sum() / (rows.sum() * len(maps))


@torch.no_grad()
def greedy(model: Seq2Seq, mel: torch.Tensor, limit: int = 150) -> list[int]:
    enc, _ = model.encoder(mel[None])
    ck, cv = model.decoder.cross_kv(enc)
    pk, pv = model.decoder.empty_past(1)
    tok, out = SOT, []
    for _ in range(min(limit, model.dm.max_tokens - 1)):
        logits, pk, pv = model.decoder(torch.tensor([[tok]]), pk, pv, ck, cv)
        tok = int(logits[0, -1].argmax())
        if tok == EOT:
            break
        out.append(tok)
    return out


@torch.no_grad()
def ctc_greedy(model: CtcModel, mel: torch.Tensor, chars: list[str]) -> str:
    ids = model(mel[None])[0].argmax(-1).tolist()
    out, prev = [], 0
    for i in ids:
        if i != prev and i != 0:
            out.append(chars[i])
        prev = i
    return " ".join("".join(out).split())


def dev_wer(model, kind: str, windows, feats) -> float:
    model.eval()
    refs, hyps = [], []
    if kind == "ctc":
        chars = json.loads((ASSETS / "ctc_chars.json").read_text())["chars"]
        for w, f in zip(windows, feats):
            if w.language == "en":
                refs.append(w.text)
                hyps.append(ctc_greedy(model, f, chars))
    else:
        tok = load_tokenizer()
        for w, f in zip(windows, feats):
            refs.append(w.text)
            hyps.append(tok.decode(greedy(model, f)))
    model.train()
    return wer(refs, hyps)


def init_shared(model: Seq2Seq, target_ckpt: Path, drafter_ckpt: Path | None) -> None:
    """A shared-encoder drafter's starting weights: the target checkpoint's encoder (and CTC
    head, unused) exactly; the decoder from ``drafter_ckpt`` wherever the shapes match (the
    cross-attention K/V projections start fresh when the encoder's width changed)."""
    own = model.state_dict()
    tgt = torch.load(target_ckpt, weights_only=False)["model"]
    enc = {k: v for k, v in tgt.items() if k.startswith(("encoder.", "ctc_head."))}
    if any(own[k].shape != v.shape for k, v in enc.items()) or len(enc) != sum(
        k.startswith(("encoder.", "ctc_head.")) for k in own
    ):
        raise SystemExit(
            f"{target_ckpt}: its encoder does not have the shared drafter's encoder shape"
        )
    dec = {}
    if drafter_ckpt is not None:
        src = torch.load(drafter_ckpt, weights_only=False)["model"]
        dec = {
            k: v
            for k, v in src.items()
            if k.startswith("decoder.") and k in own and own[k].shape == v.shape
        }
    # Exactly the target's weights: export.py then ships no encoder for the drafter, which
    # reads the target's encoder states at run time (models.json ``encoder_from``).
    model.load_state_dict({**own, **enc, **dec})
    # Decoder layers the warm start lacks (a deeper drafter, --dec-layers) start as the
    # identity: zero output projections, so the warm-started decoder's predictions are kept.
    loaded = {int(k.split(".")[2]) for k in dec if k.startswith("decoder.layers.")}
    added = [i for i in range(model.dm.dec_layers) if loaded and i not in loaded]
    with torch.no_grad():
        for i in added:
            layer = model.decoder.layers[i]
            for lin in (layer.o, layer.co, layer.mlp[2]):
                lin.weight.zero_()
                lin.bias.zero_()
    print(
        f"shared encoder from {target_ckpt} ({len(enc)} tensors); decoder: {len(dec)} tensors from "
        f"{drafter_ckpt}, the rest fresh"
        + (f"; layers {added} added as the identity" if added else ""),
        flush=True,
    )


def add_run_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", choices=["target", "drafter", "ctc"], required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--batch-frames", type=int, default=4000)
    ap.add_argument("--max-items", type=int, default=48)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=300)


def add_loss_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--ctc-weight", type=float, default=0.3)
    ap.add_argument(
        "--aux",
        choices=["tokens", "phones"],
        default="tokens",
        help="the encoder's auxiliary CTC targets: the BPE tokens, or espeak-ng's phonemes of the text "
        "(training/phonemes.py; the same head, ids from 4)",
    )
    ap.add_argument(
        "--guide-weight",
        type=float,
        default=0.0,
        help="guided cross-attention loss weight (0: off)",
    )
    ap.add_argument("--specaug", action="store_true", help="SpecAugment the training features")
    ap.add_argument(
        "--dropout", type=float, default=0.0, help="residual-branch dropout while training"
    )
    ap.add_argument(
        "--aux-head-steps",
        type=int,
        default=0,
        help="train the auxiliary CTC head alone (encoder detached) for this many steps "
        "after the start step: a rebuilt checkpoint (from_onnx.py) has a fresh head whose "
        "first gradients would otherwise disturb the trained encoder",
    )


def add_data_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--shards", type=int, default=None, help="extra corpus shards to use (default: all present)"
    )
    ap.add_argument(
        "--only-sets",
        default=None,
        help="comma-separated training sets to use, exactly (0 = the base set, N = shard N)",
    )
    ap.add_argument(
        "--labels",
        choices=["reference", "target"],
        default="reference",
        help="decoder/CTC targets: the reference text, or the bundled target's greedy transcripts "
        "(training/distill.py; sequence-level distillation for the drafter and the CTC source; "
        "the auxiliary phoneme targets stay the reference's)",
    )
    ap.add_argument(
        "--concat",
        type=float,
        default=0.0,
        help="also pack this fraction of the short single utterances into long 6-20 s items "
        "(same language and setting, joined end to end): evaluation windows are long",
    )
    ap.add_argument(
        "--fresh-concat",
        action="store_true",
        help="with --concat: new composites every epoch (another grouping of the same "
        "utterances), not one fixed set",
    )


def add_model_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 autocast for the forward pass (weights, optimiser and losses stay float32); "
        "about twice the steps per second on CPUs with AVX512-BF16 or AMX",
    )
    ap.add_argument(
        "--shared-encoder",
        type=Path,
        default=None,
        metavar="TARGET_CKPT",
        help="drafter only, on a fresh start: the drafter's decoder on a frozen copy of this target "
        "checkpoint's encoder (models.SHARED_DRAFTER); its self-attention, MLP and embedding "
        "start from --init-decoder, its cross-attention K/V projections fresh",
    )
    ap.add_argument(
        "--init-decoder",
        type=Path,
        default=None,
        metavar="DRAFTER_CKPT",
        help="with --shared-encoder: the checkpoint whose decoder starts the new one",
    )
    ap.add_argument(
        "--dec-layers",
        type=int,
        default=None,
        help="with --shared-encoder, a new run: decoder layers (default: models.SHARED_DRAFTER's); "
        "layers beyond --init-decoder's start as the identity",
    )
    ap.add_argument(
        "--teacher",
        type=Path,
        default=None,
        metavar="TARGET_CKPT",
        help="also match this target checkpoint's next-token distributions (KL, weight --kd-weight) "
        "at every teacher-forced position: word-level distillation beside --labels target",
    )
    ap.add_argument(
        "--kd-weight",
        type=float,
        default=0.5,
        help="with --teacher: the KL term's share of the loss",
    )
    ap.add_argument(
        "--error-weight",
        type=float,
        default=1.0,
        help="with --labels target: the token loss counts this many times where the target's "
        "transcript departs from the reference text (its own errors, which the drafter should "
        "repeat to agree with it)",
    )


def add_schedule_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--out", default=None, help="work folder under training/work (default: the model's name)"
    )
    ap.add_argument("--ckpt-seconds", type=float, default=180.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument(
        "--anneal-from",
        type=int,
        default=None,
        help="with --anneal-steps: the step-based form of --deadline (reproduces a timed run "
        "from its log): re-warm to --lr at this step, decay linearly to 0 over --anneal-steps",
    )
    ap.add_argument("--anneal-steps", type=int, default=None)
    ap.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="unix time: re-warm to --lr over --warmup steps from the resumed step, then decay "
        "linearly in wall time to 0 at the deadline and stop (a time-budgeted anneal)",
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    for add in (
        add_run_options,
        add_loss_options,
        add_data_options,
        add_model_options,
        add_schedule_options,
    ):
        add(ap)
    return ap.parse_args()


def data_options(args: argparse.Namespace) -> DataOptions:
    return DataOptions(
        batch_frames=args.batch_frames,
        max_items=args.max_items,
        shards=args.shards,
        aux=args.aux,
        only={int(x) for x in args.only_sets.split(",")} if args.only_sets else None,
        labels=args.labels,
        concat=args.concat,
        fresh_concat=args.fresh_concat,
        error_weight=args.error_weight,
    )


def start_dims(args: argparse.Namespace, ckpt: Path) -> tuple[Dims, bool]:
    """The model's dimensions and whether its encoder is frozen: a resumed run keeps those it
    was started with."""
    dims: Dims = {"target": TARGET, "drafter": DRAFTER, "ctc": CTC}[args.model]
    frozen = args.shared_encoder is not None
    if ckpt.exists():
        head = torch.load(ckpt, weights_only=False)
        dims, frozen = Dims(**head["dims"]), bool(head.get("frozen_encoder", False))
        del head
    elif frozen:
        dims = dataclasses.replace(
            SHARED_DRAFTER, dec_layers=args.dec_layers or SHARED_DRAFTER.dec_layers
        )
    return dims, frozen


def build_model(args: argparse.Namespace, dims: Dims, frozen: bool, ckpt: Path) -> torch.nn.Module:
    if args.model == "ctc":
        return CtcModel(dims, len(char_table()) + 1)
    dims.vocab = load_tokenizer().get_vocab_size()
    model = Seq2Seq(dims)
    if frozen:
        model.freeze_encoder()
        if not ckpt.exists():
            init_shared(model, args.shared_encoder, args.init_decoder)
    return model


def load_teacher(args: argparse.Namespace) -> Seq2Seq | None:
    if args.teacher is None:
        return None
    if args.model == "ctc":
        raise SystemExit("--teacher is for the encoder-decoders")
    return Seq2Seq.from_saved(torch.load(args.teacher, weights_only=False)).requires_grad_(False)


@dataclasses.dataclass
class Run:
    """One training run: its options, data, model, optimiser and the resumable state that the
    checkpoint keeps (step, epoch, position in the epoch, wall time, the anneal)."""

    args: argparse.Namespace
    out: Path
    seed: int
    dims: Dims
    frozen: bool
    data: Data
    model: torch.nn.Module
    teacher: Seq2Seq | None
    opt: torch.optim.Optimizer
    state: dict

    @property
    def kind(self) -> str:
        return self.args.model

    @property
    def ckpt(self) -> Path:
        return self.out / "ckpt.pt"

    def save(self) -> None:
        """Writes the checkpoint atomically."""
        tmp = self.out / "ckpt.tmp"
        torch.save(
            {
                "model": self.model.state_dict(),
                "opt": self.opt.state_dict(),
                "state": self.state,
                "dims": self.dims.to_dict(),
                "frozen_encoder": self.frozen,
                "torch_rng": torch.get_rng_state(),
            },
            tmp,
        )
        os.replace(tmp, self.ckpt)


def setup(args: argparse.Namespace) -> Run:
    """Seeds, data, model, teacher and optimiser, restored from the checkpoint if there is one."""
    import models as model_defs

    model_defs.DROPOUT = args.dropout
    torch.set_num_threads(args.threads)
    if args.shared_encoder is not None and args.model != "drafter":
        raise SystemExit("--shared-encoder is for --model drafter")
    if args.dec_layers is not None and args.shared_encoder is None:
        raise SystemExit("--dec-layers is for a new --shared-encoder drafter")
    out = WORK / (args.out or args.model)
    out.mkdir(parents=True, exist_ok=True)
    seed = SEEDS[args.model]
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    ckpt = out / "ckpt.pt"
    dims, frozen = start_dims(args, ckpt)
    data = Data(args.model, data_options(args))
    model = build_model(args, dims, frozen, ckpt)
    teacher = load_teacher(args)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=args.lr,
        betas=(0.9, 0.98),
        weight_decay=0.01,
    )
    state = {"step": 0, "epoch": 0, "pos": 0, "wall": 0.0}
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        torch.set_rng_state(saved["torch_rng"])
        print(f"resumed at step {state['step']}", flush=True)
    return Run(args, out, seed, dims, frozen, data, model, teacher, opt, state)


def start_record(run: Run) -> dict:
    """The log's record of a (re)start: what is trained, on what, with which options."""
    data = run.data
    return {
        "event": "start",
        "step": run.state["step"],
        "params": sum(p.numel() for p in run.model.parameters()),
        "dims": run.dims.to_dict(),
        "shards": data.shards,
        "items": len(data.items),
        "batches_per_epoch": len(data.batches),
        "short_batches": len(data.short),
        "composites": getattr(data, "composites", 0),
        "ctc_infeasible": round(ctc_infeasible(data.items, data.aux, run.dims.stride), 4),
        "frozen_encoder": run.frozen,
        "args": vars(run.args),
    }


def resume_order(run: Run) -> list[int]:
    """The batch order to continue with. Shards were added (or composites changed): start a
    fresh epoch over all. Fresh composites vary in number by epoch, so those runs compare the
    single utterances."""
    data, state = run.data, run.state
    key, count = (
        ("base_items", data.base_items) if data.fresh_concat else ("items", len(data.items))
    )
    seen = state.get(key, -1 if "items" in state else count)  # -1: the last run counted otherwise
    if seen != count:
        state["epoch"] += 1
        state["pos"] = 0
    state[key] = count
    return data.epoch_order(state["epoch"])


def start_anneal(state: dict, deadline: float, start_step: int, start_time: float) -> None:
    """--deadline: the anneal's origin, kept in the checkpoint state so a resume continues it."""
    old = state.get("anneal")
    if old is not None and old["deadline"] <= start_time:  # that anneal ended: a new one starts
        state.setdefault("anneals_done", []).append(old)
        state.pop("anneal")
    state.setdefault(
        "anneal", {"from_step": start_step, "from_time": start_time, "deadline": deadline}
    )
    state["anneal"]["deadline"] = (
        deadline  # a later command may move the deadline; the origin stays
    )


def learning_rate(args: argparse.Namespace, state: dict, step: int) -> float | None:
    """The step's learning rate; None when the anneal has ended (the run stops)."""
    if args.anneal_from is not None and step > args.anneal_from:
        done = step - args.anneal_from
        if done > (args.anneal_steps or 0):
            return None
        return args.lr * min(1.0, done / args.warmup, 1.0 - done / args.anneal_steps)
    if args.deadline is None:
        return args.lr * min(step / args.warmup, (args.warmup / step) ** 0.5)
    an = state["anneal"]
    left = (an["deadline"] - time.time()) / max(1.0, an["deadline"] - an["from_time"])
    if left <= 0:
        return None
    return args.lr * min(1.0, (step - an["from_step"]) / args.warmup, left)


def distill_term(
    run: Run, batch: tuple, logits: torch.Tensor, ce: torch.Tensor, autocast, acc: dict
) -> torch.Tensor:
    """--teacher: the cross entropy mixed with the KL to the teacher's next-token distributions."""
    mel, lengths, _, inp, tgt, _, _ = batch
    teacher, model = run.teacher, run.model
    assert teacher is not None
    with torch.no_grad(), autocast:
        if run.frozen:  # the drafter's frozen encoder is the teacher's: reuse its states
            enc, enc_mask = model.last_enc
            ck, cv = teacher.decoder.cross_kv(enc)
            pk, pv = teacher.decoder.empty_past(enc.shape[0])
            t_logits = teacher.decoder(inp, pk, pv, ck, cv, enc_mask)[0]
        else:
            t_logits, _ = teacher(mel, lengths, inp)
    valid = (tgt != -100).float()
    t_lp = F.log_softmax(t_logits.float(), -1)
    kl = (t_lp.exp() * (t_lp - F.log_softmax(logits, -1))).sum(-1)
    kd = (kl * valid).sum() / valid.sum()
    acc["kd"] = acc.get("kd", 0.0) + kd.item()
    return (1.0 - run.args.kd_weight) * ce + run.args.kd_weight * kd


def seq2seq_losses(
    run: Run, batch: tuple, head_only_aux: bool, autocast, acc: dict
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An encoder-decoder's loss, cross entropy and auxiliary CTC loss on one batch."""
    args, model = run.args, run.model
    mel, lengths, labs, inp, tgt, aux, wts = batch
    guide = args.guide_weight > 0
    for layer in model.decoder.layers:
        layer.keep = [] if guide else None
    with autocast:
        logits, ctc_logits = model(mel, lengths, inp, head_only_aux=head_only_aux)
    logits, ctc_logits = logits.float(), ctc_logits.float()
    ce = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        tgt.reshape(-1),
        ignore_index=-100,
        reduction="mean" if wts is None else "none",
    )
    if wts is not None:  # a weighted mean: the loss keeps its scale
        ce = (ce * wts.reshape(-1)).sum() / wts.sum()
    ce_term = ce if run.teacher is None else distill_term(run, batch, logits, ce, autocast, acc)
    cl = torch.tensor(0.0) if run.frozen else ctc_loss(ctc_logits, lengths, aux, run.dims.stride)
    loss = ce_term + args.ctc_weight * cl
    if guide:
        ga = guided_attention_loss(model, lengths, labs)
        loss = loss + args.guide_weight * ga
        acc["guide"] = acc.get("guide", 0.0) + ga.item()
        for layer in model.decoder.layers:
            layer.keep = None
    return loss, ce, cl


def batch_losses(
    run: Run, batch: tuple, head_only_aux: bool, autocast, acc: dict
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss to minimise, its cross entropy and its CTC loss on one batch."""
    if run.kind != "ctc":
        return seq2seq_losses(run, batch, head_only_aux, autocast, acc)
    mel, lengths, labs = batch
    with autocast:
        char_logits = run.model(mel, lengths)
    loss = ctc_loss(char_logits.float(), lengths, labs, run.dims.stride)
    return loss, torch.tensor(0.0), loss


def write_record(log, rec: dict, echo: bool = True, **dumps) -> None:
    log.write(json.dumps(rec, **dumps) + "\n")
    log.flush()
    if echo:
        print(rec, flush=True)


def train(run: Run, log, dev: list, dev_feats: list[torch.Tensor]) -> str:
    """Steps until --max-steps, the anneal's end or SIGTERM (which finishes the current step);
    checkpoints every --ckpt-seconds. Returns why it stopped."""
    args, state, data, opt, model = run.args, run.state, run.data, run.opt, run.model
    stop = {"now": False}

    def on_term(signum, frame) -> None:  # finish the current step, checkpoint, exit
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    model.train()
    t_last_ckpt = time.time()
    t0 = time.time() - state["wall"]
    acc = {"loss": 0.0, "ce": 0.0, "ctc": 0.0, "n": 0}
    order = resume_order(run)
    start_step, start_time = state["step"], time.time()
    # Kept in the checkpoint so a resumed run does not restart the head-only phase.
    aux_head_until = state.setdefault("aux_head_until", start_step + args.aux_head_steps)
    if args.deadline is not None:
        start_anneal(state, args.deadline, start_step, start_time)
    # The losses (and the guided-attention penalty, which promotes the kept maps) run in float32.
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)
    while state["step"] < args.max_steps and not stop["now"]:
        if state["pos"] >= len(order):
            state["epoch"] += 1
            state["pos"] = 0
            order = data.epoch_order(state["epoch"])
        step = state["step"] + 1
        lr = learning_rate(args, state, step)
        if lr is None:
            break
        for g in opt.param_groups:
            g["lr"] = lr
        aug = torch.Generator().manual_seed(run.seed * 1_000_003 + step)  # reproducible per step
        batch = data.batch(order[state["pos"]], run.kind)
        if args.specaug:
            spec_augment(batch[0], batch[1], aug)  # in place: (mel, lengths, ...)
        loss, ce, cl = batch_losses(run, batch, step <= aux_head_until, autocast, acc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] = step
        state["pos"] += 1
        state["wall"] = time.time() - t0
        acc["loss"] += loss.item()
        acc["ce"] += ce.item()
        acc["ctc"] += cl.item()
        acc["n"] += 1
        if step % 25 == 0:
            rec = {"step": step, "epoch": state["epoch"], "lr": round(lr, 6)}
            rec["wall_s"] = round(state["wall"], 1)
            keys = [k for k in ("loss", "ce", "ctc", "guide", "kd") if k in acc]
            rec.update({k: round(acc[k] / acc["n"], 4) for k in keys})
            write_record(log, rec)
            acc = {"loss": 0.0, "ce": 0.0, "ctc": 0.0, "n": 0}
        if step % args.eval_every == 0:
            w = dev_wer(model, run.kind, dev, dev_feats)
            rec = {"step": step, "dev_wer_8": round(w, 4), "wall_s": round(time.time() - t0, 1)}
            write_record(log, rec)
        if time.time() - t_last_ckpt > args.ckpt_seconds:
            run.save()
            t_last_ckpt = time.time()
    if stop["now"]:
        return "signal"
    return "max_steps" if state["step"] >= args.max_steps else "anneal end"


def main() -> None:
    run = setup(parse_args())
    dev = load_corpus().split("dev")
    dev = dev[::6][:8]
    dev_feats = [torch.from_numpy(log_mel(w.load_audio())) for w in dev]
    log = open(run.out / "log.jsonl", "a")
    write_record(log, start_record(run), echo=False, default=str)
    reason = train(run, log, dev, dev_feats)
    run.save()
    state = run.state
    stop = {"event": "stop", "step": state["step"], "wall_s": round(state["wall"], 1)}
    stop["reason"] = reason
    stop["anneal"] = state.get("anneal")
    stop["anneals_done"] = state.get("anneals_done", [])
    write_record(log, stop, echo=False)


if __name__ == "__main__":
    main()
