"""The target-decoupled producer thread: runs a source on its own core and publishes.

The source is an iterator of units of work (one autoregressive token, or one whole chunk);
each ``next()`` is timed as producer service. An autoregressive source publishes every
``batch`` tokens and its final partial batch at its end; a chunked or external source
publishes each unit at once. After the target's EOS the runner sets ``stop``: the step in
flight finishes (drain) and nothing new starts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from as2d_cli.engine import CandidateBuffer, WallClock
from as2d_cli.models.timing import mark, split_since

EMULATED_CPUS = "AS2D_EMULATED_CPUS"


def emulated_cpus_env() -> dict[str, str]:
    """What an emulated phone's launcher puts in a program's environment: the host CPUs
    behind the phone's virtual ones (see :func:`host_cpus`)."""
    return {EMULATED_CPUS: ",".join(map(str, sorted(os.sched_getaffinity(0))))}


def host_cpus(cores: Sequence[int]) -> set[int]:
    """The CPUs to pin to. On an emulated phone (``AS2D_EMULATED_CPUS`` lists the host CPUs
    behind it) phone CPU c runs on host CPU hosts[c % len(hosts)], as its taskset maps it."""
    hosts = [int(c) for c in os.environ.get(EMULATED_CPUS, "").split(",") if c.strip().isdigit()]
    return {hosts[c % len(hosts)] for c in cores} if hosts else set(cores)


def pin_current_thread(cores: Sequence[int] | None) -> bool:
    """Pin the calling thread (Linux: pid 0 is the thread) to ``cores``; False if impossible."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(0, host_cpus(cores))
        return True
    except OSError:
        return False


class Producer(threading.Thread):
    """Publishes a source's units into ``buffer`` on the shared decode clock."""

    def __init__(
        self,
        units: Iterable,
        buffer: CandidateBuffer,
        clock: WallClock,
        *,
        kind: str,
        batch: int = 8,
        cores: Sequence[int] | None = None,
        schedule: Sequence[float] | None = None,
    ) -> None:
        super().__init__(name="as2d-producer", daemon=True)
        self.units: Iterator = iter(units)
        self.buffer = buffer
        self.clock = clock
        self.kind = kind  # "autoregressive" | "chunked" | "external"
        self.batch = batch
        self.cores = cores
        self.schedule = schedule  # external: publication times (ns) per unit
        self.stop = threading.Event()
        self.steps: list[tuple[int, int, int]] = []  # (start, end, tokens) service intervals
        self.publications: list[tuple[int, int, int]] = []  # (time, offset, count)
        self.finished_at: int | None = None  # source exhausted (its EOS, cap or last chunk)
        # Where the steps' time went (as2d_cli.models.timing): ORT, Python, waiting for a CPU.
        self.split: dict[str, int] = {}
        self.error: BaseException | None = None
        self.pinned = False

    def _publish(self, tokens: list[int], confs: list[float | None]) -> None:
        t = self.clock.now()
        offset = len(self.buffer)
        known = [c for c in confs if c is not None]
        use_conf = known if len(known) == len(confs) else None  # all or none
        self.buffer.publish(tokens, t, use_conf)
        self.publications.append((t, offset, len(tokens)))

    def run(self) -> None:
        self.pinned = pin_current_thread(self.cores)
        pend_t: list[int] = []
        pend_c: list[float | None] = []
        exhausted = False
        # Where the steps' time goes, read once over the whole loop: per step it cost two
        # counter reads and a dictionary on the source's hot path.
        begun = mark()
        try:
            i = 0
            while not self.stop.is_set():
                if self.schedule is not None and i < len(self.schedule):
                    # External batches: wait (interruptibly) for the batch's publication time.
                    delay = (self.schedule[i] - self.clock.now()) / 1e9
                    if delay > 0 and self.stop.wait(delay):
                        break
                start = self.clock.now()
                try:
                    unit = next(self.units)
                except StopIteration:
                    exhausted = True
                    break
                toks = [int(t) for t, _ in unit]
                confs = [None if c is None else float(c) for _, c in unit]
                if self.kind == "autoregressive":
                    pend_t += toks
                    pend_c += confs
                    if len(pend_t) >= self.batch:
                        self._publish(pend_t, pend_c)
                        pend_t, pend_c = [], []
                elif toks or self.kind == "external":
                    self._publish(toks, confs)
                if self.kind != "external":
                    self.steps.append((start, self.clock.now(), len(toks)))
                i += 1
            if exhausted:
                if pend_t:  # the final partial batch, published at the source's end
                    start = self.clock.now()
                    self._publish(pend_t, pend_c)
                    self.steps.append((start, self.clock.now(), 0))
                self.finished_at = self.clock.now()
            if self.kind != "external":  # an external source's loop only waits
                self.split = split_since(begun)
        except BaseException as exc:  # surfaced by the runner as one error event
            self.error = exc
        finally:
            self.buffer.close()


def source_units(source: Any) -> Iterator[list[tuple[int, float | None]]]:
    """A :class:`as2d_cli.engine.interfaces.Source` as units of work: ``start()`` (its audio
    encoding, producer work inside the clock) yields no tokens, then one unit per step."""
    source.start()
    yield []
    while True:
        unit = source.step()
        if unit is None:
            return
        yield list(unit)


def external_units(
    batches: Sequence[tuple[float, list[int]]],
) -> tuple[list[list[tuple[int, None]]], list[float]]:
    """External candidate batches (``t_ms`` after the request) as units and a schedule in ns."""
    ordered = sorted(batches, key=lambda b: b[0])
    return [[(int(t), None) for t in toks] for _, toks in ordered], [ms * 1e6 for ms, _ in ordered]
