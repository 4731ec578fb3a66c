"""Request energy E = ∫ I·V dt (trapezoidal) over [request origin, end of both workers].

Power is taken positive while discharging (Android reports discharge current negative).
The integral runs over the gauge's distinct readings placed at the instants the gauge took
them (as2d_cli.energy.readings): the line through the readings surely inside the window,
held flat to its edges. A window with no reading surely inside takes the polled curve:
window endpoints fall between polls, the power there linearly interpolated from the
bracketing samples, so that integral is the trapezoid of the piecewise-linear power curve
through the polls, clipped to the window. Whole phone, no idle subtraction (paper D.6.1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from as2d_cli.energy.episode_records import (
    NO_TOKENS,
    NOT_RUN,
    RECORDS_MISSING,
    STOPPED,
    Episode,
    RequestRecord,
)
from as2d_cli.energy.gauge import GaugeEstimate, estimate_gauge
from as2d_cli.energy.readings import (
    NOISE_SIGMAS,
    PlacedReadings,
    fit_window,
    place_readings,
)
from as2d_cli.energy.refusals import (
    MeasurementRefused,
    RefusalLimits,
    check_battery_status,
    check_crosscheck_units,
    check_window,
    poll_period_s,
)
from as2d_cli.energy.trace_reader import BatterySeries

UAS_NS_PER_MAH = 3.6e15  # 1 mAh = 3.6 C; µA·ns = 1e-15 C
# A window shorter than this many gauge periods is flagged: the gauge's late view of the
# load step at its edges is then a large share of what the window holds.
SHORT_WINDOW_PERIODS = 5.0
# Exit codes the host assigns when assembling records (episode_script.assemble_episode).
_FAILURES = {
    NO_TOKENS: "no AS2D_REQUEST line on stdout (the request command must print its body tokens)",
    RECORDS_MISSING: "records missing (the episode was interrupted before this request finished)",
}
_STOPS = {
    STOPPED: "stopped: it ran when the device's conditions broke (a core went offline); "
    "not a measurement",
    NOT_RUN: "not run: the episode stopped measuring before it (a core went offline)",
}


def power_w(series: BatterySeries) -> np.ndarray:
    """Discharge power per sample in W: −I[µA]·V[µV]·1e-12."""
    return -series.current_ua * series.voltage_uv * 1e-12


def _clipped_trapezoid(t_ns: np.ndarray, y: np.ndarray, t0: int, t1: int) -> float:
    """∫ y dt over [t0, t1] (units of y × s) for samples bracketing the window."""
    if t1 <= t0:
        return 0.0
    inner = (t_ns > t0) & (t_ns < t1)
    ts = np.concatenate([[t0], t_ns[inner], [t1]]).astype(float)
    ys = np.concatenate([np.interp([t0], t_ns, y), y[inner], np.interp([t1], t_ns, y)])
    return float(np.sum((ys[1:] + ys[:-1]) * np.diff(ts)) / 2.0 / 1e9)


def integrate_energy_j(series: BatterySeries, t0: int, t1: int) -> float:
    """Energy in J over [t0, t1] on the boot clock (no refusal checks: see check_window)."""
    return _clipped_trapezoid(series.t_ns, power_w(series), t0, t1)


def _range_near(t_ns: np.ndarray, y: np.ndarray, at: int, reach: int) -> tuple[float, float]:
    """(min, max) of the piecewise-linear curve through the samples over [at − reach,
    at + reach], clipped to the samples' span (its ends interpolated)."""
    lo, hi = max(at - reach, int(t_ns[0])), min(at + reach, int(t_ns[-1]))
    inner = y[(t_ns >= lo) & (t_ns <= hi)]
    ends = np.interp([lo, hi], t_ns, y)
    vals = np.concatenate([inner, ends])
    return float(vals.min()), float(vals.max())


