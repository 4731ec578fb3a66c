"""Pooled throughput: TPS = Σ tokens / Σ time over the windows pooled (A.3, D.1.3).

Tokens are committed tokens (first token and EOS included; docs/engine.md, "Clocks and charged work"); time is
post-prefill decode time in seconds. Impossible figures — negative or non-finite times,
negative tokens, tokens per zero time — raise :class:`ImpossibleFigure`, never a number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from as2d_cli.errors import UserError

ALL = "all"


class ImpossibleFigure(UserError):
    """A statistic asked of data that cannot produce it (e.g. tokens/s from zero time)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One window's result under one configuration."""

    window: str
    dataset: str
    tokens: int
    time_s: float

    def __post_init__(self) -> None:
        if type(self.tokens) is not int and not float(self.tokens).is_integer():
            raise ImpossibleFigure(
                f"window {self.window}: token count {self.tokens!r} is not an integer"
            )
        if self.tokens < 0:
            raise ImpossibleFigure(
                f"window {self.window}: negative token count {self.tokens}; the result is corrupt — rerun it"
            )
        if not math.isfinite(self.time_s) or self.time_s < 0:
            raise ImpossibleFigure(
                f"window {self.window}: decode time {self.time_s!r} s is negative or not finite; the result is corrupt — rerun it"
            )

    @classmethod
    def from_ns(cls, window: str, dataset: str, tokens: int, time_ns: int) -> Outcome:
        return cls(window, dataset, int(tokens), time_ns / 1e9)

    @property
    def tps(self) -> float:
        if self.time_s <= 0:
            raise ImpossibleFigure(
                f"window {self.window}: {self.tokens} tokens in zero decode time has no tokens/s "
                f"(only the free first token?); pool it with other windows instead of rating it alone"
            )
        return self.tokens / self.time_s


def pooled_tps(outcomes: Iterable[Outcome], what: str = "these windows") -> float:
    """Σ tokens / Σ time."""
    tokens = 0
    time = 0.0
    n = 0
    for o in outcomes:
        tokens += o.tokens
        time += o.time_s
        n += 1
    if n == 0:
        raise ImpossibleFigure(f"no windows to pool for {what}; check the split/dataset filter")
    if time <= 0:
        raise ImpossibleFigure(
            f"{tokens} tokens over zero total decode time for {what}: tokens/s is undefined"
        )
    return tokens / time


def tps_by_dataset(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Pooled TPS per dataset (in first-seen order) and over all windows (key ``all``)."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.dataset, []).append(o)
    out = {d: pooled_tps(g, f"dataset {d}") for d, g in groups.items()}
    out[ALL] = pooled_tps(outcomes, "all windows")
    return out


def window_tps(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Per-window TPS keyed by window id (ids must be unique)."""
    out: dict[str, float] = {}
    for o in outcomes:
        if o.window in out:
            raise ImpossibleFigure(
                f"window {o.window} appears twice in one configuration's results; deduplicate them"
            )
        out[o.window] = o.tps
    return out


def by_window(outcomes: Sequence[Outcome], what: str) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for o in outcomes:
        if o.window in out:
            raise ImpossibleFigure(
                f"window {o.window} appears twice in {what}; deduplicate the results"
            )
        out[o.window] = o
    return out


def same_windows(sets: Mapping[str, Mapping[str, Outcome]]) -> list[str]:
    """The common window ids (first set's order); refuses sets over different windows."""
    names = list(sets)
    if not names:
        raise ImpossibleFigure("no configurations to compare")
    ref = sets[names[0]]
    for name in names[1:]:
        other = sets[name]
        if other.keys() != ref.keys():
            missing = sorted(ref.keys() - other.keys()) or sorted(other.keys() - ref.keys())
            raise ImpossibleFigure(
                f"configurations {names[0]!r} and {name!r} cover different windows (e.g. {missing[0]}); "
                f"compare results over the same windows"
            )
    return list(ref)
