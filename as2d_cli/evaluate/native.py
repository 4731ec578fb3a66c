"""`as2d eval --native`: the methods natively on the device, exactness, replay agreement.

Methods run window by window with a rotating order (and interleaved repetitions) so they
share machine conditions. Every output is compared with target-only on the same window: a
difference is reported with its first divergent position and both top-2 logit margins
(Appendix F.6), never hidden. Agreement follows D.3: the native-produced token
trajectories (target tokens, the source's published candidates, the serial drafts) are
replayed with the frozen profile, and the signed TPS error 100·(TPS_replay/TPS_native − 1)
is reported per run; a window's error pools its repetitions (TPS over all its runs), and
the table gives the mean absolute per-window error and the pooled error.
"""

from __future__ import annotations

import dataclasses

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Callable

from as2d_cli.evaluate.fixed import text_table
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.results import make_results, write_results
from as2d_cli.formats.trace import AUTOREGRESSIVE, CHUNKED, Chunk, DrafterTrace, SourceTrace, WindowTrace
from as2d_cli.evaluate.replay_gap import gap_summary, native_facts, render_gap, replay_facts
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for
from as2d_cli.engine.methods import DEFAULT_BATCH, DEFAULT_SD_K, DEFAULT_THRESHOLD, MethodSpec, asp_cap

Say = Callable[[str], None]
METHODS = ("target-only", "sd", "asp", "as2d")


@dataclass
class NativeEvalOutput:
    results: Path
    table: str
    summary: dict[str, Any]


def pick_windows(ids: list[str], datasets: dict[str, str], n: int) -> list[str]:
    """``n`` windows spread round-robin over the datasets, in trace order."""
    by: dict[str, list[str]] = defaultdict(list)
    for i in ids:
        by[datasets[i]].append(i)
    out: list[str] = []
    while len(out) < min(n, len(ids)):
        for d in sorted(by):
            if by[d] and len(out) < n:
                out.append(by[d].pop(0))
    return out


def divergence(ref: dict, res: dict) -> dict | None:
    """First position where ``res`` departs from the target-only ``ref``, with margins."""
    a, b = ref["tokens"], res["tokens"]
    if a == b:
        return None
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    ma, mb = ref.get("margins") or [], res.get("margins") or []
    return {"position": i, "target_only": a[i] if i < len(a) else None, "method": b[i] if i < len(b) else None,
            "margin_target_only": ma[i] if i < len(ma) else None, "margin_method": mb[i] if i < len(mb) else None}


def native_trace(window: str, dataset: str, res: dict, eos_id: int, audio_s: float = 0.0) -> WindowTrace:
    """The trajectory a native run produced, as a one-window trace for replay (``audio_s``
    prices the profile's audio-length terms)."""
    ref = tuple(res["tokens"])
    sources = {}
    if res.get("source_tokens") is not None:
        toks = tuple(res["source_tokens"])
        confs = res.get("source_confidences")
        conf = None if confs is None or any(c is None for c in confs) else tuple(confs)
        if res["source"] == "ctc":
            chunks = tuple(Chunk(toks[off:off + n], 2.56 * (i + 1)) for i, (_, off, n) in enumerate(res["publications_ms"]))
            sources[res["source"]] = SourceTrace(CHUNKED, toks, None, chunks, eos=True, eligible=True)
        else:
            sources[res["source"]] = SourceTrace(AUTOREGRESSIVE, toks, conf, None, eos=bool(toks) and toks[-1] == eos_id)
    drafter = None
    if res.get("drafts"):
        longest: dict[int, dict] = {}
        for d in res["drafts"]:
            p = d["position"]
            if p not in longest or len(d["tokens"]) > len(longest[p]["tokens"]):
                longest[p] = d
        # ASP's drafts end at its confidence stop, which the replay's drafter reproduces from
        # the recorded confidences; the trace's cap is the method's, not the longest draft.
        cap = max([len(d["tokens"]) for d in longest.values()] + [int(res.get("cap") or 0)])
        conts = tuple(tuple(longest[p]["tokens"]) if p in longest else () for p in range(len(ref)))
        confs_ = tuple(tuple(longest[p]["confidences"] or ()) if p in longest else () for p in range(len(ref)))
        drafter = DrafterTrace(cap, conts, confs_)
    return WindowTrace(window, dataset, "test", audio_s, "asr", "", ref, bool(res["eos"]), bool(res["capped"]),
                       int(res["max_tokens"]), eos_id, sources, drafter, None)


def native_commands(dep: Any, asp_cap_: int) -> dict[str, dict[str, Any]]:
    """The decode settings of each natively run method: the deployment's As²d (source,
    budget, threshold, batch) and the baselines' defaults."""
    return {
        "target-only": {},
        "sd": {"k": DEFAULT_SD_K},
        "asp": {"cap": asp_cap_},
        "as2d": {"budget": dep.budget, "source": dep.source, "threshold": dep.threshold, "batch": dep.batch},
    }


