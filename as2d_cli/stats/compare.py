"""Comparisons across configurations: SD's K-mean summary (D.1.3), the per-window
hindsight oracle and its gap (D.4.3), slowdown counts (D.4.5) and CDF data; and what a
comparison of two runs reports beside its tests: Holm's correction across them, the
paired rank-biserial effect size, and the smallest p-value a paired test of n windows can
give (below which it is meaningless)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from as2d_cli.stats.pooled import (
    ALL,
    ImpossibleFigure,
    Outcome,
    by_window,
    pooled_tps,
    same_windows,
    tps_by_dataset,
)

SD_WIDTHS = (5, 6, 7, 8)
TIE = 1e-9


def _k_sets(
    by_k: Mapping[int, Sequence[Outcome]], ks: Sequence[int]
) -> dict[int, Sequence[Outcome]]:
    missing = [k for k in ks if k not in by_k]
    if missing:
        raise ImpossibleFigure(
            f"standard SD results lack K={missing[0]}; replay every K in {tuple(ks)} before summarizing"
        )
    return {k: by_k[k] for k in ks}


def sd_summary(
    by_k: Mapping[int, Sequence[Outcome]], ks: Sequence[int] = SD_WIDTHS
) -> dict[str, float]:
    """Per dataset and over all windows: the mean over K of per-K pooled TPS (D.1.3)."""
    sets = _k_sets(by_k, ks)
    same_windows({str(k): by_window(v, f"SD K={k}") for k, v in sets.items()})
    per_k = [tps_by_dataset(sets[k]) for k in ks]
    return {d: statistics.fmean(p[d] for p in per_k) for d in per_k[0]}


def sd_window_tps(
    by_k: Mapping[int, Sequence[Outcome]], ks: Sequence[int] = SD_WIDTHS
) -> dict[str, float]:
    """Per window: the mean of that window's TPS at each K (what CDFs and slowdowns use)."""
    sets = {str(k): by_window(v, f"SD K={k}") for k, v in _k_sets(by_k, ks).items()}
    ids = same_windows(sets)
    return {w: statistics.fmean(sets[str(k)][w].tps for k in ks) for w in ids}


@dataclass(frozen=True)
class OracleResult:
    """Per-window hindsight choice over a catalog (zero selection cost)."""

    choice: Mapping[str, Hashable]  # window → chosen configuration (first minimum in catalog order)
    outcomes: tuple[Outcome, ...]  # the chosen outcome per window
    tps: float  # pooled over all windows
    tps_by_dataset: Mapping[str, float] = field(default_factory=dict)


def oracle(catalog: Mapping[Hashable, Sequence[Outcome]]) -> OracleResult:
    """For each window, the configuration with the least time; pooled TPS of those.

    Every configuration must cover the same windows with the same token count (all
    commit the target's greedy reference); a disagreement is refused."""
    sets = {k: by_window(v, f"configuration {k!r}") for k, v in catalog.items()}
    ids = same_windows({str(k): v for k, v in sets.items()}) if sets else []
    if not ids:
        raise ImpossibleFigure("the oracle needs at least one configuration with windows")
    choice: dict[str, Hashable] = {}
    chosen: list[Outcome] = []
    for w in ids:
        best_k, best = None, None
        for k, s in sets.items():
            o = s[w]
            if best is not None and o.tokens != best.tokens:
                raise ImpossibleFigure(
                    f"window {w}: configuration {k!r} commits {o.tokens} tokens but {best_k!r} commits {best.tokens}; "
                    f"every configuration must commit the same reference — check the replay"
                )
            if best is None or o.time_s < best.time_s:
                best_k, best = k, o
        choice[w] = best_k  # type: ignore[assignment]
        chosen.append(best)  # type: ignore[arg-type]
    return OracleResult(
        choice, tuple(chosen), pooled_tps(chosen, "the oracle"), tps_by_dataset(chosen)
    )


def oracle_gap(selected_tps: float, oracle_tps: float) -> float:
    """100 · (1 − TPS_selected / TPS_oracle), both pooled over the same windows."""
    for name, v in (("selected", selected_tps), ("oracle", oracle_tps)):
        if not math.isfinite(v) or v <= 0:
            raise ImpossibleFigure(
                f"{name} TPS {v!r} must be a positive finite number to form the oracle gap"
            )
    return 100.0 * (1.0 - selected_tps / oracle_tps)


