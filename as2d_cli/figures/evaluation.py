"""The figures of an evaluation: per-window TPS CDFs (paper Figure 5, a panel per device),
pooled TPS per dataset, and replayed against native TPS (D.3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from as2d_cli.figures.style import (
    METHOD_ORDER,
    method_color,
    method_label,
    save,
    styled,
)

# One panel: its title (the device) and, per method id, the per-window TPS values.
Panel = tuple[str, Mapping[str, Sequence[float]]]


def cdf_figure(
    panels: Sequence[Panel],
    base: Path,
    formats: Sequence[str],
    *,
    title: str = "",
    force: bool = False,
) -> list[Path]:
    """Empirical CDFs of per-window TPS, equal weight per window, unsmoothed; one panel
    per device, each with its own horizontal scale (paper Figure 5)."""
    with styled() as plt:
        n = len(panels)
        fig, axes = plt.subplots(
            1, n, figsize=(3.4 * n + 0.6, 3.0), squeeze=False, constrained_layout=True
        )
        for ax, (name, values) in zip(axes[0], panels):
            for m in [m for m in METHOD_ORDER if m in values] + [
                m for m in values if m not in METHOD_ORDER
            ]:
                xs = sorted(v for v in values[m] if v is not None)
                if not xs:
                    continue
                ax.step(
                    xs,
                    [(i + 1) / len(xs) for i in range(len(xs))],
                    where="post",
                    label=method_label(m),
                    color=method_color(m),
                    linewidth=1.8 if m == "as2d" else 1.1,
                )
            ax.set_xlabel("decoding throughput per window (tokens/s)")
            ax.set_ylabel("fraction of windows")
            ax.set_ylim(0, 1.02)
            if n > 1 or name:
                ax.set_title(name)
        handles, labels = axes[0][0].get_legend_handles_labels()
        # below the panels: a legend inside would cover the curves
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3) or 1)
        if title:
            fig.suptitle(title, fontsize=8)
        return save(fig, base, formats, force=force)


def datasets_figure(
    panels: Sequence[tuple[str, Mapping[str, Mapping[str, float | None]]]],
    base: Path,
    formats: Sequence[str],
    *,
    title: str = "",
    force: bool = False,
) -> list[Path]:
    """Grouped bars of pooled TPS per dataset and method, a panel per device; the legend
    sits outside the axes so it never covers a bar. ``panels``: (device, {method:
    {dataset: TPS}})."""
    with styled() as plt:
        n = len(panels)
        fig, axes = plt.subplots(
            n, 1, figsize=(7.0, 2.8 * n), squeeze=False, constrained_layout=True
        )
        for ax, (name, pooled) in zip(axes[:, 0], panels):
            methods = [m for m in METHOD_ORDER if m in pooled]
            datasets = list(dict.fromkeys(d for m in methods for d in pooled[m]))
            width = 0.8 / max(len(methods), 1)
            for i, m in enumerate(methods):
                xs = [j - 0.4 + width * (i + 0.5) for j in range(len(datasets))]
                ys = [pooled[m].get(d) or 0.0 for d in datasets]
                ax.bar(xs, ys, width, label=method_label(m), color=method_color(m))
            ax.set_xticks(range(len(datasets)), datasets)
            ax.set_ylabel("pooled decoding throughput (tokens/s)")
            ax.grid(axis="x", visible=False)
            if n > 1:
                ax.set_title(name)
        axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        if title:
            fig.suptitle(title, fontsize=8)
        return save(fig, base, formats, force=force)


def native_figure(
    points: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    base: Path,
    formats: Sequence[str],
    *,
    title: str = "",
    force: bool = False,
) -> list[Path]:
    """Replayed against native TPS per window (the median of its repetitions), per method,
    with the line of perfect agreement. ``points``: method id → (native, replayed)."""
    with styled() as plt:
        fig, ax = plt.subplots(figsize=(4.2, 3.8), constrained_layout=True)
        every = [v for xs, ys in points.values() for v in (*xs, *ys)]
        for m in [m for m in METHOD_ORDER if m in points] + [
            m for m in points if m not in METHOD_ORDER
        ]:
            xs, ys = points[m]
            ax.scatter(xs, ys, s=14, label=method_label(m), color=method_color(m))
        if every:
            lo, hi = min(every), max(every)
            ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.7, label="replay = native")
        ax.set_xlabel("native throughput (tokens/s, median of repetitions)")
        ax.set_ylabel("replayed throughput (tokens/s, same trajectory)")
        ax.legend(loc="upper left")
        if title:
            ax.set_title(title, fontsize=8)
        return save(fig, base, formats, force=force)
