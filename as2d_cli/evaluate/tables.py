"""Tidy tables of an evaluation for pandas: one row per (window, method, configuration).

``per_window.csv`` / ``per_window.parquet`` hold every replayed window under every
configuration (standard SD has one row per K), ``summary.csv`` one row per method and
dataset with the pooled figures of ``results.json``. Pooling the per-window rows again —
Σ tokens / Σ time per (method, configuration), and for standard SD the mean over its K —
gives the same figures (docs/formats.md, "Tidy tables").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from as2d_cli.evaluate.fixed import LABELS, ORDER, FixedEval

PER_WINDOW_COLUMNS = [
    "window",
    "split",
    "dataset",
    "language",
    "audio_s",
    "method",
    "config",
    "source",
    "tokens",
    "time_ms",
    "tps",
    "rounds",
    "accepted",
    "proposed",
    "eos",
    "capped",
    "slower",
]


def per_window_rows(ev: FixedEval, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``per_window``; ``meta`` maps a window id to its trace (split, language,
    audio seconds). ``slower``: this configuration's TPS below target-only's on the window."""
    base = {r.window: r.tps for r in ev.runs["target-only"].windows}
    rows: list[dict[str, Any]] = []
    for m in ORDER:
        run = ev.runs[m]
        for spec, replays in zip(run.specs, run.runs):
            for r in replays:
                w = meta[r.window]
                tps, b = r.tps, base.get(r.window)
                rows.append(
                    {
                        "window": r.window,
                        "split": w.split,
                        "dataset": r.dataset,
                        "language": w.language,
                        "audio_s": float(w.audio_seconds),
                        "method": m,
                        "config": spec.label,
                        "source": r.source,
                        "tokens": r.tokens,
                        "time_ms": r.time_ns / 1e6,
                        "tps": tps,
                        "rounds": r.rounds,
                        "accepted": r.accepted,
                        "proposed": r.proposed,
                        "eos": r.eos,
                        "capped": r.capped,
                        "slower": None
                        if m == "target-only" or tps is None or b is None
                        else bool(tps < b),
                    }
                )
    return rows


def summary_rows(ev: FixedEval) -> list[dict[str, Any]]:
    """One row per method and dataset (and ``all``): pooled TPS, speedup over target-only."""
    base = ev.runs["target-only"]
    out = []
    for m in ORDER:
        run = ev.runs[m]
        for d in [*ev.datasets, "all"]:
            sel = None if d == "all" else d
            rows = [r for r in run.windows if sel is None or r.dataset == sel]
            tps, b = run.pooled_tps(sel), base.pooled_tps(sel)
            out.append(
                {
                    "method": m,
                    "label": LABELS[m],
                    "dataset": d,
                    "windows": len(rows),
                    "configs": len(run.specs),
                    "tps": tps,
                    "speedup": tps / b if tps and b else None,
                }
            )
    return out


def write_tables(ev: FixedEval, meta: Mapping[str, Any], folder: Path) -> list[Path]:
    """Write per_window.csv, per_window.parquet and summary.csv into ``folder``."""
    import pandas as pd

    per = pd.DataFrame(per_window_rows(ev, meta), columns=PER_WINDOW_COLUMNS)
    paths = [folder / "per_window.csv", folder / "per_window.parquet", folder / "summary.csv"]
    per.to_csv(paths[0], index=False)
    per.to_parquet(paths[1], index=False)
    pd.DataFrame(summary_rows(ev)).to_csv(paths[2], index=False)
    return paths
