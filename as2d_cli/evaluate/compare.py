"""`as2d compare RUN_A RUN_B`: two evaluations of the same windows, method by method.

For each method and dataset: the pooled TPS of both runs (from their ``per_window`` tables,
pooled as ``results.json`` pools), the ratio B/A, a paired Wilcoxon signed-rank test on the
per-window TPS (scipy.stats.wilcoxon) with Holm's correction across every test of the
comparison (the raw p kept beside it), the matched-pairs rank-biserial effect size, and
bootstrap confidence intervals of the pooled ratio and of the effect size, resampling
windows in pairs (scipy.stats.bootstrap, percentile method, fixed seed so a comparison is
reproducible). A difference is called significant when the Holm-adjusted p is below
``alpha`` and the ratio's interval excludes 1; a test with so few non-zero differences that
its smallest possible p is not below ``alpha`` is marked "too few windows".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.evaluate.fixed import LABELS, ORDER, text_table
from as2d_cli.formats.common import (
    INCOMPLETE,
    MANIFEST,
    manifest_mismatch,
    read_manifest,
    sha256_file,
)

REPORT = "as2d report"  # the writer names a manifest records while a command writes
# What `as2d report` renders again: tables.md, the tables' CSVs and every figure format.
REPORT_OUTPUTS = (
    "tables.md",
    *(f"table{n}.csv" for n in (2, 4, 5, 8, 9, 12)),
    *(f"{f}.{x}" for f in ("cdf", "datasets", "rk") for x in ("png", "pdf", "svg")),
)


def _not_a_run(folder: Path) -> UserError:
    return UserError(
        f"{folder} is not an evaluation run (no results.json); give a folder `as2d eval` wrote"
    )


def _claims_manifest(folder: Path) -> bool:
    """Whether ``results.json`` was written with a manifest beside it (every evaluation
    since manifests exist says so): then a missing manifest is a damaged folder, not an
    older one."""
    try:
        doc = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    res = doc.get("results") if isinstance(doc, dict) else None
    return isinstance(res, dict) and res.get("manifest") == MANIFEST


def verify_run(
    folder: Path, *, resumes: str | None = None, skip: tuple[str, ...] = ()
) -> dict | None:
    """Check an evaluation folder against its manifest before anything reads it, and
    return the manifest; None for a folder written before manifests existed (no manifest,
    no INCOMPLETE note, and a results.json that does not name one), which is read as it
    stands. Refused in one line, naming the file and what to do: a folder that is still
    being written or was interrupted (unless ``resumes`` is the command whose writing it
    was: that command finishes it), a file listed that is missing or whose size or
    sha256 differs (names in ``skip`` are not checked: the caller writes them again)."""
    folder = Path(folder)
    if not (folder / "results.json").is_file():
        raise _not_a_run(folder)
    doc = read_manifest(folder)
    note = folder / INCOMPLETE
    if doc is None:
        if note.exists():
            raise UserError(
                f"{folder} is incomplete (it has an {INCOMPLETE} note and no {MANIFEST}): its "
                "writing was interrupted; run the evaluation again and delete this folder"
            )
        if _claims_manifest(folder):
            raise UserError(
                f"{folder} has no {MANIFEST} though its results.json was written with one: the "
                "folder was changed after it was written; restore the manifest or run the "
                "evaluation again"
            )
        return None
    if not doc["complete"] or note.exists():
        if doc["complete"]:
            raise UserError(
                f"{folder} is marked incomplete ({INCOMPLETE}); read that note, then run the "
                "evaluation again"
            )
        if doc["writing"] != resumes:
            missing = [n for n in doc["pending"] if not (folder / n).is_file()]
            what = (
                f"{len(missing)} of its files not written: {', '.join(missing)}"
                if missing
                else "its files written but not recorded"
            )
            todo = (
                f"resume it with `{doc['command']}`"
                if doc["in_place"]
                else f"run `{doc['command']}` again for a new folder and delete this one"
            )
            raise UserError(
                f"{folder} is incomplete: `{doc['writing']}` did not finish it ({what}); {todo}"
            )
    bad = manifest_mismatch(folder, doc, skip)
    if bad is not None:
        name, what = bad
        todo = (
            f"render it again with `as2d report {folder}`"
            if name in REPORT_OUTPUTS
            else "restore that file or run the evaluation again"
        )
        raise UserError(
            f"{folder / name} {what}: the folder was changed after it was written; {todo}"
        )
    return doc


def load_run(folder: Path, native: bool = False) -> tuple[dict, Any]:
    """A run folder's results document and its per-window table (check the folder with
    :func:`verify_run` first). ``native``: the native runs' table instead, one row per
    window, method and configuration with the median time of its repetitions (paper D.3)."""
    import pandas as pd

    folder = Path(folder)
    res = folder / "results.json"
    if not res.is_file():
        raise _not_a_run(folder)
    try:
        doc = json.loads(res.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(
            f"{res} is not valid JSON ({exc}); the folder is damaged: run the evaluation again"
        ) from None
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
    from as2d_cli.evaluate.tables import read_per_window

    return doc, read_per_window(per)


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


def _bootstrap(
    stat: Any, n: int, resamples: int, confidence: float, seed: int
) -> tuple[float | None, float | None]:
    """A percentile bootstrap interval of ``stat`` over windows resampled in pairs (fixed
    seed: a comparison is reproducible); None with fewer than 2 windows."""
    from scipy import stats

    if n < 2:
        return None, None
    ci = stats.bootstrap(
        (np.arange(n),),
        stat,
        vectorized=True,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
    return (None, None) if np.isnan(lo) or np.isnan(hi) else (lo, hi)


def _compare_cell(
    arrays: tuple[np.ndarray, ...], alpha: float, confidence: float, resamples: int, seed: int
) -> dict[str, Any]:
    """One method and dataset: pooled TPS of both runs, their ratio with its interval,
    the paired Wilcoxon test and the rank-biserial effect size with its interval."""
    from scipy import stats

    from as2d_cli.stats.compare import rank_biserial, wilcoxon_min_p

    ta, sa, tb, sb = arrays
    pa, pb = float(_pooled(ta, sa)), float(_pooled(tb, sb))
    xa, xb = _window_tps(ta, sa), _window_tps(tb, sb)
    ok = ~(np.isnan(xa) | np.isnan(xb))
    diff = xb[ok] - xa[ok]
    nonzero = int(np.count_nonzero(diff))
    p = float(stats.wilcoxon(diff).pvalue) if nonzero else 1.0

    def ratio(i: np.ndarray, axis: int = -1) -> np.ndarray:  # i: resampled windows (..., n)
        return _pooled(tb[i], sb[i]) / _pooled(ta[i], sa[i])

    def effect(i: np.ndarray, axis: int = -1) -> np.ndarray:
        return rank_biserial(diff[i])

    lo, hi = _bootstrap(ratio, len(ta), resamples, confidence, seed)
    r = float(rank_biserial(diff)) if nonzero else None
    r_lo, r_hi = (
        _bootstrap(effect, len(diff), resamples, confidence, seed) if nonzero else (None, None)
    )
    return {
        "windows": len(ta),
        "tps_a": pa,
        "tps_b": pb,
        "ratio": pb / pa,
        "ci_low": lo,
        "ci_high": hi,
        "p_value": p,
        "effect_r": r,
        "effect_ci_low": r_lo,
        "effect_ci_high": r_hi,
        # with n paired windows the exact test's p is at least 2/2^n: at or above alpha no
        # difference could be called significant, whatever the data
        "too_few": wilcoxon_min_p(int(ok.sum())) >= alpha,
    }


def _check_pair(a: Path, b: Path, native: bool) -> dict[Path, dict | None]:
    """Both folders checked; the same run twice (a copied folder) refused."""
    if Path(a).resolve() == Path(b).resolve():
        raise UserError(f"{a} and {b} are the same folder; compare two different evaluations")
    checked = {a: verify_run(a), b: verify_run(b)}
    # One run twice (a copied folder): the files it measured with are identical. Natively
    # that is its native results (or table, in a folder without them), else results.json.
    names = ("native.json", "native_per_window.csv") if native else ("results.json",)
    name = next((n for n in names if (Path(a) / n).is_file() and (Path(b) / n).is_file()), None)
    if name is not None and _digest(Path(a), name, checked[a]) == _digest(
        Path(b), name, checked[b]
    ):
        raise UserError(
            f"{a} and {b} hold the same {name} (one run, copied); compare two different evaluations"
        )
    return checked


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
    from as2d_cli.stats.compare import holm

    checked = _check_pair(a, b, native)
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
            rows_a = per_a[(per_a["method"] == m) & ((per_a["dataset"] == sel) if sel else True)]
            ids = sorted(set(rows_a["window"]))
            if not ids:
                continue
            arrays = (*_window_arrays(per_a, m, sel, ids), *_window_arrays(per_b, m, sel, ids))
            cell = _compare_cell(arrays, alpha, confidence, resamples, seed)
            rows.append({"method": m, "label": LABELS[m], "dataset": d, **cell})
    # Holm across every test of the comparison; the raw p stays beside it
    for r, ph in zip(rows, holm([r["p_value"] for r in rows])):
        lo, hi = r["ci_low"], r["ci_high"]
        r["p_holm"] = ph
        excludes = lo is not None and hi is not None and not (lo <= 1.0 <= hi)
        r["significant"] = bool(ph < alpha and excludes and not r["too_few"])
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
        "tests": len(rows),
        "rows": rows,
        "inputs": {"a": doc_a.get("inputs"), "b": doc_b.get("inputs")},
        "verified": {"a": checked[a] is not None, "b": checked[b] is not None},
    }


def _verdict(r: dict[str, Any]) -> str:
    if r["too_few"]:
        return "too few windows"
    return "significant" if r["significant"] else "not significant"


def _ci(lo: float | None, hi: float | None, nd: int = 3) -> str:
    return "—" if lo is None or hi is None else f"{lo:.{nd}f} to {hi:.{nd}f}"


def render_compare(res: dict[str, Any], markdown: bool = False) -> str:
    level = f"{int(round(res['confidence'] * 100))}%"
    head = [
        "method",
        "dataset",
        "windows",
        "TPS A",
        "TPS B",
        "B/A",
        f"B/A {level} CI",
        "p (Wilcoxon)",
        "p (Holm)",
        "effect r",
        f"r {level} CI",
        "verdict",
    ]
    body = []
    for r in res["rows"]:
        body.append(
            [
                r["label"],
                r["dataset"],
                str(r["windows"]),
                f"{r['tps_a']:.2f}",
                f"{r['tps_b']:.2f}",
                f"{r['ratio']:.3f}",
                _ci(r["ci_low"], r["ci_high"]),
                f"{r['p_value']:.3g}",
                f"{r['p_holm']:.3g}",
                "—" if r["effect_r"] is None else f"{r['effect_r']:+.2f}",
                _ci(r["effect_ci_low"], r["effect_ci_high"], 2),
                _verdict(r),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 3) + "---|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        lines = text_table(head, body)
    return "\n".join(lines + _notes(res)) + "\n"


def _notes(res: dict[str, Any]) -> list[str]:
    what = "native runs (median of each window's repetitions)" if res.get("native") else "replay"
    few = sum(1 for r in res["rows"] if r["too_few"])
    notes = [
        "",
        f"A: {res['a']}" + _unverified(res, "a"),
        f"B: {res['b']}" + _unverified(res, "b"),
        f"{res['windows']} {res['split']} windows, {what}; paired per window. B/A: pooled TPS "
        f"ratio with a bootstrap percentile interval ({res['resamples']} resamples, seed "
        f"{res['seed']}). p: two-sided Wilcoxon signed-rank test of per-window TPS, and "
        f"Holm-adjusted across all {len(res['rows'])} tests. Effect r: matched-pairs "
        "rank-biserial correlation (−1: every window slower in B, +1: every window faster), "
        "with a bootstrap interval. Significant: Holm p < "
        f"{res['alpha']} and the B/A interval excludes 1.",
    ]
    if few:
        notes.append(
            f"Too few windows: {few} test(s) pair so few windows (n ≤ "
            f"{_max_too_few(res['alpha'])}) that even the smallest possible p (2/2^n) is not "
            f"below {res['alpha']}: they cannot show a difference, whatever the data."
        )
    return notes


def _max_too_few(alpha: float) -> int:
    from as2d_cli.stats.compare import wilcoxon_min_p

    n = 0
    while wilcoxon_min_p(n + 1) >= alpha:
        n += 1
    return n


def _digest(folder: Path, name: str, manifest: dict | None) -> str:
    """A file's sha256, as its folder's manifest records it (just verified) when it does."""
    entry = (manifest or {}).get("files", {}).get(name)
    return str(entry["sha256"]) if entry else sha256_file(folder / name)


def _unverified(res: dict[str, Any], which: str) -> str:
    """A note for a folder written before manifests (its files are read unchecked)."""
    ok = res.get("verified", {}).get(which, True)
    return "" if ok else f" (no {MANIFEST}: written before manifests, its files are not verified)"