def edge_bound_j(
    series: BatterySeries, t0: int, t1: int, period_s: float, poll_s: float
) -> tuple[float, float]:
    """(error bound in J, power step in W) of the energy over [t0, t1] from the gauge's
    late view of the load.

    The gauge shows the load at most d = period + poll spacing late (the next update, then
    the next poll that carries it). A curve seen δ ≤ d late and clipped to the window is off
    by ∫[t0−δ, t0] P − ∫[t1−δ, t1] P, so |error| ≤ d × |P before the start − P before
    the end|. Both levels appear in what was polled within d of their edge, so the step is
    taken as the widest difference between the polled power near the start (within d of
    t0) and near the end (within d of t1): bound = d × step."""
    d = period_s + poll_s
    reach = int(round(d * 1e9))
    p = power_w(series)
    ok = np.isfinite(p)
    t, p = series.t_ns[ok], p[ok]
    s_lo, s_hi = _range_near(t, p, t0, reach)
    e_lo, e_hi = _range_near(t, p, t1, reach)
    step = max(s_hi - e_lo, e_hi - s_lo, 0.0)
    return d * step, step


def loaded_windows(episode: Episode) -> list[tuple[int, int]]:
    """The windows of the requests that ran to their end (warm-ups included): the phone
    under load."""
    return [(r.origin_ns, r.end_ns) for r in episode.requests if r.exit_code == 0]


def reading_noise(
    series: BatterySeries, gauge: GaugeEstimate, loaded: list[tuple[int, int]] | None = None
) -> float:
    """The gauge's relative reading noise (one standard deviation, as a fraction of the
    power read), from the changes between consecutive distinct readings. A gauge's noise
    grows with the current it reads, so only pairs that arrived inside one request window
    (`loaded`) count — the whole capture only when fewer than three such pairs exist.
    σ₀ = median |change| / 0.6745 / √2 (robust to load steps and dips); the changes within
    4·√2·σ₀ then give σ as their root mean square / √2 (a steadier estimate)."""
    new = np.isin(series.t_ns, gauge.update_ns)
    t, p = series.t_ns[new], power_w(series)[new]
    ok = np.isfinite(p)
    t, p = t[ok], p[ok]
    mean = (p[1:] + p[:-1]) / 2.0
    rel = np.abs(np.diff(p)) / np.where(mean > 0, mean, np.inf)
    if loaded:
        same = np.zeros(rel.size, dtype=bool)
        for a, b in loaded:
            inside = (t >= a) & (t <= b)
            same |= inside[1:] & inside[:-1]
        if int(same.sum()) >= 3:
            rel = rel[same]
    if rel.size < 2:
        return 0.0
    s0 = float(np.median(rel)) / 0.6745 / np.sqrt(2.0)
    kept = rel[rel <= 4.0 * np.sqrt(2.0) * s0]
    return float(np.sqrt(np.mean(kept**2) / 2.0)) if kept.size >= 2 else s0


NOT_COVERED = "not covered"  # the status word of a request whose window the trace misses


def not_covered(series: BatterySeries, t0: int, t1: int) -> str | None:
    """The status of a request whose window the trace does not cover (None when it does):
    the trace ends before the window does (it was cut, or ran to its bound first) or
    starts after it began. Such a request is kept and marked, never refuses the run."""
    first, last = int(series.t_ns[0]), int(series.t_ns[-1])
    if first <= t0 and t1 <= last:
        return None
    span = f"the trace covers boot {first / 1e9:.3f}–{last / 1e9:.3f} s"
    if t0 < first:
        return f"{NOT_COVERED}: {span}, and this window starts at {t0 / 1e9:.3f} s"
    if series.lost_bytes:
        why = f"it was cut mid-packet ({series.lost_bytes} bytes lost after its last whole packet)"
    else:
        why = "the request outlasted the bounded trace (--request-budget-s sizes it)"
    return f"{NOT_COVERED}: {span}, and this window ends at {t1 / 1e9:.3f} s — {why}"


