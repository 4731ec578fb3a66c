"""The accounting identity T = D + V − O + H (paper D.2.7), on integer-ns intervals.

D is the measure of the union of producer service intervals, V of verifier service
intervals, O of their intersection, H of [0, T] outside both. Intervals of one stage are
merged before summing, so overlapping work of the same stage is not double-counted.
With integer times the identity holds exactly; :func:`decompose` checks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from as2d_cli.engine.clock import PRODUCER, VERIFIER, Interval
from as2d_cli.errors import EngineError


def merge(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Sorted, disjoint union of spans clipped to [lo, hi]."""
    out: list[tuple[int, int]] = []
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def measure(spans: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in spans)


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intersection of two sorted disjoint span lists."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True, slots=True)
class Decomposition:
    T: int
    D: int
    V: int
    O: int
    H: int

    def as_ms(self) -> dict[str, float]:
        return {k: getattr(self, k) / 1e6 for k in ("T", "D", "V", "O", "H")}


def decompose(
    producer: Iterable[tuple[int, int]], verifier: Iterable[tuple[int, int]], T: int, start: int = 0
) -> Decomposition:
    """D, V, O, H over [start, start + T]; raises if the identity fails (it cannot with ints)."""
    if T < 0:
        raise EngineError(f"negative episode time {T}")
    hi = start + T
    p = merge(producer, start, hi)
    v = merge(verifier, start, hi)
    D, V = measure(p), measure(v)
    O = measure(intersect(p, v))
    H = T - measure(merge(p + v, start, hi))
    d = Decomposition(T, D, V, O, H)
    if T != D + V - O + H:
        raise EngineError(f"accounting identity broken: {d}")
    return d


def split_intervals(
    intervals: Iterable[Interval],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Producer and verifier spans from a clock's recorded intervals."""
    prod: list[tuple[int, int]] = []
    ver: list[tuple[int, int]] = []
    for iv in intervals:
        if iv.stage == PRODUCER:
            prod.append((iv.start, iv.end))
        elif iv.stage == VERIFIER:
            ver.append((iv.start, iv.end))
    return prod, ver
