"""Where a native run and its replay part ways, op by op.

The agreement error (D.3) says how far the replayed TPS is from the native one; it does not
say why. Replaying a native run's own trajectory with the frozen profile keeps the tokens
and the source's candidates, so what can differ is (a) the price of the work — the
verifier's busy time V, and the time it is not busy, T − V — and (b) the work itself: the
rounds the target took and the tokens it accepted, which follow from *when* the source's
batches were ready. For a target-decoupled source the publication times are compared
directly: native (the runner's clock) against the replay's producer timeline.

Every figure pools the runs of one method (sums, then a ratio replay/native), so a long
window weighs as much as its time; the publication lag is the median over all matched
publications (native − replay, ms; > 0: the native source was later than the profile says).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

from as2d_cli.replay.driver import WindowReplay
from as2d_cli.replay.producer import ProducerTimeline

POOLED = ("time_ms", "verifier_ms", "not_verifying_ms", "rounds", "accepted", "proposed")


def native_facts(res: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one native run (a runner ``decode`` result)."""
    acc = res.get("accounting_ms") or {}
    summ = res.get("summary") or {}
    t = float(res["time_ms"])
    v = float(acc.get("V", 0.0))
    return {
        "time_ms": t,
        "verifier_ms": v,
        "not_verifying_ms": t - v,
        "rounds": int(summ.get("rounds", 0)),
        "accepted": int(summ.get("accepted", 0)),
        "proposed": int(summ.get("proposed", 0)),
        "publications_ms": [float(p[0]) for p in res.get("publications_ms") or []],
        "producer_finished_ms": res.get("producer_finished_ms"),
    }


def replay_facts(rep: WindowReplay, timeline: ProducerTimeline | None) -> dict[str, Any]:
    """The same figures of its replay (``rep`` from a ``detail`` run)."""
    t = rep.time_ns / 1e6
    v = rep.V / 1e6
    return {
        "time_ms": t,
        "verifier_ms": v,
        "not_verifying_ms": t - v,
        "rounds": rep.rounds,
        "accepted": rep.accepted,
        "proposed": rep.proposed,
        "publications_ms": [p.at / 1e6 for p in timeline.publications]
        if timeline is not None
        else [],
        "producer_finished_ms": timeline.finish / 1e6 if timeline is not None else None,
    }