@dataclass(frozen=True)
class RequestEnergy:
    method: str
    phase: str
    origin_boot_ns: int
    target_eos_boot_ns: int
    end_boot_ns: int
    body_tokens: int
    exit_code: int
    status: str  # "ok" or "failed: …" (failed requests are kept, never dropped)
    energy_j: float | None = None
    mean_power_w: float | None = None  # energy / response time (the paper's Table 15)
    response_s: float | None = None
    window_s: float | None = None
    j_per_token: float | None = None
    samples_in_window: int | None = None
    gauge_readings_in_window: int | None = None  # new gauge readings inside the window
    window_power_w: float | None = None  # energy / window (origin to end of both workers)
    short_window: bool | None = None  # window < SHORT_WINDOW_PERIODS × gauge period
    power_step_w: float | None = None  # the step in power at the window's edges (edge_bound_j)
    energy_bound_j: float | None = None  # ± bound on the gauge's error: edges + noise
    noise_bound_j: float | None = None  # its reading-noise part, 3σ·√(window·period)
    energy_from: str | None = None  # "readings" placed inside the window, or "polls"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CrossCheck:
    """Integrated current vs the charge-counter drop over the capture's discharging polls."""

    interval_s: float
    integrated_mah: float
    charge_drop_mah: float | None
    discrepancy_percent: float | None  # |integrated − drop| / drop × 100 (paper: 8.2 %)
    note: str
    excluded_charging_samples: int = 0  # polls with positive current, left out of both

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MethodSummary:
    """One method's formal requests: how many, how many failed, and the measured ones
    pooled — energy ΣE, response Σresponse, J/token ΣE / Σ body tokens, mean power
    ΣE / Σresponse (the paper's Table 15: energy over response time), window power
    ΣE / Σwindow. A method whose formal requests all failed keeps its row: its figures
    are None and `status` says why."""

    method: str
    formal_requests: int
    measured_requests: int
    failed_requests: int
    status: str  # "ok", or "failed: …" when no formal request was measured
    energy_j: float | None
    response_s: float | None
    body_tokens: int | None
    j_per_token: float | None
    mean_power_w: float | None  # ΣE / Σresponse (paper); None when no response time
    window_power_w: float | None  # ΣE / Σwindow
    energy_vs_baseline_percent: float | None  # negative = less energy than the baseline
    j_per_token_vs_baseline_percent: float | None
    energy_bound_j: float | None = None  # Σ of the measured requests' bounds (same sign)
    energy_bound_percent: float | None = None  # energy_bound_j / energy_j × 100
    short_windows: int | None = None  # measured formal requests flagged short_window

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EnergyAnalysis:
    requests: list[RequestEnergy]
    methods: list[MethodSummary]
    cross_check: CrossCheck
    poll_s: float
    baseline: str | None
    gauge: GaugeEstimate | None = None  # the gauge's distinct readings and update period
    noise_w: float | None = None  # reading noise in W (1σ) at the measured requests' mean power
    sign_note: str | None = None  # set when the gauge's current sign was corrected
    trace_bytes: int = 0  # size of the trace file read
    trace_lost_bytes: int = 0  # bytes after its last whole packet (a trace cut mid-packet)
    noise_percent: float | None = None  # the gauge's relative reading noise (1σ, reading_noise)
    placement_s: float | None = None  # how far a reading's update instant may be off (±)
    on_grid: bool | None = None  # one fixed update grid fits every reading's bracket


def analyse_request(
    series: BatterySeries,
    r: RequestRecord,
    limits: RefusalLimits = RefusalLimits(),
    gauge: GaugeEstimate | None = None,
    noise: float = 0.0,
    placed: PlacedReadings | None = None,
) -> RequestEnergy:
    label = f"request {r.method}/{r.phase} at boot {r.origin_ns / 1e9:.3f} s"
    base: dict[str, Any] = dict(  # the fields taken as they are from the record
        method=r.method,
        phase=r.phase,
        origin_boot_ns=r.origin_ns,
        target_eos_boot_ns=r.target_eos_ns,
        end_boot_ns=r.end_ns,
        body_tokens=r.body_tokens,
        exit_code=r.exit_code,
    )
    if r.exit_code in _STOPS:
        return RequestEnergy(**base, status=_STOPS[r.exit_code])
    if r.exit_code != 0:
        why = _FAILURES.get(r.exit_code, f"request exited with {r.exit_code}")
        return RequestEnergy(**base, status=f"failed: {why}")
    uncovered = not_covered(series, r.origin_ns, r.end_ns)
    if uncovered:
        return RequestEnergy(**base, status=uncovered)
    check_window(series, r.origin_ns, r.end_ns, label, limits)
    window_s = (r.end_ns - r.origin_ns) / 1e9
    if window_s <= 0:
        raise MeasurementRefused(
            f"{label}: empty energy window (origin = end); the request "
            "did not run — check episode.log"
        )
    if r.body_tokens <= 0:
        raise MeasurementRefused(
            f"{label}: {r.body_tokens} body tokens — J/token is "
            "undefined; the request produced no output"
        )
    gauge = gauge if gauge is not None else estimate_gauge(series)
    energy, bound, step, noise_j, source = _energy_and_bound(
        series, r.origin_ns, r.end_ns, gauge, noise, placed
    )
    inside = int(((series.t_ns >= r.origin_ns) & (series.t_ns <= r.end_ns)).sum())
    response_s = (r.target_eos_ns - r.origin_ns) / 1e9
    short = None if gauge.period_s is None else window_s < SHORT_WINDOW_PERIODS * gauge.period_s
    return RequestEnergy(
        **base,
        status="ok",
        energy_j=energy,
        mean_power_w=energy / response_s if response_s > 0 else None,
        response_s=response_s,
        window_s=window_s,
        j_per_token=energy / r.body_tokens,
        samples_in_window=inside,
        gauge_readings_in_window=gauge.updates_in(r.origin_ns, r.end_ns),
        window_power_w=energy / window_s,
        short_window=short,
        power_step_w=step,
        energy_bound_j=bound,
        noise_bound_j=noise_j,
        energy_from=source,
    )


