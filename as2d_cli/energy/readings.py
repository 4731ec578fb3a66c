"""The gauge's distinct readings placed at the instants the gauge took them.

A poll shows the reading the gauge took at its last update, which happened after the poll
before (that one still showed the older reading) and no later than this poll: each
distinct reading's update instant lies in the bracket (previous poll, first poll showing
it]. A gauge updates on its own fixed clock, so the instants are u_k = a + T·n_k for one
offset a and period T: every bracket constrains (a, T), and together they pin the instants
far closer than one poll. A request's energy is then integrated from the readings whose
instants fall inside its window (each one the power at its instant), not from the polled
curve, which shows every load step up to a period and a poll late and carries a reading
taken between two requests into the next one.

When no single grid fits every bracket (a gauge that does not update on a fixed clock, or
updates faster than the polls), each reading is placed at the middle of its bracket and
its uncertainty is half its bracket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from as2d_cli.energy.gauge import GaugeEstimate
from as2d_cli.energy.trace_reader import BatterySeries

NOISE_SIGMAS = 3.0  # the reading-noise term of the bound covers this many standard deviations
_SLOPE_STEPS = 401  # candidate periods searched around the least-squares fit


@dataclass(frozen=True)
class PlacedReadings:
    """Distinct readings at their estimated update instants (the first poll's reading,
    whose update came before the capture, is left out)."""

    t_ns: np.ndarray  # float64, estimated update instant of each reading (boot clock)
    p_w: np.ndarray  # the reading's discharge power (W)
    eps_ns: np.ndarray  # how far each instant may be from its estimate (either side)
    on_grid: bool  # one fixed update grid fits every bracket

    def __len__(self) -> int:
        return int(self.t_ns.size)


def _brackets(
    series: BatterySeries, gauge: GaugeEstimate
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, index of the first poll showing it) per distinct reading after the first."""
    t = series.t_ns
    first = np.flatnonzero(np.isin(t, gauge.update_ns))
    first = first[first > 0]
    return t[first - 1].astype(np.float64), t[first].astype(np.float64), first


