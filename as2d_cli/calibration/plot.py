"""The per-token verification saving R(K) as the paper's Figure 8 (PNG)."""

from __future__ import annotations

from pathlib import Path
from statistics import stdev
from typing import Mapping, Sequence


def plot_savings(idle_samples: Mapping[int, Sequence[float]], path: Path, title: str) -> Path:
    """Bars of R(K) = 100·(1 − V̄(K)/(K·V̄(1))) with error bars 100·s_K/(K·V̄(1))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v1 = sum(idle_samples[1]) / len(idle_samples[1])
    ks = sorted(idle_samples)
    r = [100 * (1 - (sum(idle_samples[k]) / len(idle_samples[k])) / (k * v1)) for k in ks]
    err = [
        100 * (stdev(idle_samples[k]) if len(idle_samples[k]) > 1 else 0.0) / (k * v1) for k in ks
    ]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=120)
    ax.bar(ks, r, yerr=err, color="#4477aa", capsize=2)
    ax.set_xlabel("physical verification width K")
    ax.set_ylabel("per-token saving R(K) (%)")
    ax.set_xticks(ks)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