def _energy_and_bound(
    series: BatterySeries,
    t0: int,
    t1: int,
    gauge: GaugeEstimate,
    noise: float,
    placed: PlacedReadings | None,
) -> tuple[float, float | None, float | None, float | None, str]:
    """(energy, bound, power step, noise part, source) of the window [t0, t1]: from the
    readings placed inside it when there are any (source "readings"), else from the polled
    curve with the gauge's lateness in the bound (source "polls"). `noise` is the gauge's
    relative reading noise; in W it is that share of the window's mean power."""
    polled = integrate_energy_j(series, t0, t1)
    if gauge.period_s is None:
        return polled, None, None, None, "polls"
    window_s = (t1 - t0) / 1e9
    noise_w = noise * max(polled, 0.0) / window_s
    fit = None if placed is None else fit_window(placed, t0, t1, noise_w)
    if fit is not None:
        bound = fit.edge_j + fit.transient_j + fit.noise_j
        return fit.energy_j, bound, fit.step_w, fit.noise_j, "readings"
    # each distinct reading's noise is held for one period: √(window / period) of them
    noise_j = NOISE_SIGMAS * noise_w * float(np.sqrt(window_s * gauge.period_s))
    edge, step = edge_bound_j(series, t0, t1, gauge.period_s, poll_period_s(series))
    return polled, edge + noise_j, step, noise_j, "polls"


def cross_check(series: BatterySeries, limits: RefusalLimits = RefusalLimits()) -> CrossCheck:
    """Current integrated over the capture vs the charge counter's drop (D.6.1), both over
    the same intervals: those between two discharging polls. A poll with positive current
    was taken while charging (a charger in before or after the requests); it and the
    intervals next to it are left out of both, and the count is said."""
    t = series.t_ns
    interval_s = float(t[-1] - t[0]) / 1e9
    cur = series.current_ua
    charging = np.isfinite(cur) & (cur > 0)
    n_chg = int(charging.sum())
    left_out = (
        f"; {n_chg} poll(s) taken while charging (positive current) left out of both"
        if n_chg
        else ""
    )
    ok = np.isfinite(cur) & ~charging
    pair = ok[1:] & ok[:-1]  # intervals between two discharging polls
    if not pair.any():
        why = "no current samples" if not n_chg else "no two discharging polls in a row"
        return CrossCheck(interval_s, float("nan"), None, None, why + left_out, n_chg)
    ic = -cur
    dt = np.diff(t).astype(float)
    integrated = float(np.sum(((ic[1:] + ic[:-1]) * dt)[pair]) / 2.0)
    integrated_mah = integrated / UAS_NS_PER_MAH
    q = series.charge_uah
    qpair = pair & np.isfinite(q[1:]) & np.isfinite(q[:-1])
    if not qpair.any():
        return CrossCheck(
            interval_s,
            integrated_mah,
            None,
            None,
            "no charge counter in the trace (BATTERY_COUNTER_CHARGE)" + left_out,
            n_chg,
        )
    drop_mah = float(np.sum((q[:-1] - q[1:])[qpair])) / 1000.0
    if drop_mah <= 0:
        return CrossCheck(
            interval_s,
            integrated_mah,
            drop_mah,
            None,
            "charge counter did not decrease over the capture; no cross-check" + left_out,
            n_chg,
        )
    check_crosscheck_units(integrated_mah, drop_mah, limits)
    disc = abs(integrated_mah - drop_mah) / drop_mah * 100.0
    return CrossCheck(
        interval_s,
        integrated_mah,
        drop_mah,
        disc,
        "both readings come from the phone's own gauge; not an external calibration" + left_out,
        n_chg,
    )


