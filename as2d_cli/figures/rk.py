"""R(K), the per-token verification saving by physical width (paper Figure 8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import stdev

from as2d_cli.figures.style import SERIES_COLORS, save, styled

MAX_TICKS = 12  # more K labels than this would run into each other: label every n-th


def savings(idle_samples: Mapping[int, Sequence[float]]) -> dict[int, tuple[float, float]]:
    """Per K: R(K) = 100·(1 − V̄(K)/(K·V̄(1))) and its error 100·s_K/(K·V̄(1))."""
    v1 = sum(idle_samples[1]) / len(idle_samples[1])
    out = {}
    for k in sorted(idle_samples):
        xs = idle_samples[k]
        mean = sum(xs) / len(xs)
        err = stdev(xs) if len(xs) > 1 else 0.0
        out[k] = (100 * (1 - mean / (k * v1)), 100 * err / (k * v1))
    return out


def rk_figure(
    idle_samples: Mapping[int, Sequence[float]],
    base: Path,
    formats: Sequence[str],
    *,
    title: str = "",
    force: bool = False,
) -> list[Path]:
    """Bars of R(K) with error bars of the samples' spread; K labels thinned so they never
    overlap however many widths were measured."""
    r = savings(idle_samples)
    ks = list(r)
    with styled() as plt:
        fig, ax = plt.subplots(
            figsize=(max(4.0, 0.22 * len(ks) + 2.0), 3.0), constrained_layout=True
        )
        ax.bar(
            ks,
            [r[k][0] for k in ks],
            # a profile keeps one figure per K: no spread to draw then
            yerr=[r[k][1] for k in ks] if any(r[k][1] for k in ks) else None,
            color=SERIES_COLORS[0],
            capsize=2,
            error_kw={"linewidth": 0.8},
        )
        step = 1 if len(ks) <= MAX_TICKS else -(-len(ks) // MAX_TICKS)
        ax.set_xticks([k for i, k in enumerate(ks) if i % step == 0])
        ax.set_xlabel("physical verification width K (incl. the known root)")
        ax.set_ylabel("per-token verification saving R(K) (%)")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.grid(axis="x", visible=False)
        if title:
            ax.set_title(title)
        return save(fig, base, formats, force=force)
