"""Adversarial scenarios for the engine's exactness properties (shared by tests)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from as2d_cli.engine import CandidateBuffer, Draft, Op
from as2d_cli.engine.reference import FunctionTarget, greedy_reference

EOS = 0
VOCAB = 9  # small, so repeated tokens and accidental matches are common

SOURCE_MODES = ("exact", "edits", "random", "repeat", "shift", "eos_mid", "empty", "long")
DRAFT_MODES = ("oracle", "edits", "random", "repeat", "eos")


def make_decide(seed: int, path: Sequence[int]):
    """A greedy function: follows ``path`` while the prefix is on it, else a hash."""
    path = tuple(path)

    def decide(prefix: tuple[int, ...]) -> int:
        n = len(prefix)
        if n < len(path) and prefix == path[:n]:
            return path[n]
        return hash((seed, prefix)) % VOCAB

    return decide


def edit(tokens: Sequence[int], rng: random.Random, rate: float) -> list[int]:
    """Insertions, deletions and substitutions at ``rate`` per token."""
    out: list[int] = []
    for t in tokens:
        r = rng.random()
        if r < rate / 3:
            continue  # deletion
        if r < 2 * rate / 3:
            out.append(rng.randrange(VOCAB))  # substitution
            continue
        out.append(t)
        if r < rate:
            out.append(rng.randrange(VOCAB))  # insertion
    return out


def source_tokens(mode: str, ref: Sequence[int], rng: random.Random) -> list[int]:
    if mode == "exact":
        return list(ref)
    if mode == "edits":
        return edit(ref, rng, rng.choice((0.05, 0.2, 0.5)))
    if mode == "random":
        return [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 2 * len(ref) + 2))]
    if mode == "repeat":
        return [rng.randrange(VOCAB)] * rng.randrange(1, 2 * len(ref) + 2)
    if mode == "shift":
        k = rng.randrange(1, 5)
        return (
            list(ref[k:])
            if rng.random() < 0.5
            else [rng.randrange(VOCAB) for _ in range(k)] + list(ref)
        )
    if mode == "eos_mid":
        out = edit(ref, rng, 0.1)
        out.insert(rng.randrange(len(out) + 1), EOS)
        return out
    if mode == "empty":
        return []
    # "long": far more candidates than output
    return list(ref) + [rng.randrange(VOCAB) for _ in range(3 * len(ref) + 5)]


def publish_all(
    buf: CandidateBuffer, tokens: list[int], rng: random.Random, with_conf: bool
) -> None:
    """Publish in random batches (empty ones too) at random, sometimes very late, times."""
    t = 0
    i = 0
    while i < len(tokens) or rng.random() < 0.2:
        size = rng.choice((0, 1, 2, 3, 8, 8, 8, 13))
        batch = tokens[i : i + size]
        i += len(batch)
        t += rng.choice((0, 1, 5, 20, 50, 10_000))
        conf = [rng.random() for _ in batch] if with_conf else None
        buf.publish(batch, t, conf)
        if i >= len(tokens) and not batch:
            break
    buf.close()


class AdversarialDrafter:
    """A prefix-conditioned drafter whose proposals depend only on the prefix."""

    def __init__(self, mode: str, ref: Sequence[int], seed: int, with_conf: bool) -> None:
        self.mode, self.ref, self.seed, self.with_conf = mode, list(ref), seed, with_conf
        self.calls = 0

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Draft:
        self.calls += 1
        rng = random.Random(hash((self.seed, tuple(prefix))))
        n = len(prefix)
        on_path = list(prefix) == self.ref[:n]
        cont = self.ref[n:] if on_path else []
        if self.mode == "oracle":
            toks = cont + [rng.randrange(VOCAB) for _ in range(count)]
        elif self.mode == "edits":
            toks = edit(cont, rng, 0.3) + [rng.randrange(VOCAB) for _ in range(count)]
        elif self.mode == "random":
            toks = [rng.randrange(VOCAB) for _ in range(count)]
        elif self.mode == "repeat":
            toks = [prefix[-1]] * count
        else:  # "eos": the drafter emits EOS early, then keeps drafting past it
            toks = (
                cont[: rng.randrange(0, 4)] + [EOS] + [rng.randrange(VOCAB) for _ in range(count)]
            )
        toks = toks[:count]
        conf = [rng.random() for _ in toks] if self.with_conf else None
        if stop_below is not None:
            cut = len(toks)
            for i, tok in enumerate(toks):
                if (conf is not None and conf[i] < stop_below) or tok == EOS:
                    cut = i + 1
                    break
            toks = toks[:cut]
            conf = None if conf is None else conf[:cut]
        return Draft(tuple(toks), None if conf is None else tuple(conf))


def price(op: Op, now: int) -> int:
    """A simple virtual cost model (ns) so rounds interleave with publication times."""
    base = {
        "target_step": 10,
        "verify": 10,
        "draft": 3,
        "paired": 4,
        "refresh": 1,
        "loop": 1,
        "align": 0,
    }
    return base[op.kind] + op.width + op.count + op.catch_up


@dataclass
class Scenario:
    decide: object
    ref: list[int]
    max_tokens: int
    rng: random.Random
    seed: int


def make_scenario(seed: int, length: int, cap_slack: int, eos_end: bool) -> Scenario:
    rng = random.Random(seed)
    path = [rng.randrange(1, VOCAB) for _ in range(length)]
    if eos_end:
        path.append(EOS)
    decide = make_decide(seed, path)
    max_tokens = max(1, length + 1 - cap_slack)
    ref = greedy_reference(decide, path[0], EOS, max_tokens)
    return Scenario(decide, ref, max_tokens, rng, seed)


def new_target(sc: Scenario) -> FunctionTarget:
    return FunctionTarget(sc.decide)
