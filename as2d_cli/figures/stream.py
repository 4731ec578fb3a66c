"""Figure 9's panels for one or several streams overlaid (e.g. with and without a
cooler): trailing-window decode throughput, prefill time and processing RTF (at most 15
blocks), completion lag and queue wait of every block, all over input-arrival time, and
temperature over stream time including the drain. RTF 1 is a dotted line, always in view."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from as2d_cli.figures.style import SERIES_COLORS, save, styled

PANELS = (
    ("(a) Decode throughput", "tokens/s", "trailing_tps", "trailing"),
    ("(b) Prefill time", "s", "trailing_prefill_s", "trailing"),
    ("(c) Processing RTF", "RTF", "trailing_rtf", "trailing"),
    ("(d) Completion lag", "s", "lag_s", "every"),
    ("(e) Queue wait", "s", "queue_wait_s", "every"),
)


def stream_name(doc: dict[str, Any]) -> str:
    """How a stream is named in a legend or a table column: its label and device."""
    dev = ((doc.get("measurement") or {}).get("device") or {}).get("name", "")
    return f"{doc.get('label', 'stream')} ({dev})" if dev else str(doc.get("label", "stream"))


def _series(ax: Any, doc: dict[str, Any], key: str, kind: str, color: str, name: str) -> float:
    """One stream's values of one panel; returns their maximum (0 without any)."""
    pts = [(b["arrival_s"], b.get(key)) for b in doc["blocks"] if b.get(key) is not None]
    if not pts:
        return 0.0
    xs, ys = zip(*pts)
    style = ".-" if kind == "every" else "-"
    ax.plot(xs, ys, style, color=color, linewidth=1.0, markersize=2.5, label=name)
    return float(max(ys))


def _temperature(ax: Any, docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    for i, (doc, name) in enumerate(zip(docs, names)):
        pts = (doc.get("temperature") or {}).get("samples") or []
        if not pts:
            continue
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=color, label=name)
        drained = (doc.get("stream") or {}).get("drained_s")
        if drained is not None:
            ax.axvline(drained, color=color, linestyle="--", linewidth=0.7)
    sensors = sorted({str((d.get("temperature") or {}).get("sensor")) for d in docs} - {"None"})
    ax.set_title("(f) Temperature" + (f" ({', '.join(sensors)})" if sensors else ""))
    ax.set_xlabel("stream time incl. drain (s)")
    ax.set_ylabel("°C")


def stream_figure(
    docs: Sequence[dict[str, Any]],
    base: Path,
    formats: Sequence[str],
    *,
    force: bool = False,
) -> list[Path]:
    """Figure 9 for ``docs`` (``stream.json`` documents), overlaid; the temperature panel
    only when some stream had a sensor (a note says so otherwise)."""
    names = [stream_name(d) for d in docs]
    has_temp = any((d.get("temperature") or {}).get("samples") for d in docs)
    with styled() as plt:
        fig, axes = plt.subplots(2, 3, figsize=(10.5, 5.4), constrained_layout=True)
        for ax, (title, unit, key, kind) in zip(axes.flat, PANELS):
            top = 0.0
            for i, (doc, name) in enumerate(zip(docs, names)):
                color = SERIES_COLORS[i % len(SERIES_COLORS)]
                top = max(top, _series(ax, doc, key, kind, color, name))
            if key == "trailing_rtf":  # RTF 1 in view even when every value is below it
                ax.axhline(1.0, color="black", linestyle=":", linewidth=1, label="RTF 1")
                top = max(top, 1.0)
            ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)
            ax.set_title(title)
            ax.set_xlabel("input arrival (s)")
            ax.set_ylabel(unit)
        last = axes.flat[5]
        if has_temp:
            _temperature(last, docs, names)
        else:
            last.remove()
            fig.text(
                0.84, 0.25, "no temperature sensor:\nno temperature panel", ha="center", fontsize=7
            )
        axes.flat[2].legend(loc="lower right")
        if len(docs) == 1:
            fig.suptitle(names[0])
        return save(fig, base, formats, force=force)