def _lags(pairs: Iterable[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """native − replay for each matched (i-th with i-th) publication."""
    return [a - b for nat, rep in pairs for a, b in zip(nat, rep)]


def gap_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: pooled native and replayed figures and their ratio, and the source's
    publication lags. Rows without both ``native_facts`` and ``replay_facts`` are skipped."""
    by: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("native_facts") and r.get("replay_facts"):
            by[r["method"]].append(r)
    out: dict[str, dict[str, Any]] = {}
    for m, sel in by.items():
        d: dict[str, Any] = {"runs": len(sel)}
        for k in POOLED:
            nat = sum(r["native_facts"][k] for r in sel)
            rep = sum(r["replay_facts"][k] for r in sel)
            d[k] = {"native": nat, "replay": rep, "ratio": rep / nat if nat else None}
        pairs = [
            (r["native_facts"]["publications_ms"], r["replay_facts"]["publications_ms"])
            for r in sel
        ]
        lags, first = _lags(pairs), _lags((nat[:1], rep[:1]) for nat, rep in pairs)
        fin = [
            r["native_facts"]["producer_finished_ms"] - r["replay_facts"]["producer_finished_ms"]
            for r in sel
            if r["native_facts"]["producer_finished_ms"] is not None
            and r["replay_facts"]["producer_finished_ms"] is not None
        ]
        d["publications"] = sum(min(len(a), len(b)) for a, b in pairs)
        d["publication_lag_ms"] = median(lags) if lags else None
        d["first_publication_lag_ms"] = median(first) if first else None
        d["producer_finish_lag_ms"] = median(fin) if fin else None
        out[m] = d
    return out


# The factors the ratio error splits into (their product is replay ÷ native of As²d /
# target-only), in the order the lines print them.
RATIO_FACTORS = (
    (
        "trajectories",
        "the replay's own runs (the traces' sources) ÷ the native runs' sources replayed",
    ),
    ("target-only price", "target-only's time, repriced ÷ native"),
    ("As²d verify price", "native ÷ repriced time per As²d verifier round"),
    ("As²d rounds", "native ÷ replayed As²d rounds (when the producer made candidates ready)"),
    ("As²d not verifying", "native ÷ repriced T/V of As²d (time the verifier waits)"),
)


def ratio_factors(
    gap: Mapping[str, Mapping[str, Any]], replay_ratio: float | None
) -> dict[str, Any] | None:
    """Where the As²d / target-only ratio the replay predicts departs from the native one.

    With the native runs repriced on their own trajectories (``gap``), the ratio error
    (replay ratio ÷ native ratio) is exactly the product of: the replay's own runs against
    the repriced trajectories; target-only's price (repriced ÷ native time); As²d's
    verifier price per round, its rounds and its time outside the verifier (each native ÷
    repriced). Each factor's share is its part of the error's logarithm. None without both
    methods, or when a figure is zero."""
    to, a = gap.get("target-only"), gap.get("as2d")
    if not to or not a or replay_ratio is None:
        return None
    try:
        nat_ratio = to["time_ms"]["native"] / a["time_ms"]["native"]
        repriced_ratio = to["time_ms"]["replay"] / a["time_ms"]["replay"]
        v_nat, v_rep = a["verifier_ms"]["native"], a["verifier_ms"]["replay"]
        r_nat, r_rep = a["rounds"]["native"], a["rounds"]["replay"]
        t_nat, t_rep = a["time_ms"]["native"], a["time_ms"]["replay"]
        f = {
            "trajectories": replay_ratio / repriced_ratio,
            "target-only price": to["time_ms"]["replay"] / to["time_ms"]["native"],
            "As²d verify price": (v_nat / r_nat) / (v_rep / r_rep),
            "As²d rounds": r_nat / r_rep,
            "As²d not verifying": (t_nat / v_nat) / (t_rep / v_rep),
        }
    except (ZeroDivisionError, KeyError, TypeError):
        return None
    total = replay_ratio / nat_ratio
    log_total = math.log(total)
    return {
        "replay_over_native": total,
        "factors": f,
        "shares": {
            k: (math.log(x) / log_total if abs(log_total) > 1e-12 else None) for k, x in f.items()
        },
    }


# Below this ratio error (replay ÷ native within ±2 %) shares of it say nothing: factors
# of a few percent that cancel would show as hundreds of percent of a near-zero error.
SHARE_FROM = 0.02


def render_ratio_factors(rf: Mapping[str, Any] | None) -> list[str]:
    """Lines for the native table: each factor of the ratio error, its effect on the ratio,
    and its share of the error when the error is large enough to share out."""
    if not rf:
        return []
    total = rf["replay_over_native"]
    shared = abs(total - 1) >= SHARE_FROM
    lines = [
        "",
        f"replay ÷ native of As²d / target-only {total:.3f} = the product of"
        + (" (effect on the ratio; share of the error):" if shared else " (effect on the ratio):"),
    ]
    for key, what in RATIO_FACTORS:
        f, share = rf["factors"][key], rf["shares"][key]
        part = f"{100 * (f - 1):+.1f} %"
        if shared and share is not None:
            part += f"; {100 * share:.0f} %"
        lines.append(f"  {key:<20} {f:.3f}  ({part})  {what}")
    return lines


def render_gap(gap: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Lines for the native table: replay ÷ native per pooled figure, and the lags."""
    if not gap:
        return []

    def ratio(d: Mapping[str, Any], k: str) -> str:
        x = d[k]["ratio"]
        return "—" if x is None else f"{x:.3f}"

    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x:+.1f}"

    def idle(d: Mapping[str, Any]) -> str:
        # T − V is often near zero on one side (a replay whose verifier never waits), where a
        # ratio says nothing: both sides in ms per run instead.
        x, n = d["not_verifying_ms"], d["runs"]
        return f"{x['native'] / n:.1f}/{x['replay'] / n:.1f}"

    lines = [
        "",
        "replay ÷ native, pooled over each method's runs (the same trajectories; T − V: time the "
        "verifier is not busy, ms per run, native/replay):",
        f"{'method':<12} {'T':>7} {'V':>7} {'T − V':>11} {'rounds':>7} {'accepted':>8}   publication lag ms "
        "(native − replay: median, first, producer end)",
    ]
    for m, d in gap.items():
        lag = ""
        if d["publications"]:
            lag = (
                f"   {ms(d['publication_lag_ms'])}, {ms(d['first_publication_lag_ms'])}, "
                f"{ms(d['producer_finish_lag_ms'])} ({d['publications']} publications)"
            )
        lines.append(
            f"{m:<12} {ratio(d, 'time_ms'):>7} {ratio(d, 'verifier_ms'):>7} {idle(d):>11} "
            f"{ratio(d, 'rounds'):>7} {ratio(d, 'accepted'):>8}{lag}"
        )
    return lines
