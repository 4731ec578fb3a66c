"""What a native evaluation writes and prints: the agreement table (``native.txt``), the
results document (``native.json``, kind ``eval-native``), the tidy per-run table
(``native_per_window.csv``) and the replay-vs-native plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from as2d_cli.evaluate.fixed import text_table
from as2d_cli.evaluate.native_record import PER_RUN, PLOT, RESULTS, TABLE, run_spec
from as2d_cli.evaluate.native_stats import STEAL_BOUND
from as2d_cli.evaluate.replay_gap import render_gap, render_ratio_factors
from as2d_cli.formats.common import atomic_path, write_atomic
from as2d_cli.formats.results import make_results, write_results

NATIVE_COLUMNS = [
    "window",
    "dataset",
    "rep",
    "method",
    "config",
    "tokens",
    "time_ms",
    "tps",
    "tps_replay",
    "exact",
]


def render_native(summary: dict[str, Any]) -> str:
    lines = _method_table(summary)
    lines.append("")
    vs = summary.get("replay_vs_native") or {}
    if vs.get("kind") == "expected_error":  # the profile was not measured on this device
        lines.insert(
            0,
            f"replay vs native: expected error (profile of another device / synthetic), not "
            f"agreement — {vs.get('why')}; calibrate this device for agreement",
        )
        lines.append(
            "expected error per window: replay vs the median native time of its repetitions "
            "(D.3), and vs their pooled time"
        )
    else:
        lines.append(
            "agreement per window: replay vs the median native time of its repetitions (D.3), and vs their pooled time"
        )
    r = summary.get("as2d_over_target_only_native")
    lines.append("native As²d / target-only pooled: " + ("—" if r is None else f"{r:.3f}×"))
    lines += _ratio_line(summary.get("as2d_ratio"))
    lines.append(
        "split-half: per window, the median native time of the even repetitions vs the odd ones "
        "(the device's own repeatability)"
    )
    lines += _device_lines(summary)
    lines += _time_split_lines(summary)
    lines += render_gap(summary.get("replay_gap") or {})
    lines += render_ratio_factors((summary.get("as2d_ratio") or {}).get("factors"))
    for d in summary.get("warmup_divergences", []):
        lines.append(_divergence_line(d["run"], d, "warm-up"))
    for m, s in summary["methods"].items():
        for d in s["divergences"]:
            lines.append(_divergence_line(m, d, f"rep {d['rep']}"))
    return "\n".join(lines) + "\n"


def _method_table(summary: dict[str, Any]) -> list[str]:
    """One row per method: its runs, native and replayed TPS, agreement and exactness."""
    head = [
        "method",
        "runs",
        "native TPS",
        "replay TPS",
        "MAE % (median)",
        "pooled err % (median)",
        "MAE % (pooled)",
        "pooled err % (pooled)",
        "MAE % drift-adj",
        "split-half %",
        "exact",
    ]
    body = [
        [
            m,
            str(s["runs"]),
            _f(s["pooled_tps_native"]),
            _f(s["pooled_tps_replay"]),
            _f(s.get("mae_median_percent")),
            _f(s.get("pooled_error_median_percent"), signed=True),
            _f(s["mae_percent"]),
            _f(s["pooled_error_percent"], signed=True),
            _f(s.get("mae_drift_adjusted_percent")),
            _f(s.get("split_half_percent")),
            f"{s['exact']}/{s['runs']}",
        ]
        for m, s in summary["methods"].items()
    ]
    return text_table(head, body)


def _device_lines(summary: dict[str, Any]) -> list[str]:
    """What the device did beside the methods: the target-only oracle fit, drift between
    passes, the host's CPU steal, a host-bound run, the drift adjustment."""
    lines = []
    fit = summary.get("target_only_oracle_fit")
    if fit:
        lines.append(
            f"target-only oracle fit (per step a + b·cache + c·audio, fitted to these native medians): "
            f"MAE {fit['mae_percent']:.2f} % on {fit['windows']} windows — no profile of that form agrees "
            f"better with these runs (a {fit['step_ms']:.3f} ms, b {fit['per_cached_token_ms']:.4f} ms/token, "
            f"c {fit['per_audio_s_ms']:.4f} ms/s)"
        )
    per = [x for x in summary.get("target_only_tps_per_pass", []) if x]
    if len(per) > 1:
        lines.append(
            "device drift: target-only TPS per pass "
            + " / ".join(f"{x:.1f}" for x in per)
            + f" ({100 * (max(per) / min(per) - 1):.1f} % apart)"
        )
    host = summary.get("host_cpu_per_pass") or []
    if host:
        lines.append(
            "host CPU steal per pass (/proc/stat over each window's runs): "
            + " / ".join(
                f"{100 * p['steal']:.1f}" + (" (warm-up)" if p["warmup"] else "") for p in host
            )
            + " %"
        )
    if summary.get("host_bound"):
        lines.append(_host_bound_line(summary["host_bound"], len(summary["methods"])))
    if summary.get("drift_factor_per_pass"):
        lines.append(
            "drift-adj: each pass's replay scaled by target-only's native/replayed time in that pass "
            "(" + " / ".join(f"{f:.3f}" for f in summary["drift_factor_per_pass"]) + ")"
        )
    return lines