def counter_agreement(series: BatterySeries) -> float | None:
    """Σ Δq·I·Δt over the intervals between polls: positive when the charge counter moves
    the way the current says in Android's sign (it falls while the current is negative and
    rises while it is positive), negative when the gauge reports the opposite sign; None
    without a charge counter that moved. A charger plugged in for part of the capture
    moves both the same way, so it cannot flip the answer, however long it stayed in."""
    q, cur = series.charge_uah, series.current_ua
    mean_i = (cur[1:] + cur[:-1]) / 2.0
    dq = np.diff(q)
    ok = np.isfinite(dq) & np.isfinite(mean_i) & (dq != 0)
    if not ok.any():
        return None
    dt = np.diff(series.t_ns).astype(float)
    return float(np.sum((dq * mean_i * dt)[ok]))


def correct_current_sign(
    series: BatterySeries, meta: dict[str, str]
) -> tuple[BatterySeries, str | None]:
    """(the series in Android's sign, a note when it had to be corrected).

    Some gauges report discharge current positive. That is a sign convention, not a
    charger, when the battery status said Discharging (at the start or end of the capture,
    and a charger status at neither), the charge counter fell over the capture, and the
    counter moved against the current's sign (counter_agreement < 0): the current is then
    negated, and the note says so. Without that evidence (no status recorded, no charge
    counter, a counter that rose or that follows the current) positive current stays what
    it looks like: charging, refused per window. A weak charger plugged back during the
    idle tail makes many polls positive, but the counter rises with them: no correction."""
    statuses = [meta.get(f"battery_status_at_{w}", "").strip().lower() for w in ("start", "end")]
    if "discharging" not in statuses or not series.has("current_ua"):
        return series, None
    q = series.charge_uah[np.isfinite(series.charge_uah)]
    if q.size < 2 or float(q[0] - q[-1]) <= 0:
        return series, None
    agree = counter_agreement(series)
    if agree is None or agree >= 0:
        return series, None
    cur = series.current_ua[np.isfinite(series.current_ua)]
    note = (
        f"the gauge reports discharge current positive (battery status Discharging, "
        f"charge counter fell {float(q[0] - q[-1]) / 1000:.2f} mAh while the median current "
        f"read {float(np.median(cur)) / 1000:+.0f} mA, and the counter moved against the "
        "current's sign): a sign convention, not a charger — the current's sign was "
        "corrected for the energy figures and the cross-check"
    )
    fixed = replace(series, current_ua=-series.current_ua, current_avg_ua=-series.current_avg_ua)
    return fixed, note


def _unmeasured(formal: list[RequestEnergy]) -> str:
    """The status of a method none of whose formal requests was measured, and why."""
    n = len(formal)
    if not formal:
        return "failed: all 0 formal request(s) failed (no formal request)"
    why = formal[0].status.removeprefix("failed: ")
    if all(r.exit_code in _STOPS for r in formal):
        return f"stopped: none of its {n} formal request(s) was measured ({why})"
    if all(r.status.startswith(NOT_COVERED) for r in formal):
        why = why.removeprefix(NOT_COVERED + ": ")
        return f"{NOT_COVERED}: the trace covers none of its {n} formal request(s) ({why})"
    return f"failed: all {n} formal request(s) failed ({why})"


