"""The gauge's update period, probed on the attached phone before the capture, and what
the episode makes of it (the warm-up before each method's first formal request, the gaps).

The phone's fuel gauge is read through /sys/class/power_supply/battery (current, voltage,
charge counter) in quick round trips until it has shown a few new readings; the period is
estimated exactly as from a capture (as2d_cli.energy.gauge.estimate_gauge). The charger is
still in: the gauge updates all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from as2d_cli.energy.gauge import estimate_gauge
from as2d_cli.energy.trace_reader import BatterySeries

if TYPE_CHECKING:
    from as2d_cli.energy.episode_script import EpisodePlan

SUPPLY = "/sys/class/power_supply/battery/"
FILES = (SUPPLY + "current_now", SUPPLY + "voltage_now", SUPPLY + "charge_counter")
PROBE_MAX_S = 8.0  # enough for three updates of a gauge as slow as 2.5 s
PROBE_NEW_READINGS = 3  # new readings that settle the estimate


@dataclass(frozen=True)
class GaugeProbe:
    """What the probe saw: the update period (None when the gauge showed fewer than two new
    readings), the distinct readings and how long it looked."""

    period_s: float | None
    readings: int
    seconds: float
    reads: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "period_s": self.period_s,
            "readings": self.readings,
            "seconds": self.seconds,
            "reads": self.reads,
        }


def _number(text: str | None) -> float:
    try:
        return float((text or "").split()[0])
    except (ValueError, IndexError):
        return float("nan")


def _series(rows: list[tuple[int, float, float, float]]) -> BatterySeries:
    a = np.array(rows, dtype=float)
    nan = np.full(len(rows), np.nan)
    return BatterySeries(a[:, 0].astype(np.int64), a[:, 1], a[:, 2], a[:, 3], nan, nan, None, ())


def probe_gauge(
    read: Callable[[], dict[str, str | None]],
    max_s: float = PROBE_MAX_S,
    clock_ns: Callable[[], int] = time.monotonic_ns,
) -> GaugeProbe:
    """Read the gauge (`read`: one round trip returning FILES' contents) back to back until
    it has shown PROBE_NEW_READINGS new readings or `max_s` has passed."""
    rows: list[tuple[int, float, float, float]] = []
    start = clock_ns()
    while True:
        t_a = clock_ns()
        got = read()
        t_b = clock_ns()
        cur, volt, charge = (_number(got.get(f)) for f in FILES)
        rows.append((int((t_a + t_b) // 2), cur, volt, charge))
        seconds = (t_b - start) / 1e9
        if len(rows) >= 3:
            g = estimate_gauge(_series(rows))
            if g.readings - 1 >= PROBE_NEW_READINGS or seconds >= max_s:
                return GaugeProbe(g.period_s, g.readings, seconds, len(rows))
        elif seconds >= max_s:
            return GaugeProbe(None, len(rows), seconds, len(rows))


def probe_device(dev: Any, max_s: float = PROBE_MAX_S) -> GaugeProbe:
    """Probe the gauge of an attached phone (device_agents Device)."""
    return probe_gauge(lambda: dev.read_files(list(FILES)), max_s)


def _takes_min(plan: EpisodePlan) -> list[str]:
    """The methods whose request command does not take {min_s}/{min_ms} (its warm-up
    cannot be stretched: it lasts what the command takes)."""
    return [
        m
        for m in plan.methods
        if "{min_s}" not in plan.command_for(m) and "{min_ms}" not in plan.command_for(m)
    ]


def size_plan(plan: EpisodePlan, probe: GaugeProbe, poll_ms: int) -> tuple[EpisodePlan, str]:
    """The plan with its warm-up lead and gaps sized from the probed gauge period, and the
    one line that says so before the capture starts — or why the first formal request
    cannot be measured like the others (no warm-up, a lead longer than the request budget,
    a request command that cannot be stretched, an unknown period)."""
    import dataclasses

    from as2d_cli.energy.episode_script import lead_s

    if probe.period_s is None:
        return plan, (
            f"gauge: {probe.readings} distinct reading(s) in {probe.seconds:.1f} s before the "
            "capture; its update period is unknown, so the warm-ups are not sized from it"
        )
    resolution = probe.seconds / max(probe.reads, 1)  # the probe sees an update this late
    lead = lead_s(probe.period_s + resolution, poll_ms / 1000)
    head = (
        f"gauge: updates every {probe.period_s:.2f} s (probed over {probe.seconds:.1f} s); "
        f"the first formal request of each method needs {lead:.2f} s of its load before it"
    )
    gap = plan.gap_s if plan.gap_s == 0 else max(plan.gap_s, lead)
    sized = dataclasses.replace(plan, gauge_period_s=probe.period_s, gap_s=gap)
    gaps = f"; gaps raised to {gap:.2f} s" if gap != plan.gap_s else ""
    if plan.warmups == 0:
        return sized, head + f"{gaps} — with --warmups 0 it starts from idle: pass --warmups 1"
    if lead > plan.request_budget_s:
        return sized, head + (
            f"{gaps} — more than --request-budget-s {plan.request_budget_s:g}: the first "
            "formal request is measured after a shorter warm-up; raise the budget"
        )
    sized = dataclasses.replace(sized, lead_s=lead)
    fixed = _takes_min(plan)
    if fixed:
        return sized, head + (
            f"{gaps} — the request command of {', '.join(fixed)} does not take {{min_s}}: "
            f"its warm-up lasts what it takes, and must last {lead:.2f} s"
        )
    return sized, head + f": each method's last warm-up runs at least that long{gaps}"