@dataclass(frozen=True)
class Slowdown:
    """Windows slower/faster than the baseline (ratio < 1 − 1e-9 / > 1 + 1e-9), ties
    within 1e-9; losses are 100·(1 − ratio) over slower windows."""

    n: int
    faster: int
    slower: int
    ties: int
    slower_fraction: float
    median_loss_pct: float | None
    max_loss_pct: float | None
    slower_windows: tuple[str, ...]
    ratios: Mapping[str, float]


def slowdown(
    method: Mapping[str, float], baseline: Mapping[str, float], tol: float = TIE
) -> Slowdown:
    """Per-window TPS of a method against per-window TPS of the baseline (target-only)."""
    if method.keys() != baseline.keys():
        extra = sorted(method.keys() ^ baseline.keys())
        raise ImpossibleFigure(
            f"method and baseline cover different windows (e.g. {extra[0]}); compare the same windows"
        )
    if not method:
        raise ImpossibleFigure("no windows to compare")
    ratios: dict[str, float] = {}
    for w, b in baseline.items():
        m = method[w]
        if not (math.isfinite(b) and b > 0 and math.isfinite(m) and m >= 0):
            raise ImpossibleFigure(
                f"window {w}: TPS {m!r} vs baseline {b!r} cannot be compared; both must be finite and the baseline positive"
            )
        ratios[w] = m / b
    slower = tuple(w for w, r in ratios.items() if r < 1.0 - tol)
    faster = sum(1 for r in ratios.values() if r > 1.0 + tol)
    losses = [100.0 * (1.0 - ratios[w]) for w in slower]
    n = len(ratios)
    return Slowdown(
        n=n,
        faster=faster,
        slower=len(slower),
        ties=n - faster - len(slower),
        slower_fraction=len(slower) / n,
        median_loss_pct=statistics.median(losses) if losses else None,
        max_loss_pct=max(losses) if losses else None,
        slower_windows=slower,
        ratios=ratios,
    )


def cdf(values: Mapping[str, float] | Sequence[float]) -> list[tuple[float, float]]:
    """Empirical CDF points (x, F(x)) with equal weight per window, no smoothing."""
    xs = sorted(values.values() if isinstance(values, Mapping) else values)
    n = len(xs)
    if n == 0:
        raise ImpossibleFigure("no windows for a CDF")
    if any(not math.isfinite(x) for x in xs):
        raise ImpossibleFigure("a per-window TPS is not finite; the CDF cannot include it")
    return [(x, (i + 1) / n) for i, x in enumerate(xs)]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error across every test given),
    in the order given: the i-th smallest p times (m − i), made monotone, capped at 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def rank_biserial(diffs: Any) -> Any:
    """The matched-pairs rank-biserial correlation of paired differences (last axis;
    leading axes are resamples): (Σ ranks of positive − Σ ranks of negative) / Σ ranks,
    zeros dropped as the Wilcoxon test drops them; from −1 (every window lower in B) to
    +1 (every window higher); NaN when every difference is zero."""
    import numpy as np
    from scipy.stats import rankdata

    d = np.asarray(diffs, dtype=float)
    zeros = (d == 0).sum(axis=-1, keepdims=True)
    # zeros have the smallest |d|, so they take ranks 1..z: the others' ranks less z are
    # their ranks among the non-zero differences
    ranks = np.where(d != 0, rankdata(np.abs(d), axis=-1) - zeros, 0.0)
    total = ranks.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, (np.sign(d) * ranks).sum(axis=-1) / total, np.nan)


def wilcoxon_min_p(n_nonzero: int) -> float:
    """The smallest two-sided p-value the exact Wilcoxon signed-rank test can give with
    ``n_nonzero`` non-zero paired differences: 2 / 2^n (1 with none)."""
    return 1.0 if n_nonzero <= 0 else min(1.0, 2.0 / 2.0**n_nonzero)


__all__ = [
    "ALL",
    "holm",
    "rank_biserial",
    "wilcoxon_min_p",
    "SD_WIDTHS",
    "TIE",
    "OracleResult",
    "Slowdown",
    "cdf",
    "oracle",
    "oracle_gap",
    "sd_summary",
    "sd_window_tps",
    "slowdown",
]