def pool_methods(
    reqs: list[RequestEnergy], order: list[str], baseline: str | None
) -> list[MethodSummary]:
    """Per method (in `order`), its formal requests pooled; % change vs `baseline`."""
    rows: list[MethodSummary] = []
    for m in order:
        formal = [r for r in reqs if r.method == m and r.phase == "formal"]
        ok = [r for r in formal if r.status == "ok"]
        n, nf = len(formal), len(formal) - len(ok)
        if not ok:
            rows.append(MethodSummary(m, n, 0, nf, _unmeasured(formal), *([None] * 8)))
            continue
        e = sum(r.energy_j or 0.0 for r in ok)
        resp = sum(r.response_s or 0.0 for r in ok)
        win = sum(r.window_s or 0.0 for r in ok)
        tok = sum(r.body_tokens for r in ok)
        # edges add up (the lateness loses the same sign everywhere), independent reading
        # noise in quadrature
        bounds = [r.energy_bound_j for r in ok]
        noises = [r.noise_bound_j or 0.0 for r in ok]
        bound = (
            None
            if any(b is None for b in bounds)
            else sum((b or 0.0) - n for b, n in zip(bounds, noises))
            + float(np.sqrt(sum(n * n for n in noises)))
        )
        flags = [r.short_window for r in ok]
        rows.append(
            MethodSummary(
                m,
                n,
                len(ok),
                nf,
                "ok",
                e,
                resp,
                tok,
                e / tok,
                e / resp if resp > 0 else None,
                e / win,
                None,
                None,
                bound,
                100.0 * bound / e if bound is not None and e > 0 else None,
                None if any(f is None for f in flags) else sum(bool(f) for f in flags),
            )
        )
    base = next((x for x in rows if x.method == baseline and x.status == "ok"), None)
    if base is None or base.energy_j is None or base.j_per_token is None:
        return rows
    out = []
    for x in rows:
        if x.status == "ok" and x.method != baseline and x.energy_j and x.j_per_token:
            x = replace(
                x,
                energy_vs_baseline_percent=100.0 * (x.energy_j / base.energy_j - 1.0),
                j_per_token_vs_baseline_percent=100.0 * (x.j_per_token / base.j_per_token - 1.0),
            )
        out.append(x)
    return out


def analyse_episode(
    series: BatterySeries,
    episode: Episode,
    baseline: str | None = "target-only",
    limits: RefusalLimits = RefusalLimits(),
) -> EnergyAnalysis:
    """Every request (warm-ups included, failures kept) and the per-method formal pools.
    A capture whose battery status said a charger fed the phone is refused first; a gauge
    that reports discharge current positive is corrected (correct_current_sign)."""
    check_battery_status(episode.meta, series)
    series, sign_note = correct_current_sign(series, episode.meta)
    gauge = estimate_gauge(series)
    placed = place_readings(series, gauge, power_w(series))
    noise = reading_noise(series, gauge, loaded_windows(episode))
    reqs = [analyse_request(series, r, limits, gauge, noise, placed) for r in episode.requests]
    _refuse_if_nothing_covered(reqs)
    order: list[str] = []
    for r in reqs:
        if r.phase == "formal" and r.method not in order:
            order.append(r.method)
    methods = pool_methods(reqs, order, baseline)
    base = baseline if any(m.method == baseline and m.status == "ok" for m in methods) else None
    return EnergyAnalysis(
        reqs,
        methods,
        cross_check(series, limits),
        poll_period_s(series),
        base,
        gauge,
        _noise_w(reqs, noise) if gauge.period_s is not None else None,
        sign_note,
        trace_bytes=series.trace_bytes,
        trace_lost_bytes=series.lost_bytes,
        noise_percent=100.0 * noise if gauge.period_s is not None else None,
        placement_s=float(placed.eps_ns.max()) / 1e9 if len(placed) else None,
        on_grid=placed.on_grid if len(placed) else None,
    )


def _refuse_if_nothing_covered(reqs: list[RequestEnergy]) -> None:
    """A trace that covers none of the requests that ran has nothing to measure: one line."""
    ran = [r for r in reqs if r.exit_code == 0]
    if ran and all(r.status.startswith(NOT_COVERED) for r in ran):
        r = ran[0]
        raise MeasurementRefused(
            f"request {r.method}/{r.phase} at boot {r.origin_boot_ns / 1e9:.3f} s: {r.status}; "
            "the trace covers no request window, so nothing was measured"
        )


def _noise_w(reqs: list[RequestEnergy], noise: float) -> float | None:
    """The relative reading noise in W at the measured requests' mean power."""
    e = sum(r.energy_j or 0.0 for r in reqs if r.status == "ok")
    w = sum(r.window_s or 0.0 for r in reqs if r.status == "ok")
    return noise * e / w if w > 0 else None
