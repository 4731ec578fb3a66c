"""What the fuel gauge itself did during a capture: its distinct readings and update period.

A phone's fuel gauge refreshes its current, voltage and charge counter about once per
second however fast Perfetto polls it (every 250 ms by default); the polls in between
repeat the held reading. The energy integral only has the distinct readings to work with,
so a request window gets about window / period of them, and a load step shows up at the
next gauge update, not at the next poll.

A poll carries a new reading when any of current, voltage or charge counter differs from
the poll before. The update period is the span from the first to the last new reading
divided by the number of updates between them; an interval between new readings of at
least 1.75× the median interval counts as that many updates (an update that happened to
repeat every value is not mistaken for a slower gauge). When every poll carries a new
reading the gauge is at least as fast as the polls, and the estimate is the poll spacing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from as2d_cli.energy.trace_reader import BatterySeries

MISSED_UPDATE_RATIO = 1.75  # an interval ≥ this × the median holds more than one update


@dataclass(frozen=True)
class GaugeEstimate:
    """The gauge's distinct readings over a capture and its estimated update period."""

    update_ns: np.ndarray  # boot-clock time of each poll that carried a new reading
    period_s: float | None  # None: fewer than two new readings
    every_poll: bool  # each poll carried a new reading: the period is at most the polls'

    @property
    def readings(self) -> int:
        """Distinct readings in the capture (the first poll's reading counts as one)."""
        return int(self.update_ns.size)

    def updates_in(self, t0: int, t1: int) -> int:
        """New readings that arrived inside [t0, t1] (the one held at t0 not counted)."""
        u = self.update_ns
        return int(((u > t0) & (u <= t1)).sum())

    def describe(self, poll_s: float) -> str:
        if self.period_s is None:
            return (
                f"gauge: {self.readings} distinct reading(s) in the capture; update period unknown"
            )
        if self.every_poll:
            return (
                f"gauge: every poll ({poll_s:.3g} s) carried a new reading "
                f"({self.readings} readings); the gauge updates at least that often"
            )
        return (
            f"gauge: {self.readings} distinct readings, one every {self.period_s:.3g} s "
            f"(polled every {poll_s:.3g} s)"
        )


def _changed(a: np.ndarray) -> np.ndarray:
    """Per poll after the first: whether the counter differs from the poll before (a
    counter missing in both is unchanged)."""
    prev, cur = a[:-1], a[1:]
    both_nan = np.isnan(prev) & np.isnan(cur)
    return ~both_nan & ~(prev == cur)


def estimate_gauge(series: BatterySeries) -> GaugeEstimate:
    """Distinct readings and update period of the gauge behind `series`."""
    t = series.t_ns
    if t.size == 0:
        return GaugeEstimate(np.zeros(0, dtype=np.int64), None, False)
    changed = np.zeros(t.size - 1, dtype=bool)
    for a in (series.current_ua, series.voltage_uv, series.charge_uah):
        changed |= _changed(a)
    new = t[1:][changed]
    update_ns = np.concatenate([t[:1], new]).astype(np.int64)
    if new.size < 2:
        return GaugeEstimate(update_ns, None, False)
    d = np.diff(new).astype(float)
    med = float(np.median(d))
    k = np.where(d >= MISSED_UPDATE_RATIO * med, np.maximum(1.0, np.round(d / med)), 1.0)
    period_s = float(new[-1] - new[0]) / float(k.sum()) / 1e9
    every_poll = bool(changed.all())
    return GaugeEstimate(update_ns, period_s, every_poll)