def replay_native(profile: CostProfile, w: WindowTrace, res: dict) -> tuple[float | None, dict[str, Any]]:
    """The replayed TPS of a native run's trajectory, and the replay's figures for the
    op-by-op comparison (``replay_gap``)."""
    m = res["method"]
    if m == "target-only":
        spec = MethodSpec("target-only")
    elif m == "sd":
        spec = MethodSpec("sd", k=res["k"])
    elif m == "asp":
        spec = MethodSpec("asp", budget=res["cap"], threshold=res.get("threshold", DEFAULT_THRESHOLD))
    else:  # the run's own settings (the deployment's), so the replay prices the same policy
        spec = MethodSpec("as2d", budget=res["budget"], source=res["source"],
                          threshold=res.get("threshold", DEFAULT_THRESHOLD), batch=res.get("batch") or DEFAULT_BATCH)
    prep = Prepared(profile, spec)
    tl = timeline_for(w, prep, spec.source) if spec.decoupled and spec.source is not None else None
    r = replay_window(w, prep, detail=True, timeline=tl)
    return r.tps, replay_facts(r, tl[1] if tl is not None else None)


def run_native_eval(phone: str, out: Any, *, windows: int = 20, repeats: int = 1, warmup: int = 1,
                    say: Say = lambda s: None, gate: Any = None, models: Any = None, task: str | None = None,
                    language: str | None = None) -> NativeEvalOutput:
    """``gate``: a device_agents GateConfig checked before every window (None: the device's default).

    ``warmup`` passes over the windows run first and are not measured (D.3: one warm-up
    repetition before the measured ones); their outputs are still checked for exactness."""
    from as2d_cli.errors import DeviceError
    from device_agents.gating import GateConfig, run_gate, settle
    from device_agents.registry import resolve_phone
    from native.host import default_cores, open_runner

    device = resolve_phone(phone)
    gate_cfg = gate or GateConfig.for_device(device)
    gates: list[dict] = []
    profile = load_profile(out.profile_path)
    ev = out.evaluation
    dep = ev.deployment
    ds = {wid: r.dataset for wid, r in zip(ev.window_ids, ev.runs["target-only"].windows)}
    from as2d_cli.corpus.manifest import load_corpus

    seconds = load_corpus().seconds()
    ref_s = profile.context.ref_audio_s if profile.context is not None else 0.0  # unknown window: no audio term
    picks = pick_windows(ev.window_ids, ds, windows)
    cap = asp_cap(profile.max_width)
    cmds = native_commands(dep, cap)
    tc, pc = default_cores() if device.kind == "local" else (None, None)
    rows: list[dict] = []
    raw_path = out.folder / "native.runs.jsonl"  # every finished window, written as it finishes
    say(f"native runs on {device.serial}: {len(picks)} windows × {len(METHODS)} methods × {repeats} repeats"
        + (f" after {warmup} warm-up pass(es)" if warmup else ""))
    total = len(picks) * (repeats + warmup)
    warm_inexact: list[dict] = []
    with open_runner(device, None if models is None else str(models), target_cores=tc, producer_cores=pc,
                     task=task, language=language) as runner:
        loaded = runner.call({"op": "hello"})
        settled = None
        if gate_cfg.settle_s > 0:  # once, with the models loaded, before the first measured window
            say(f"waiting until the host has been quiet for {gate_cfg.settle_s:g} s (--settle 0 skips)")
            settled = settle(device, gate_cfg.settle_s)
            say(settled.message)
        eos_id = None
        n = 0
        for rep in range(-warmup, repeats):  # rep < 0: an unmeasured warm-up pass
            for i, wid in enumerate(picks):
                g = run_gate(device, gate_cfg)  # the device's sysfs, before every window
                gates.append({**g.to_dict(), "window": wid, "rep": rep})
                if settled is not None and len(gates) == 1:
                    gates[0]["observations"].insert(0, dataclasses.asdict(settled))
                if not g.passed:
                    kept = f"the {n} finished window(s) are kept in {raw_path}" if n else "no native window had run"
                    raise DeviceError(f"native window {n + 1}/{total} ({wid}) not started: {g.failure}; "
                                      f"{kept}")
                k = (i + rep) % len(METHODS)
                order = METHODS[k:] + METHODS[:k]
                got = {}
                # One batch per window: on a phone that is one runner start for the four methods.
                batch = runner.batch([{"op": "decode", "window": wid, "method": m, "events": False, **cmds[m]}
                                      for m in order])
                for m, res in zip(order, batch):
                    got[m] = res
                    got[m]["cap"] = cmds[m].get("cap")
                n += 1
                with open(raw_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"window": wid, "rep": rep, "warmup": rep < 0, "gate": gates[-1],
                                        "runs": got}) + "\n")
                say(f"[{n}/{total}] {'warm-up ' if rep < 0 else ''}{wid}: "
                    + "  ".join(f"{m} {got[m]['tps']:.1f}" for m in METHODS))
                if rep < 0:
                    # (``d["method"]`` is the method's token there; the run is named apart)
                    warm_inexact += [{"window": wid, "run": m, **d} for m in METHODS
                                     if (d := divergence(got["target-only"], got[m])) is not None]
                    continue
                for m in METHODS:
                    rows.append({"window": wid, "dataset": ds[wid], "rep": rep, "method": m, "res": got[m],
                                 "divergence": divergence(got["target-only"], got[m])})
        del loaded
    eos_id = _eos(rows)
    for r in rows:
        res = r["res"]
        w = native_trace(r["window"], r["dataset"], res, eos_id, seconds.get(r["window"], ref_s))
        r["audio_s"] = seconds.get(r["window"], ref_s)
        r["tps_native"] = res["tps"]
        r["tps_replay"], r["replay_facts"] = replay_native(profile, w, res)
        r["native_facts"] = native_facts(res)
        r["error_percent"] = (100.0 * (r["tps_replay"] / r["tps_native"] - 1.0)
                              if r["tps_replay"] and r["tps_native"] else None)
    summary = summarize(rows)
    summary["warmup_divergences"] = warm_inexact
    table = render_native(summary)
    doc = make_results("eval-native", {
        "device": device.serial, "profile": str(out.profile_path), "windows": picks, "repeats": repeats,
        "warmup": warmup,
        "summary": summary, "gates": gates,
        "rows": [{k: v for k, v in r.items() if k != "res"} | {
            "tokens": r["res"]["n_tokens"], "time_ms": r["res"]["time_ms"], "eos": r["res"]["eos"],
            "accounting_ms": r["res"]["accounting_ms"], "config": {kk: r["res"].get(kk) for kk in ("k", "budget", "source", "cap", "threshold", "batch")},
        } for r in rows],
    }, inputs={"profile": out.profile_path}, device=dict(profile.device))
    path = write_results(out.folder / "native.json", doc)
    (out.folder / "native.txt").write_text(table, encoding="utf-8")
    table_path = write_native_table(rows, out.folder / "native_per_window.csv")
    if rows:
        from as2d_cli.evaluate.report import plot_native

        plot_native(table_path, out.folder / "native_vs_replay.png",
                    f"{device.serial} · profile {Path(out.profile_path).name}\nreplay vs native per window")
    return NativeEvalOutput(path, table, summary)