def _grid_fit(
    lo: np.ndarray, hi: np.ndarray, period_ns: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Instants a + T·n_k inside every bracket (lo, hi]: over every (a, T) that fits, the
    range each instant can take; (its middle, its half-width) per reading, or None when
    no grid fits."""
    mid = (lo + hi) / 2.0
    n = np.round((mid - mid[0]) / period_ns)
    if n.size < 3 or np.any(np.diff(n) < 1):
        return None
    slope, _ = np.polyfit(n, mid, 1)
    half = float(np.max(hi - lo)) / max(float(n[-1] - n[0]), 1.0)
    cand = slope + np.linspace(-half, half, _SLOPE_STEPS)
    a_lo = np.max(lo[None, :] - cand[:, None] * n[None, :], axis=1)
    a_hi = np.min(hi[None, :] - cand[:, None] * n[None, :], axis=1)
    fits = a_hi >= a_lo
    if not fits.any():
        return None
    step = float(cand[1] - cand[0]) * np.abs(n)  # a slope between two candidates moves u_k
    u_lo = np.min(a_lo[fits, None] + cand[fits, None] * n[None, :], axis=0) - step
    u_hi = np.max(a_hi[fits, None] + cand[fits, None] * n[None, :], axis=0) + step
    u_lo, u_hi = np.maximum(u_lo, lo), np.minimum(u_hi, hi)
    return (u_lo + u_hi) / 2.0, (u_hi - u_lo) / 2.0


def place_readings(
    series: BatterySeries, gauge: GaugeEstimate, power: np.ndarray
) -> PlacedReadings:
    """The distinct readings of `series` (power per poll in `power`) at their update instants."""
    lo, hi, idx = _brackets(series, gauge)
    p = power[idx]
    ok = np.isfinite(p)
    lo, hi, p = lo[ok], hi[ok], p[ok]
    if lo.size == 0:
        return PlacedReadings(np.zeros(0), np.zeros(0), np.zeros(0), False)
    fit = None
    if gauge.period_s is not None and not gauge.every_poll:
        fit = _grid_fit(lo, hi, gauge.period_s * 1e9)
    if fit is not None:
        return PlacedReadings(fit[0], p, fit[1], True)
    return PlacedReadings((lo + hi) / 2.0, p, (hi - lo) / 2.0, False)


@dataclass(frozen=True)
class WindowFit:
    """A window's energy from the readings placed inside it, and the parts of its bound
    the placement adds (the noise term is the caller's)."""

    energy_j: float
    readings: int  # readings placed inside the window (at least one)
    edge_j: float  # a reading at an edge may sit on the other side: ε × the step there
    transient_j: float  # readings that depart from their neighbours: the held share of each
    noise_j: float  # NOISE_SIGMAS × the reading noise carried through the readings' weights
    step_w: float  # the widest step in power between the window's edge readings and outside


def _inside(pr: PlacedReadings, t0: int, t1: int) -> np.ndarray:
    """Indices of the readings surely inside [t0, t1) (their instant ± ε): a reading taken
    at the very instant the window ends already shows what follows it."""
    return np.flatnonzero((pr.t_ns - pr.eps_ns >= t0) & (pr.t_ns + pr.eps_ns < t1))


def _area(ts: np.ndarray, ps: np.ndarray, t0: int, t1: int) -> float:
    """∫ over [t0, t1] of the line through (ts, ps), held flat before the first and after
    the last (J)."""
    xs = np.concatenate([[float(t0)], ts, [float(t1)]])
    ys = np.concatenate([ps[:1], ps, ps[-1:]])
    return float(np.sum((ys[1:] + ys[:-1]) * np.diff(xs)) / 2.0 / 1e9)


def _weights(ts: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """How many seconds each reading's value counts for in _area (its noise's weight)."""
    if ts.size == 1:
        return np.array([(t1 - t0) / 1e9])
    gaps = np.diff(ts)
    w = np.zeros(ts.size)
    w[:-1] += gaps / 2.0
    w[1:] += gaps / 2.0
    w[0] += ts[0] - t0
    w[-1] += t1 - ts[-1]
    return w / 1e9


def _departures(ts: np.ndarray, ps: np.ndarray, before: float, after: float) -> np.ndarray:
    """Each reading's departure from what its neighbours say at its instant: the line
    between them inside; the one inside neighbour at either end; a lone reading, the
    farther of the readings just outside (nothing inside the window vouches for it)."""
    if ps.size == 1:
        return np.array([max(abs(ps[0] - before), abs(ps[0] - after))])
    ref = np.empty(ps.size)
    ref[0], ref[-1] = ps[1], ps[-2]
    if ps.size > 2:
        w = (ts[1:-1] - ts[:-2]) / (ts[2:] - ts[:-2])
        ref[1:-1] = ps[:-2] + w * (ps[2:] - ps[:-2])
    return np.abs(ps - ref)


def fit_window(pr: PlacedReadings, t0: int, t1: int, noise_w: float) -> WindowFit | None:
    """Energy over [t0, t1] from the readings inside it; None when none is surely inside
    (a window shorter than about one gauge period: the polled curve is all there is).
    Each reading's independent noise counts with the time its value is held for: the noise
    part of the bound is NOISE_SIGMAS·σ·√(Σ w_k²), w_k the seconds reading k stands for.

    A reading that departs from its neighbours by more than the reading noise allows
    (NOISE_SIGMAS·σ·√2) caught a transient — a short dip to idle, say — and its value
    stands for the w_k seconds around it: the bound takes w_k × the departure for it (the
    true dip may be as short as an instant). Outside readings are never used, so a reading
    the gauge took between two requests does not leak into either."""
    k = _inside(pr, t0, t1)
    if k.size == 0:
        return None
    ts, ps = pr.t_ns[k], pr.p_w[k]
    energy = _area(ts, ps, t0, t1)
    before = float(pr.p_w[k[0] - 1] if k[0] > 0 else ps[0])
    after = float(pr.p_w[k[-1] + 1] if k[-1] + 1 < len(pr) else ps[-1])
    weights = _weights(ts, t0, t1)
    dep = _departures(ts, ps, before, after)
    caught = dep > NOISE_SIGMAS * noise_w * np.sqrt(2.0)
    transient = float(np.sum((weights * dep)[caught]))
    # a reading at an edge may stand up to its placement's ε on the other side
    eps_s = pr.eps_ns[k] / 1e9
    steps = (abs(float(ps[0] - before)), abs(float(ps[-1] - after)))
    edge = float(eps_s[0]) * steps[0] + float(eps_s[-1]) * steps[1]
    noise = NOISE_SIGMAS * noise_w * float(np.sqrt(np.sum(weights**2)))
    return WindowFit(energy, int(k.size), edge, transient, noise, max(steps))
