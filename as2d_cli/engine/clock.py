"""Two clocks, one engine: virtual (replay, priced costs) and wall (native, measured).

Times are integer nanoseconds so interval accounting (T = D + V − O + H) is exact. The
engine wraps every unit of work in :meth:`Clock.run` with an :class:`Op` describing it;
the wall clock lets the work take its real time, the virtual clock advances by a price.
This follows SimPy's Environment / RealtimeEnvironment split.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from as2d_cli.errors import EngineError

T = TypeVar("T")

# Stages used by the accounting identity (paper D.2.7).
PRODUCER = "producer"  # drafting / source generation / publication
VERIFIER = "verifier"  # target-only progress, verification, correction, alignment
OTHER = "other"  # loop residual, queue work: counted in H


@dataclass(frozen=True, slots=True)
class Op:
    """One unit of charged work.

    kind: ``target_step`` (scalar target-only step), ``verify`` (verification call of
    physical ``width``), ``draft`` (``count`` serial drafter forwards plus ``catch_up``
    forwards of a draft never forwarded, ``rows`` confidence rows), ``paired`` (ASP
    paired-branch forward), ``refresh`` (ASP batched KV refresh of ``width`` reused
    tokens), ``loop`` (serial-round residual), ``align`` (queue/alignment work).
    """

    kind: str
    width: int = 0
    count: int = 0
    catch_up: int = 0
    rows: int = 0

    @property
    def stage(self) -> str:
        if self.kind in ("target_step", "verify", "align"):
            return VERIFIER
        if self.kind in ("draft", "paired", "refresh"):
            return PRODUCER
        return OTHER


@dataclass(frozen=True, slots=True)
class Interval:
    stage: str
    start: int
    end: int
    op: Op


class Clock(ABC):
    """A clock that runs work and records its service interval."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.record_intervals = True

    @abstractmethod
    def now(self) -> int:
        """Current time in nanoseconds."""

    @abstractmethod
    def run(self, work: Callable[[], T], op: Op | Callable[[T], Op]) -> T:
        """Execute ``work`` and charge it as ``op``; the op may be computed from the
        work's result (a confidence-stopped draft's length is known only afterwards)."""

    def _log(self, op: Op, start: int, end: int) -> None:
        if self.record_intervals and end > start:
            self.intervals.append(Interval(op.stage, start, end, op))


class WallClock(Clock):
    """Real time from ``time.perf_counter_ns``, relative to the episode start."""

    def __init__(self, origin: int | None = None) -> None:
        super().__init__()
        self.origin = time.perf_counter_ns() if origin is None else origin

    def now(self) -> int:
        return time.perf_counter_ns() - self.origin

    def run(self, work: Callable[[], T], op: Op | Callable[[T], Op]) -> T:
        start = self.now()
        result = work()
        end = self.now()
        if self.record_intervals:
            self._log(op if isinstance(op, Op) else op(result), start, end)
        return result


class VirtualClock(Clock):
    """Virtual time advanced by ``price(op, now)`` (or ``price(op, now, position)``)
    nanoseconds for every op."""

    def __init__(
        self, price: Callable[..., int], start: int = 0, position: Callable[[], int] | None = None
    ) -> None:
        super().__init__()
        self._now = start
        self._price = price
        # With ``position`` (read before the work runs: the state the call starts from),
        # prices are called as price(op, now, position) — context-dependent costs.
        self.position = position

    def now(self) -> int:
        return self._now

    def run(self, work: Callable[[], T], op: Op | Callable[[T], Op]) -> T:
        start = self._now
        position = self.position
        at = (
            position() if position is not None else None
        )  # before the work: the state it starts from
        result = work()
        if not isinstance(op, Op):
            op = op(result)
        cost = self._price(op, start) if at is None else self._price(op, start, at)
        if cost < 0:
            raise EngineError(f"negative cost {cost} for {op}")
        end = self._now = start + cost
        if self.record_intervals and cost > 0:  # _log inlined: this is the replay's hot path
            self.intervals.append(Interval(op.stage, start, end, op))
        return result
