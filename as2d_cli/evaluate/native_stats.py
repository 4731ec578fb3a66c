"""Statistics of a native evaluation: exactness against target-only, replay agreement
(D.3: per window against the median native time of its repetitions, and pooled), the
device's drift between passes, its repeatability, the target-only oracle floor, and the
host's CPU steal per pass.

Rows are measured native runs, each priced by the replay (``native_replay.price_runs``):
``window``, ``rep``, ``method``, ``res`` (the runner's result), ``tps_native``,
``tps_replay``, ``error_percent``, ``divergence`` (and ``audio_s``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from statistics import median
from typing import Any

from as2d_cli.evaluate.replay_gap import gap_summary, ratio_factors

METHODS = ("target-only", "sd", "asp", "as2d")
STEAL_BOUND = 0.05  # a pass whose CPU steal passes this ran on a host shared with other guests


def comparison(mismatch: str | None) -> dict[str, Any]:
    """What the replay-vs-native figures are: ``agreement`` (the profile was measured on
    this device), or an ``expected_error`` with why (``mismatch``: a synthetic profile, or
    another device's — :func:`as2d_cli.evaluate.inputs.profile_mismatch`)."""
    if mismatch is None:
        return {"kind": "agreement", "why": None}
    return {"kind": "expected_error", "why": mismatch}


def divergence(ref: dict, res: dict) -> dict | None:
    """First position where ``res`` departs from the target-only ``ref``, with margins."""
    a, b = ref["tokens"], res["tokens"]
    if a == b:
        return None
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    ma, mb = ref.get("margins") or [], res.get("margins") or []
    return {
        "position": i,
        "target_only": a[i] if i < len(a) else None,
        "method": b[i] if i < len(b) else None,
        "margin_target_only": ma[i] if i < len(ma) else None,
        "margin_method": mb[i] if i < len(mb) else None,
    }


def _drift_factors(rows: list[dict]) -> dict[int, float]:
    """Per pass, target-only's pooled native time over its replayed time: how much slower
    (> 1) or faster the device ran in that pass than the frozen profile says."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        if r["method"] == "target-only" and r["tps_replay"] and r["tps_native"]:
            acc[r["rep"]][0] += r["res"]["n_tokens"] / r["tps_native"]
            acc[r["rep"]][1] += r["res"]["n_tokens"] / r["tps_replay"]
    return {rep: nat / rep_t for rep, (nat, rep_t) in acc.items() if rep_t > 0}


def _agreement(
    sel: list[dict], scale: Callable[[dict], float | None], how: str = "pool"
) -> tuple[float | None, float | None, int]:
    """(MAE over windows, pooled error, windows) with each run's replayed time multiplied
    by ``scale(row)`` (1 for the frozen profile; rows whose scale is None are left out).

    ``how``: a window's native and replayed times are the sums over its repetitions
    ("pool"), or their medians ("median": D.3 compares the replay with the *median* native
    latency of the measured repetitions, which a single preempted run cannot move)."""
    per: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for r in sel:
        f = scale(r)
        if not (r["tps_replay"] and r["tps_native"]) or f is None:
            continue
        n = r["res"]["n_tokens"]
        per[r["window"]][0].append(n / r["tps_native"])
        per[r["window"]][1].append(n / r["tps_replay"] * f)
    agg = median if how == "median" else sum
    times = [(agg(nat), agg(rep)) for nat, rep in per.values()]
    # TPS_replay / TPS_native − 1 = native time / replayed time − 1 (with one repetition the
    # same for both ways and per run).
    werrs = [100.0 * (nat / rep - 1.0) for nat, rep in times if rep > 0]
    mae = sum(abs(e) for e in werrs) / len(werrs) if werrs else None
    nat_t, rep_t = sum(t[0] for t in times), sum(t[1] for t in times)
    pooled = 100.0 * (nat_t / rep_t - 1.0) if rep_t > 0 else None
    return mae, pooled, len(per)


def _split_half(sel: list[dict]) -> float | None:
    """The native runs' own repeatability: per window, the median time of its even-numbered
    repetitions against that of its odd-numbered ones (|ratio − 1|, %), averaged over the
    windows that have both. Two halves of the same requests differ only by the device's
    noise, so when this is as large as the MAE, the device — not the profile — limits the
    agreement (the median of all repetitions is about half as noisy as one half)."""
    halves: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for r in sel:
        halves[r["window"]][r["rep"] % 2].append(float(r["res"]["time_ms"]))
    errs = [
        100.0 * abs(median(a) / median(b) - 1.0)
        for a, b in halves.values()
        if a and b and median(b) > 0
    ]
    return sum(errs) / len(errs) if errs else None


def target_only_oracle_fit(rows: list[dict]) -> dict[str, Any] | None:
    """How well the replay's target-only cost form — per step a + b·(cache length) +
    c·(audio seconds) — can fit these native runs at best: least squares on the windows'
    median native times themselves (a hindsight fit, not a profile). Its MAE is a floor for
    any frozen profile's target-only MAE on the same runs; the rest is calibration error."""
    import numpy as np

    per: dict[str, list[float]] = defaultdict(list)
    shape: dict[str, tuple[int, float]] = {}
    for r in rows:
        if r["method"] == "target-only" and r.get("audio_s") is not None:
            per[r["window"]].append(float(r["res"]["time_ms"]))
            shape[r["window"]] = (int(r["res"]["n_tokens"]), float(r["audio_s"]))
    if len(per) < 4:  # three coefficients: fewer windows fit exactly and say nothing
        return None
    x = np.array([[n, n * (n - 1) / 2, n * a] for n, a in (shape[w] for w in per)], dtype=float)
    y = np.array([median(v) for v in per.values()])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    err = 100.0 * (x @ coef / y - 1.0)
    return {
        "windows": len(per),
        "mae_percent": float(np.mean(np.abs(err))),
        "step_ms": float(coef[0]),
        "per_cached_token_ms": float(coef[1]),
        "per_audio_s_ms": float(coef[2]),
    }


def host_per_pass(monitor_records: Iterable[dict]) -> list[dict[str, Any]]:
    """The host's CPU busy and steal fractions per pass over the windows (warm-up passes
    have ``pass`` < 0), from the /proc/stat readings before and after each window's runs
    (``cpu`` in the monitor records), weighted by the time each covered. A resumed pass
    pools its windows from every session; the rests between windows are not counted."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for rec in monitor_records:
        cpu = rec.get("cpu")
        if not cpu or not cpu.get("jiffies"):
            continue
        a = acc[int(rec["rep"])]
        a[0] += cpu["busy"] * cpu["jiffies"]
        a[1] += cpu["steal"] * cpu["jiffies"]
        a[2] += cpu["jiffies"]
    return [
        {"pass": rep, "warmup": rep < 0, "busy": round(b / j, 4), "steal": round(s / j, 4)}
        for rep, (b, s, j) in sorted(acc.items())
        if j > 0
    ]


def host_bound(summary: dict[str, Any]) -> dict[str, Any] | None:
    """When the host's state, not the profile, bounds the replay-vs-native agreement: the
    drift between measured passes (target-only's native TPS, max/min − 1) is larger than a
    method's MAE (median), or a measured pass ran with more than 5 % CPU steal."""
    per = [x for x in summary.get("target_only_tps_per_pass", []) if x]
    drift = 100.0 * (max(per) / min(per) - 1.0) if len(per) > 1 else None
    within = {
        m: s["mae_median_percent"]
        for m, s in summary["methods"].items()
        if drift is not None
        and s.get("mae_median_percent") is not None
        and s["mae_median_percent"] < drift
    }
    steals = [p["steal"] for p in summary.get("host_cpu_per_pass", []) if not p["warmup"]]
    steal = max(steals) if steals else None
    if not within and not (steal is not None and steal > STEAL_BOUND):
        return None
    return {
        "drift_percent": drift,
        "methods_within_drift": within,
        "max_steal": steal,
        "steal_over": steal is not None and steal > STEAL_BOUND,
    }


def time_split_per_token(results: list[dict]) -> dict[str, Any]:
    """Where native runs' time went (a result's ``time_split_ns``, as2d_cli/models/timing.py),
    in µs per token: the target's thread per committed token and the source per published
    token, each as ONNX Runtime calls, the Python around them and waiting for a CPU (the
    serial drafter's ORT time on the target's thread apart). Empty without the split."""
    out: dict[str, Any] = {}
    for side in ("target", "source"):
        parts = [
            (r["time_split_ns"][side], r)
            for r in results
            if (r.get("time_split_ns") or {}).get(side)
        ]
        n = sum(
            r["n_tokens"] if side == "target" else len(r.get("source_tokens") or [])
            for _, r in parts
        )
        if not parts or not n:
            continue
        out[side] = {
            k.removesuffix("_ns") + "_us": sum(p.get(k, 0) for p, _ in parts) / 1e3 / n
            for k in ("ort_ns", "python_ns", "wait_ns", "drafter_ort_ns")
        }
    return out


def _pooled_tps(rows: Iterable[dict], replay: bool) -> float | None:
    tok = t = 0.0
    for r in rows:
        n = r["res"]["n_tokens"]
        if replay:
            if not r.get("tps_replay"):
                return None
            t += n / r["tps_replay"]
        else:
            t += r["res"]["time_ms"] / 1e3
        tok += n
    return tok / t if t else None


def own_replay_times(
    per_window: Any, windows: Iterable[str]
) -> dict[str, dict[str, tuple[int, float]]]:
    """The replay part's own runs of ``windows`` (its per_window frame): per method, each
    window's (tokens, time ms) as the engine ran it with the trace's candidates."""
    want = set(windows)
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for m in ("target-only", "as2d"):
        sel = per_window[(per_window["method"] == m) & per_window["window"].isin(want)]
        out[m] = {
            str(w): (int(n), float(t))
            for w, n, t in zip(sel["window"], sel["tokens"], sel["time_ms"])
        }
    return out


def ratio_comparison(
    rows: list[dict], own: dict[str, dict[str, tuple[int, float]]] | None = None
) -> dict[str, Any] | None:
    """As²d / target-only as the replay predicts it and as the device gave it, over the same
    windows and repetitions; the native ratio per pass (each pass runs every window once)
    is the interval its repetitions give. ``replay`` is the replay's own runs of the
    windows (``own``, from the replay part: what a profile-priced table reports);
    ``repriced`` is the native runs' own trajectories priced with the profile. None
    without both methods."""
    by = {m: [r for r in rows if r["method"] == m] for m in ("target-only", "as2d")}
    if not all(by.values()):
        return None
    to_rep, a_rep = _pooled_tps(by["target-only"], True), _pooled_tps(by["as2d"], True)
    to_nat, a_nat = _pooled_tps(by["target-only"], False), _pooled_tps(by["as2d"], False)
    per_pass = []
    for rep in sorted({r["rep"] for r in rows}):
        t = _pooled_tps([r for r in by["target-only"] if r["rep"] == rep], False)
        a = _pooled_tps([r for r in by["as2d"] if r["rep"] == rep], False)
        if t and a:
            per_pass.append(a / t)
    repriced = a_rep / to_rep if a_rep and to_rep else None
    native = a_nat / to_nat if a_nat and to_nat else None
    replay = _own_ratio(by, own) if own else repriced
    return {
        "replay": replay,
        "repriced": repriced,
        "native": native,
        "native_per_pass": per_pass,
        "native_range": [min(per_pass), max(per_pass)] if per_pass else None,
        "replay_over_native": replay / native if replay and native else None,
    }


def _own_ratio(
    by: dict[str, list[dict]], own: dict[str, dict[str, tuple[int, float]]]
) -> float | None:
    """As²d / target-only of the replay's own runs, weighted as the native runs are (each
    window as often as it ran natively)."""
    tps = []
    for m in ("target-only", "as2d"):
        n = t = 0.0
        for r in by[m]:
            got = own.get(m, {}).get(r["window"])
            if got is None:
                return None
            n, t = n + got[0], t + got[1]
        tps.append(n / t if t else 0.0)
    return tps[1] / tps[0] if tps[0] and tps[1] else None


def summarize(
    rows: list[dict],
    host: list[dict] | None = None,
    own: dict[str, dict[str, tuple[int, float]]] | None = None,
) -> dict[str, Any]:
    """``host``: the host's CPU per pass (:func:`host_per_pass`), when it was read; ``own``:
    the replay part's own runs of the windows (:func:`own_replay_times`)."""
    out: dict[str, Any] = {"methods": {}}
    drift = _drift_factors(rows)
    for m in METHODS:
        sel = [r for r in rows if r["method"] == m]
        tok = sum(r["res"]["n_tokens"] for r in sel)
        t_nat = sum(r["res"]["time_ms"] for r in sel) / 1e3
        t_rep = (
            sum(r["res"]["n_tokens"] / r["tps_replay"] for r in sel if r["tps_replay"])
            if sel
            else 0.0
        )
        errs = [r["error_percent"] for r in sel if r["error_percent"] is not None]
        inexact = [r for r in sel if r["divergence"] is not None]
        mae, pooled, n_windows = _agreement(sel, lambda r: 1.0)
        # The same with the device's common-mode drift taken out: each pass's replay scaled by
        # target-only's native/replayed time in that pass (target-only's own pooled error is
        # then 0 by construction; the other methods' residual is their cost model's error).
        mae_adj, pooled_adj, _ = _agreement(sel, lambda r: drift.get(r["rep"]))
        mae_med, pooled_med, _ = _agreement(sel, lambda r: 1.0, how="median")
        out["methods"][m] = {
            "runs": len(sel),
            "windows": n_windows,
            "pooled_tps_native": tok / t_nat if t_nat else None,
            "pooled_tps_replay": tok / t_rep if t_rep else None,
            "mae_percent": mae,
            "mae_runs_percent": sum(abs(e) for e in errs) / len(errs) if errs else None,
            "pooled_error_percent": pooled,
            "mae_median_percent": mae_med,
            "pooled_error_median_percent": pooled_med,
            "mae_drift_adjusted_percent": mae_adj,
            "pooled_error_drift_adjusted_percent": pooled_adj,
            "split_half_percent": _split_half(sel),
            "exact": len(sel) - len(inexact),
            "divergences": [
                {"window": r["window"], "rep": r["rep"], **r["divergence"]} for r in inexact
            ],
        }
        split = time_split_per_token([r["res"] for r in sel])
        if split:
            out["methods"][m]["time_split_us_per_token"] = split
    out["drift_factor_per_pass"] = [drift[k] for k in sorted(drift)]
    out["replay_gap"] = gap_summary(rows)
    out["target_only_oracle_fit"] = target_only_oracle_fit(rows)
    to = out["methods"]["target-only"]["pooled_tps_native"]
    a = out["methods"]["as2d"]["pooled_tps_native"]
    out["as2d_over_target_only_native"] = a / to if a and to else None
    out["as2d_ratio"] = ratio_comparison(rows, own)
    if out["as2d_ratio"] is not None:
        out["as2d_ratio"]["factors"] = ratio_factors(out["replay_gap"], out["as2d_ratio"]["replay"])
    # The device's own speed over the run: target-only pooled TPS per pass over the windows
    # (the same requests each pass); the replay's frozen profile cannot follow such drift.
    passes: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        if r["method"] == "target-only":
            passes[r["rep"]][0] += r["res"]["n_tokens"]
            passes[r["rep"]][1] += r["res"]["time_ms"] / 1e3
    out["target_only_tps_per_pass"] = [n / t if t else None for _, (n, t) in sorted(passes.items())]
    out["host_cpu_per_pass"] = list(host or [])
    out["host_bound"] = host_bound(out)
    return out