def _time_split_lines(summary: dict[str, Any]) -> list[str]:
    """Per method, where its time per token went (ONNX Runtime, Python, waiting)."""
    split = {
        m: s["time_split_us_per_token"]
        for m, s in summary["methods"].items()
        if s.get("time_split_us_per_token")
    }
    if not split:
        return []
    lines = ["time per token (µs): ONNX Runtime calls / Python around them / waiting for a CPU"]
    for m, sides in split.items():
        lines.append(f"  {m:<12} " + "; ".join(split_text(side, v) for side, v in sides.items()))
    return lines


def split_text(side: str, v: dict[str, float]) -> str:
    """One side of a method's time split: ``target 450 / 45 / 2`` (and the serial drafter's
    ORT share on the target's thread)."""
    text = f"{side} {v['ort_us']:.0f} / {v['python_us']:.0f} / {v['wait_us']:.0f}"
    if v.get("drafter_ort_us"):
        text += f" (of the ORT time, the serial drafter's {v['drafter_ort_us']:.0f})"
    return text


def _host_bound_line(b: dict[str, Any], n_methods: int) -> str:
    """One line: the host's drift between passes (or its CPU steal), not the profile,
    bounds the agreement."""
    parts = []
    within = b.get("methods_within_drift") or {}
    if within:
        whose = (
            f"every method's MAE % (median) (at most {max(within.values()):.2f} %)"
            if len(within) == n_methods
            else "the MAE % (median) of " + ", ".join(f"{m} ({v:.2f})" for m, v in within.items())
        )
        parts.append(
            f"target-only's native TPS moved {b['drift_percent']:.1f} % between passes, more than {whose}"
        )
    if b.get("steal_over"):
        parts.append(
            f"CPU steal reached {100 * b['max_steal']:.1f} % in a measured pass "
            f"(over {100 * STEAL_BOUND:g} %)"
        )
    why = "the host's drift between passes" if within else "the host's shared CPU"
    return f"host bound: {'; '.join(parts)} — {why}, not the profile, bounds this agreement"


def _divergence_line(method: str, d: dict, when: str) -> str:
    return (
        f"DIVERGENCE {method} on {d['window']} ({when}): position {d['position']}, target-only "
        f"{d['target_only']} (top-2 margin {d['margin_target_only']}) vs {d['method']} "
        f"(margin {d['margin_method']})"
    )


