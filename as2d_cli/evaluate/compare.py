"""`as2d compare RUN_A RUN_B`: two evaluations of the same windows, method by method.

For each method and dataset: the pooled TPS of both runs (from their ``per_window`` tables,
pooled as ``results.json`` pools), the ratio B/A, a paired Wilcoxon signed-rank test on the
per-window TPS (scipy.stats.wilcoxon) and a bootstrap confidence interval of the pooled
ratio, resampling windows in pairs (scipy.stats.bootstrap, percentile method, fixed seed so
a comparison is reproducible). A difference is called significant when the test's p-value is
below ``alpha`` and the interval excludes 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.evaluate.fixed import LABELS, ORDER, text_table


def load_run(folder: Path, native: bool = False) -> tuple[dict, Any]:
    """A run folder's results document and its per-window table. ``native``: the native
    runs' table instead, one row per window, method and configuration with the median
    time of its repetitions (paper D.3)."""
    import pandas as pd

    folder = Path(folder)
    res = folder / "results.json"
    if not res.is_file():
        raise UserError(
            f"{folder} is not an evaluation run (no results.json); give a folder `as2d eval` wrote"
        )
    doc = json.loads(res.read_text(encoding="utf-8"))
    if native:
        table = folder / "native_per_window.csv"
        if not table.is_file():
            raise UserError(
                f"{folder} has no native runs (native_per_window.csv); run `as2d eval --native` to compare them"
            )
        runs = pd.read_csv(table)
        per = runs.groupby(["window", "dataset", "method", "config"], as_index=False).agg(
            tokens=("tokens", "first"), time_ms=("time_ms", "median")
        )
        per["tps"] = per["tokens"] / (per["time_ms"] / 1e3)
        return doc, per
    per = folder / "per_window.csv"
    if not per.is_file():
        raise UserError(
            f"{folder} has no per_window.csv; run `as2d eval` again to write one, then compare"
        )
    return doc, pd.read_csv(per)


def _window_arrays(
    per: Any, method: str, dataset: str | None, windows: list[str]
) -> tuple[np.ndarray, ...]:
    """Per window and configuration: tokens (n, c), time in s (n, c); configurations as columns."""
    rows = per[(per["method"] == method) & ((per["dataset"] == dataset) if dataset else True)]
    tok = rows.pivot(index="window", columns="config", values="tokens").reindex(windows)
    sec = rows.pivot(index="window", columns="config", values="time_ms").reindex(windows) / 1e3
    return tok.to_numpy(dtype=float), sec.to_numpy(dtype=float)


def _pooled(tok: np.ndarray, sec: np.ndarray) -> Any:
    """Σ tokens / Σ time per configuration, then the mean over configurations (SD's K); the
    arrays are (windows, configurations), or with leading resample axes (one figure each)."""
    return (tok.sum(axis=-2) / sec.sum(axis=-2)).mean(axis=-1)


def _window_tps(tok: np.ndarray, sec: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nanmean(np.where(sec > 0, tok / sec, np.nan), axis=1)


def compare_runs(
    a: Path,
    b: Path,
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    native: bool = False,
) -> dict[str, Any]:
    from scipy import stats

    doc_a, per_a = load_run(a, native)
    doc_b, per_b = load_run(b, native)
    ra, rb = doc_a["results"], doc_b["results"]
    if ra.get("split") != rb.get("split"):
        raise UserError(
            f"{a} evaluated the {ra.get('split')!r} split and {b} the {rb.get('split')!r} split; "
            "compare runs of the same split"
        )
    wa, wb = sorted(set(per_a["window"])), sorted(set(per_b["window"]))
    if wa != wb:
        only = sorted(set(wa) ^ set(wb))
        raise UserError(
            f"{a} and {b} evaluated different windows ({len(only)} in one only, first: {only[0]}); "
            "compare runs over the same windows"
        )
    datasets = list(dict.fromkeys([*ra.get("datasets", []), *rb.get("datasets", [])]))
    rows: list[dict[str, Any]] = []
    methods = [m for m in ORDER if m in set(per_a["method"]) and m in set(per_b["method"])]
    for m in methods:
        for d in [*datasets, "all"]:
            sel = None if d == "all" else d
            ids = sorted(
                set(
                    per_a[(per_a["method"] == m) & ((per_a["dataset"] == sel) if sel else True)][
                        "window"
                    ]
                )
            )
            if not ids:
                continue
            ta, sa = _window_arrays(per_a, m, sel, ids)
            tb, sb = _window_arrays(per_b, m, sel, ids)
            pa, pb = float(_pooled(ta, sa)), float(_pooled(tb, sb))
            xa, xb = _window_tps(ta, sa), _window_tps(tb, sb)
            ok = ~(np.isnan(xa) | np.isnan(xb))
            diff = xb[ok] - xa[ok]
            p = float(stats.wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
            lo = hi = None
            if len(ids) >= 2:

                def ratio(
                    i: np.ndarray, axis: int = -1
                ) -> np.ndarray:  # i: resampled window indices (..., n)
                    return _pooled(tb[i], sb[i]) / _pooled(ta[i], sa[i])

                ci = stats.bootstrap(
                    (np.arange(len(ids)),),
                    ratio,
                    vectorized=True,
                    n_resamples=resamples,
                    confidence_level=confidence,
                    method="percentile",
                    random_state=np.random.default_rng(seed),
                )
                lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
            sig = p < alpha and lo is not None and hi is not None and not (lo <= 1.0 <= hi)
            rows.append(
                {
                    "method": m,
                    "label": LABELS[m],
                    "dataset": d,
                    "windows": len(ids),
                    "tps_a": pa,
                    "tps_b": pb,
                    "ratio": pb / pa,
                    "p_value": p,
                    "ci_low": lo,
                    "ci_high": hi,
                    "significant": bool(sig),
                }
            )
    return {
        "a": str(a),
        "b": str(b),
        "native": native,
        "split": ra.get("split"),
        "windows": len(wa),
        "alpha": alpha,
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "rows": rows,
        "inputs": {"a": doc_a.get("inputs"), "b": doc_b.get("inputs")},
    }


def render_compare(res: dict[str, Any], markdown: bool = False) -> str:
    head = [
        "method",
        "dataset",
        "TPS A",
        "TPS B",
        "B/A",
        f"{int(res['confidence'] * 100)}% CI",
        "p (Wilcoxon)",
        "",
    ]
    body = []
    for r in res["rows"]:
        ci = "—" if r["ci_low"] is None else f"{r['ci_low']:.3f}–{r['ci_high']:.3f}"
        body.append(
            [
                r["label"],
                r["dataset"],
                f"{r['tps_a']:.2f}",
                f"{r['tps_b']:.2f}",
                f"{r['ratio']:.3f}",
                ci,
                f"{r['p_value']:.3g}",
                "significant" if r["significant"] else "",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        lines = text_table(head, body)
    what = "native runs (median of each window's repetitions)" if res.get("native") else "replay"
    lines += [
        "",
        f"A: {res['a']}",
        f"B: {res['b']}",
        f"{res['windows']} {res['split']} windows, {what}; paired per window; bootstrap {res['resamples']} resamples "
        f"(seed {res['seed']}); significant: p < {res['alpha']} and the interval excludes 1",
    ]
    return "\n".join(lines) + "\n"
