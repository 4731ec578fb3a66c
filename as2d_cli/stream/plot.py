"""Figure 9's panels for one stream (PNG): trailing-window decode throughput, prefill time
and processing RTF (at most 15 blocks), completion lag and queue wait of every block, all
over input-arrival time; temperature over stream time with the drain. RTF 1 dotted."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_stream(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = doc["blocks"]
    t = [b["arrival_s"] for b in blocks]
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.6), dpi=110, sharex=False)
    panels = [
        ("(a) decode throughput (tokens/s)", [b["trailing_tps"] for b in blocks], "trailing"),
        ("(b) prefill time (s)", [b["trailing_prefill_s"] for b in blocks], "trailing"),
        ("(c) processing RTF", [b["trailing_rtf"] for b in blocks], "trailing"),
        ("(d) completion lag (s)", [b["lag_s"] for b in blocks], "every"),
        ("(e) queue wait (s)", [b["queue_wait_s"] for b in blocks], "every"),
    ]
    for ax, (title, ys, kind) in zip(axes.flat, panels):
        pts = [(x, y) for x, y in zip(t, ys) if y is not None]
        if pts:
            xs, vs = zip(*pts)
            if kind == "every":
                ax.plot(xs, vs, ".-", color="#4477aa", linewidth=0.8, markersize=3)
            else:
                ax.plot(xs, vs, "-", color="#4477aa", linewidth=1.2)
        ax.set_ylim(bottom=0)
        if title.startswith("(c)"):
            ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input arrival (s)", fontsize=8)
        ax.tick_params(labelsize=7)
    ax = axes.flat[5]
    temp = doc.get("temperature") or {}
    pts = temp.get("samples") or []
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color="#cc6677")
        drained = doc["stream"].get("drained_s")
        if drained is not None:
            ax.axvline(drained, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"(f) temperature, {temp.get('sensor')} (°C)", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no temperature sensor", ha="center", va="center", fontsize=8)
        ax.set_title("(f) temperature (°C)", fontsize=9)
    ax.set_xlabel("stream time incl. drain (s)", fontsize=8)
    ax.tick_params(labelsize=7)
    fig.suptitle(f"{doc['label']} — {doc['measurement']['device']['name']}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
