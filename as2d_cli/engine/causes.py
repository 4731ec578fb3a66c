"""What a target-decoupled episode's calls saw, by cause of lost speed.

A K1 call (the root alone) happens either because nothing was published after the root's
source position (the source's *pace*) or because candidates were published there but none
was usable after the cursor (the *aligner*); offered candidates the target rejected measure
the source's *quality*. ``benchmarks/alignment_ceiling.py`` reads the replay's rounds and
``benchmarks/native_speedup.py`` a native run's, both through :func:`call_causes`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields


@dataclass
class CallCauses:
    calls: int = 0
    k1_nothing_ready: int = 0  # K1 calls with nothing published past the root's position
    k1_ready_unaligned: int = 0  # K1 calls with candidates published there, none usable
    offered: int = 0
    accepted: int = 0

    def add(self, other: CallCauses) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def shares(self) -> dict[str, float]:
        """Shares of the calls (K1 causes) and of the offered candidates (rejected)."""
        c, o = self.calls, self.offered
        return {
            "k1_nothing_ready": self.k1_nothing_ready / c if c else 0.0,
            "k1_ready_unaligned": self.k1_ready_unaligned / c if c else 0.0,
            "rejected": (o - self.accepted) / o if o else 0.0,
        }


def call_causes(
    rounds: Iterable[tuple[int, int, int, int, int]],
    publications: Sequence[tuple[int, int]],
) -> CallCauses:
    """Count one episode's calls by cause.

    ``rounds``: per target call in order, (width, start time, buffer cursor after the call,
    offered, accepted); ``publications``: (time, tokens published in all up to then), in
    time order. The cursor after a call is where the next call's candidates start
    (alignment.py). A K1 call is the aligner's when the source had published past the
    cursor's first candidate (``published > cursor + 1``), else the source's pace."""
    times = [t for t, _ in publications]
    out = CallCauses()
    cursor = 0
    for width, start, after, offered, accepted in rounds:
        out.calls += 1
        if width == 1:
            i = bisect.bisect_right(times, start)
            published = publications[i - 1][1] if i else 0
            if published > max(cursor, 0) + 1:
                out.k1_ready_unaligned += 1
            else:
                out.k1_nothing_ready += 1
        cursor = after
        out.offered += offered
        out.accepted += accepted
    return out