def _config(res: dict) -> str:
    """A native run's configuration, named as the replay names it (``MethodSpec.label``)."""
    m = res["method"]
    if m == "target-only":
        return m
    if m == "sd":
        return f"sd-k{res['k']}"
    src = f"{res['source']}/" if res.get("source") and m in ("as2d", "as2d-no-bc") else ""
    return f"{m}({src}b{res.get('budget') or res.get('cap')})"


NATIVE_COLUMNS = ["window", "dataset", "rep", "method", "config", "tokens", "time_ms", "tps", "tps_replay", "exact"]


def write_native_table(rows: list[dict], path: Path) -> Path:
    """One row per measured native run (window, repetition, method): the tidy table of the
    native runs, which `as2d compare --native` reads."""
    import pandas as pd

    recs = [{"window": r["window"], "dataset": r["dataset"], "rep": r["rep"], "method": r["method"],
             "config": _config(r["res"]),
             "tokens": r["res"]["n_tokens"], "time_ms": r["res"]["time_ms"], "tps": r["tps_native"],
             "tps_replay": r["tps_replay"], "exact": r["divergence"] is None} for r in rows]
    pd.DataFrame(recs, columns=NATIVE_COLUMNS).to_csv(path, index=False)
    return path


def _eos(rows: list[dict]) -> int:
    for r in rows:
        if r["res"]["eos"]:
            return int(r["res"]["tokens"][-1])
    return -1