def _f(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _config(res: dict) -> str:
    """A native run's configuration, named as the replay names it (``MethodSpec.label``)."""
    return run_spec(res).label


def write_native_table(rows: list[dict], path: Path, *, force: bool = False) -> Path:
    """One row per measured native run (window, repetition, method): the tidy table of the
    native runs, which `as2d compare --native` reads; written atomically (``force``:
    replacing one there)."""
    import pandas as pd

    recs = [
        {
            "window": r["window"],
            "dataset": r["dataset"],
            "rep": r["rep"],
            "method": r["method"],
            "config": _config(r["res"]),
            "tokens": r["res"]["n_tokens"],
            "time_ms": r["res"]["time_ms"],
            "tps": r["tps_native"],
            "tps_replay": r["tps_replay"],
            "exact": r["divergence"] is None,
        }
        for r in rows
    ]
    with atomic_path(path, force=force) as tmp:
        pd.DataFrame(recs, columns=NATIVE_COLUMNS).to_csv(tmp, index=False)
    return path


def write_native_outputs(
    folder: Path,
    rows: list[dict],
    summary: dict[str, Any],
    *,
    device: Any,
    profile_path: Path,
    profile_device: dict[str, Any],
    settings: dict[str, Any],
    gates: list[dict],
    sessions: int,
    files: dict[str, str],
) -> tuple[Path, str]:
    """``native.json``, ``native.txt``, ``native_per_window.csv`` and the plot, each written
    atomically; returns the results path and the table. Ones already there are replaced:
    only a native part whose finishing was cut short has them (``reopen_eval`` refuses a
    complete one)."""
    table = render_native(summary)
    doc = make_results(
        "eval-native",
        {
            "device": device.serial,
            "identity": settings["device"],
            "profile": str(profile_path),
            "windows": settings["windows"],
            "repeats": settings["repeats"],
            "warmup": settings["warmup"],
            "sessions": sessions,
            "records": files,
            "summary": summary,
            "gates": gates,
            "rows": [
                {k: v for k, v in r.items() if k != "res"}
                | {
                    "tokens": r["res"]["n_tokens"],
                    "time_ms": r["res"]["time_ms"],
                    "eos": r["res"]["eos"],
                    "accounting_ms": r["res"]["accounting_ms"],
                    "config": {
                        kk: v
                        for kk, v in run_spec(r["res"]).to_wire().items()
                        if kk in ("k", "budget", "source", "threshold", "batch")
                    },
                }
                for r in rows
            ],
        },
        inputs={"profile": profile_path},
        device=profile_device,
    )
    path = write_results(folder / RESULTS, doc, force=True)
    write_atomic(folder / TABLE, table.encode("utf-8"), force=True)
    table_path = write_native_table(rows, folder / PER_RUN, force=True)
    if rows:
        from as2d_cli.evaluate.report import plot_native

        ident = settings.get("device") or {}
        name = ident.get("marketing_name") or ident.get("name") or "device"
        plot_native(
            table_path,
            folder / Path(PLOT).stem,
            f"{name} · profile {Path(profile_path).name}: replay against native per window",
            formats=(Path(PLOT).suffix.lstrip("."),),
            force=True,
        )
    return path, table


def _ratio_line(c: dict[str, Any] | None) -> list[str]:
    """The As²d / target-only ratio the replay predicts beside the one the device gave."""
    if not c or c.get("replay") is None or c.get("native") is None:
        return []
    lo, hi = c["native_range"] or (c["native"], c["native"])
    rep = c.get("repriced")
    again = (
        f" (the native runs' own trajectories repriced: {rep:.3f}×)"
        if rep is not None and rep != c["replay"]
        else ""
    )
    return [
        f"As²d / target-only: replay {c['replay']:.3f}×{again}, native {c['native']:.3f}× "
        f"(per pass {lo:.3f}–{hi:.3f}×, {len(c['native_per_pass'])} passes); replay ÷ native "
        f"{c['replay_over_native']:.3f}"
    ]
