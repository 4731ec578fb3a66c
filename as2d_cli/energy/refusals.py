"""Checks that turn impossible battery figures into one clear line instead of a number.

Each check raises MeasurementRefused naming the request, what the gauge showed and what to
do. Thresholds are physical: a phone with its screen on and a model running draws tens of
mA to ~15 A, and a Li-ion cell sits between 2.5 and 5.5 V.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from as2d_cli.energy.trace_reader import BatterySeries
from as2d_cli.errors import UserError


class MeasurementRefused(UserError):
    """The battery trace cannot support an energy figure for this window."""


@dataclass(frozen=True)
class RefusalLimits:
    min_abs_current_ua: float = 20_000.0  # below 20 mA: mA written into the µA field
    max_abs_current_ua: float = 20_000_000.0  # above 20 A: nA (or mA×1000) in the µA field
    min_voltage_uv: float = 2.5e6
    max_voltage_uv: float = 5.5e6
    stale_min_window_s: float = 3.0  # a gauge updates ~1 Hz: 3 s must show a change
    min_sample_fraction: float = 0.5  # at least half the polls the window should hold
    min_samples: int = 2
    max_gap_polls: float = 4.0  # largest tolerated gap between samples, in poll periods
    max_gap_floor_s: float = 2.5  # …but never below this (gauge-driven batching)
    crosscheck_max_ratio: float = 100.0  # integral vs charge drop off by ≥100×: units


def poll_period_s(series: BatterySeries) -> float:
    """The configured poll period, or the median spacing when the config is not in the trace."""
    if series.poll_ms:
        return series.poll_ms / 1000.0
    if len(series) < 2:
        return float("inf")
    return float(np.median(np.diff(series.t_ns))) / 1e9


def window_indices(series: BatterySeries, t0: int, t1: int) -> tuple[int, int]:
    """Indices [lo, hi] of the samples bracketing [t0, t1] (the first at/before t0, the
    last at/after t1); raises when the trace does not cover the window."""
    t = series.t_ns
    lo = int(np.searchsorted(t, t0, side="right")) - 1
    hi = int(np.searchsorted(t, t1, side="left"))
    if lo < 0 or hi >= t.size:
        raise MeasurementRefused(
            f"too few samples: the trace covers boot time {t[0] / 1e9:.3f}–{t[-1] / 1e9:.3f} s "
            f"but the window is {t0 / 1e9:.3f}–{t1 / 1e9:.3f} s; the request outlasted the "
            "bounded trace — raise the request budget (--request-budget-s), which sizes it"
        )
    return lo, hi


def _frozen(a: np.ndarray) -> bool:
    finite = a[np.isfinite(a)]
    return finite.size < 2 or float(np.ptp(finite)) == 0.0


def _check_units(cur: np.ndarray, volt: np.ndarray, label: str, limits: RefusalLimits) -> None:
    """A window's median current and voltage in a phone's range: a gauge whose units are
    off by 1000 is refused, never scaled silently."""
    med_i = float(np.median(np.abs(cur)))
    if med_i < limits.min_abs_current_ua:
        raise MeasurementRefused(
            f"{label}: median current {med_i:.0f} µA is implausibly small for a busy phone — "
            "units off by 1000 (the gauge reports mA in the µA field); refusing to scale it "
            "silently, fix the gauge units or record them with the phone"
        )
    if med_i > limits.max_abs_current_ua:
        raise MeasurementRefused(
            f"{label}: median current {med_i:.0f} µA (> 20 A) is impossible for a phone — "
            "units off by 1000 (the gauge reports nA, or mA×1000, in the µA field)"
        )
    med_v = float(np.median(volt))
    if not limits.min_voltage_uv <= med_v <= limits.max_voltage_uv:
        raise MeasurementRefused(
            f"{label}: median battery voltage {med_v:.0f} µV is outside a Li-ion cell's "
            "2.5–5.5 V — units off by 1000 (mV or nV in the µV field)"
        )


def _check_stale(
    series: BatterySeries, lo: int, hi: int, window_s: float, label: str, limits: RefusalLimits
) -> None:
    """A frozen gauge (every counter repeated over the capture or the window) is refused."""
    # A frozen gauge repeats every counter; a steady load can repeat the current, but the
    # charge counter (and usually the voltage) still moves. Missing counters prove nothing.
    cur, volt = series.current_ua[lo : hi + 1], series.voltage_uv[lo : hi + 1]
    whole_s = (series.t_ns[-1] - series.t_ns[0]) / 1e9
    whole_stale = (
        series.t_ns.size > 2
        and whole_s >= limits.stale_min_window_s
        and all(_frozen(a) for a in (series.current_ua, series.voltage_uv, series.charge_uah))
    )
    window_stale = window_s >= limits.stale_min_window_s and all(
        _frozen(a) for a in (cur, volt, series.charge_uah[lo : hi + 1])
    )
    if whole_stale or window_stale:
        raise MeasurementRefused(
            f"{label}: stale gauge — current, voltage and charge counter stay at "
            f"{cur[0]:.0f} µA, {volt[0]:.0f} µV for the whole "
            f"{'capture' if whole_stale else f'{window_s:.1f} s window'}; the fuel gauge is "
            "not updating (reboot the phone or check `dumpsys battery` changes under load)"
        )


def check_window(
    series: BatterySeries, t0: int, t1: int, label: str, limits: RefusalLimits = RefusalLimits()
) -> tuple[int, int]:
    """Run every refusal for one request window; returns its bracketing indices."""
    if not series.has("voltage_uv"):
        raise MeasurementRefused(
            f"{label}: the trace has no battery voltage; energy needs I·V — this gauge or "
            "config lacks BATTERY_COUNTER_VOLTAGE (as2d's config asks for it; check "
            "`dumpsys battery` shows a voltage)"
        )
    if not series.has("current_ua"):
        raise MeasurementRefused(
            f"{label}: the trace has no battery current (BATTERY_COUNTER_CURRENT); this "
            "phone's gauge does not report instantaneous current"
        )
    try:
        lo, hi = window_indices(series, t0, t1)
    except MeasurementRefused as exc:
        raise MeasurementRefused(f"{label}: {exc}") from None
    cur = series.current_ua[lo : hi + 1]
    volt = series.voltage_uv[lo : hi + 1]
    ts = series.t_ns[lo : hi + 1]
    if not (np.isfinite(volt).all() and np.isfinite(cur).all()):
        raise MeasurementRefused(
            f"{label}: voltage or current is missing in some samples of the window; the "
            "gauge dropped counters — rerun the measurement"
        )

    # Charging first: it is the cause to fix, and a loaded phone may also miss a poll.
    pos = np.flatnonzero(cur > 0)
    if pos.size:
        k = int(pos[0])
        raise MeasurementRefused(
            f"{label}: battery current is positive ({cur[k]:.0f} µA at boot time "
            f"{ts[k] / 1e9:.3f} s) — the phone was charging; disconnect USB for the whole "
            "episode (or use wireless adb) and rerun"
        )

    window_s = (t1 - t0) / 1e9
    poll_s = poll_period_s(series)
    inside = int(((series.t_ns >= t0) & (series.t_ns <= t1)).sum())
    need = max(limits.min_samples, int(limits.min_sample_fraction * window_s / poll_s))
    gap_s = float(np.max(np.diff(ts))) / 1e9 if ts.size > 1 else float("inf")
    max_gap = max(limits.max_gap_polls * poll_s, limits.max_gap_floor_s)
    if inside < need or gap_s > max_gap:
        raise MeasurementRefused(
            f"{label}: too few samples — {inside} battery polls inside a {window_s:.2f} s "
            f"window (need ≥ {need}; largest gap {gap_s:.2f} s, allowed {max_gap:.2f} s); "
            "poll at 250 ms and keep traced running for the whole episode"
        )

    _check_units(cur, volt, label, limits)
    _check_stale(series, lo, hi, window_s, label, limits)
    return lo, hi


# Battery statuses (BatteryManager / power_supply) that mean a charger feeds the phone: the
# gauge then shows the charger's share, not the phone's own draw — even when the net
# current stays negative (a weak charger) or near zero (a full battery held at full).
CHARGER_STATUSES = ("Charging", "Full", "Not charging")
DUMPSYS_STATUS = {
    "1": "Unknown",
    "2": "Charging",
    "3": "Discharging",
    "4": "Not charging",
    "5": "Full",
}


def check_battery_status(meta: dict[str, str], series: BatterySeries | None = None) -> None:
    """Refuse a capture whose battery status was Charging, Full or Not charging at its start
    or at its end (episode meta `battery_status_at_start` / `battery_status_at_end`)."""
    seen = [(when, meta.get(f"battery_status_at_{when}", "").strip()) for when in ("start", "end")]
    bad = [(when, st) for when, st in seen if st.lower() in (c.lower() for c in CHARGER_STATUSES)]
    if not bad:
        return
    if len(bad) == 2 and bad[0][1] == bad[1][1]:
        where = f"{bad[0][1]} at the start and at the end of the capture"
    else:
        where = ", ".join(f"{st} at the {when}" for when, st in bad) + " of the capture"
    evidence = ""
    if series is not None and series.has("current_ua"):
        pos = np.flatnonzero(series.current_ua > 0)
        if pos.size:
            k = int(pos[0])
            evidence = (
                f" (battery current positive, {series.current_ua[k]:.0f} µA at boot time "
                f"{series.t_ns[k] / 1e9:.3f} s)"
            )
    statuses = {st.lower() for _, st in bad}
    advice = []
    if statuses & {"charging", "not charging"}:
        advice.append(
            "the phone was charging: unplug it — disconnect USB and any charger "
            "before the capture starts and keep them off until it ends (over "
            "wireless adb, take the charger off)"
        )
    if "full" in statuses:
        advice.append(
            "a full battery is held at full by its charger, so the gauge does not "
            "show the phone's own draw: unplug it and use a battery below full (let "
            "it run down a few percent)"
        )
    raise MeasurementRefused(f"battery status {where}{evidence} — {'; '.join(advice)}; then rerun")


def check_crosscheck_units(
    integrated_mah: float, drop_mah: float, limits: RefusalLimits = RefusalLimits()
) -> None:
    """Integrated current and the charge-counter drop must agree within a factor of 100."""
    if drop_mah <= 0 or integrated_mah <= 0:
        return
    ratio = integrated_mah / drop_mah
    if ratio > limits.crosscheck_max_ratio or ratio < 1 / limits.crosscheck_max_ratio:
        raise MeasurementRefused(
            f"integrated current {integrated_mah:.3f} mAh vs charge-counter drop "
            f"{drop_mah:.3f} mAh differ by a factor of {ratio:.3g} — units off by 1000 in "
            "the current or charge counter; the energy figures would be wrong"
        )