def _drift_factors(rows: list[dict]) -> dict[int, float]:
    """Per pass, target-only's pooled native time over its replayed time: how much slower
    (> 1) or faster the device ran in that pass than the frozen profile says."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        if r["method"] == "target-only" and r["tps_replay"] and r["tps_native"]:
            acc[r["rep"]][0] += r["res"]["n_tokens"] / r["tps_native"]
            acc[r["rep"]][1] += r["res"]["n_tokens"] / r["tps_replay"]
    return {rep: nat / rep_t for rep, (nat, rep_t) in acc.items() if rep_t > 0}


def _agreement(sel: list[dict], scale: Callable[[dict], float | None], how: str = "pool"
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
    errs = [100.0 * abs(median(a) / median(b) - 1.0) for a, b in halves.values() if a and b and median(b) > 0]
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
    return {"windows": len(per), "mae_percent": float(np.mean(np.abs(err))),
            "step_ms": float(coef[0]), "per_cached_token_ms": float(coef[1]), "per_audio_s_ms": float(coef[2])}


def summarize(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {"methods": {}}
    drift = _drift_factors(rows)
    for m in METHODS:
        sel = [r for r in rows if r["method"] == m]
        tok = sum(r["res"]["n_tokens"] for r in sel)
        t_nat = sum(r["res"]["time_ms"] for r in sel) / 1e3
        t_rep = sum(r["res"]["n_tokens"] / r["tps_replay"] for r in sel if r["tps_replay"]) if sel else 0.0
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
            "divergences": [{"window": r["window"], "rep": r["rep"], **r["divergence"]} for r in inexact],
        }
    out["drift_factor_per_pass"] = [drift[k] for k in sorted(drift)]
    out["replay_gap"] = gap_summary(rows)
    out["target_only_oracle_fit"] = target_only_oracle_fit(rows)
    to = out["methods"]["target-only"]["pooled_tps_native"]
    a = out["methods"]["as2d"]["pooled_tps_native"]
    out["as2d_over_target_only_native"] = a / to if a and to else None
    # The device's own speed over the run: target-only pooled TPS per pass over the windows
    # (the same requests each pass); the replay's frozen profile cannot follow such drift.
    passes: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        if r["method"] == "target-only":
            passes[r["rep"]][0] += r["res"]["n_tokens"]
            passes[r["rep"]][1] += r["res"]["time_ms"] / 1e3
    out["target_only_tps_per_pass"] = [n / t if t else None for _, (n, t) in sorted(passes.items())]
    return out


def render_native(summary: dict[str, Any]) -> str:
    head = ["method", "runs", "native TPS", "replay TPS", "MAE % (median)", "pooled err % (median)", "MAE % (pooled)",
            "pooled err % (pooled)", "MAE % drift-adj", "split-half %", "exact"]
    body = []
    for m, s in summary["methods"].items():
        body.append([m, str(s["runs"]), _f(s["pooled_tps_native"]), _f(s["pooled_tps_replay"]),
                     _f(s.get("mae_median_percent")), _f(s.get("pooled_error_median_percent"), signed=True),
                     _f(s["mae_percent"]), _f(s["pooled_error_percent"], signed=True),
                     _f(s.get("mae_drift_adjusted_percent")), _f(s.get("split_half_percent")),
                     f"{s['exact']}/{s['runs']}"])
    lines = text_table(head, body)
    r = summary.get("as2d_over_target_only_native")
    lines.append("")
    lines.append("agreement per window: replay vs the median native time of its repetitions (D.3), and vs their pooled time")
    lines.append("native As²d / target-only pooled: " + ("—" if r is None else f"{r:.3f}×"))
    lines.append("split-half: per window, the median native time of the even repetitions vs the odd ones "
                 "(the device's own repeatability)")
    fit = summary.get("target_only_oracle_fit")
    if fit:
        lines.append(f"target-only oracle fit (per step a + b·cache + c·audio, fitted to these native medians): "
                     f"MAE {fit['mae_percent']:.2f} % on {fit['windows']} windows — no profile of that form agrees "
                     f"better with these runs (a {fit['step_ms']:.3f} ms, b {fit['per_cached_token_ms']:.4f} ms/token, "
                     f"c {fit['per_audio_s_ms']:.4f} ms/s)")
    per = [x for x in summary.get("target_only_tps_per_pass", []) if x]
    if len(per) > 1:
        lines.append("device drift: target-only TPS per pass " + " / ".join(f"{x:.1f}" for x in per)
                     + f" ({100 * (max(per) / min(per) - 1):.1f} % apart)")
    if summary.get("drift_factor_per_pass"):
        lines.append("drift-adj: each pass's replay scaled by target-only's native/replayed time in that pass "
                     "(" + " / ".join(f"{f:.3f}" for f in summary["drift_factor_per_pass"]) + ")")
    lines += render_gap(summary.get("replay_gap") or {})
    for d in summary.get("warmup_divergences", []):
        lines.append(_divergence_line(d["run"], d, "warm-up"))
    for m, s in summary["methods"].items():
        for d in s["divergences"]:
            lines.append(_divergence_line(m, d, f"rep {d['rep']}"))
    return "\n".join(lines) + "\n"


def _divergence_line(method: str, d: dict, when: str) -> str:
    return (f"DIVERGENCE {method} on {d['window']} ({when}): position {d['position']}, target-only "
            f"{d['target_only']} (top-2 margin {d['margin_target_only']}) vs {d['method']} "
            f"(margin {d['margin_method']})")


def _f(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.2f}" if signed else f"{x:.2f}"
