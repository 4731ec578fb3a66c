"""Where a thread's time goes: ONNX Runtime calls against the Python around them.

Every session :func:`~as2d_cli.models.session.make_session` opens is a :class:`TimedSession`:
each ``run`` (numpy feeds) and ``run_with_ort_values`` (OrtValues) adds its wall time and the
calling thread's CPU time to that thread's :class:`OrtLedger`. A caller reads the ledger before and after a stretch of work
(:func:`split_since`) and gets the stretch's wall time split into

* ``ort`` — wall time inside ONNX Runtime calls (ORT computes on the calling thread: one
  intra-op thread per session);
* ``python`` — CPU time outside them (the adapter, the engine, queue work);
* ``wait`` — wall time the thread was not on a CPU (another process or thread had it).

Two counter reads a call (about a microsecond) are the whole cost.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class OrtLedger:
    """One thread's running totals of ORT calls."""

    calls: int = 0
    wall_ns: int = 0
    cpu_ns: int = 0


_LOCAL = threading.local()


def ledger() -> OrtLedger:
    """The calling thread's ledger."""
    led = getattr(_LOCAL, "ledger", None)
    if led is None:
        led = _LOCAL.ledger = OrtLedger()
    return led


@dataclass(frozen=True)
class Mark:
    """A point in a thread's time: wall clock, thread CPU clock, and its ledger then."""

    wall_ns: int
    cpu_ns: int
    ort_calls: int
    ort_wall_ns: int
    ort_cpu_ns: int


def mark() -> Mark:
    led = ledger()
    return Mark(time.perf_counter_ns(), time.thread_time_ns(), led.calls, led.wall_ns, led.cpu_ns)


def split_since(start: Mark) -> dict[str, int]:
    """The calling thread's time since ``start``: wall, ORT, Python and waiting (ns), and
    the ORT calls made."""
    end = mark()
    wall = end.wall_ns - start.wall_ns
    cpu = end.cpu_ns - start.cpu_ns
    ort_wall = end.ort_wall_ns - start.ort_wall_ns
    ort_cpu = end.ort_cpu_ns - start.ort_cpu_ns
    return {
        "wall_ns": wall,
        "ort_ns": ort_wall,
        "python_ns": max(cpu - ort_cpu, 0),
        "wait_ns": max(wall - ort_wall - max(cpu - ort_cpu, 0), 0),
        "ort_calls": end.ort_calls - start.ort_calls,
    }


def add_splits(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


class TimedSession:
    """An ``onnxruntime.InferenceSession`` whose ``run`` and ``run_with_ort_values`` are
    booked in the thread's ledger and in the session's own totals (``booked``: which model's
    calls a thread made); everything else is the session's own."""

    __slots__ = ("_sess", "_binding", "booked")

    def __init__(self, sess: Any) -> None:
        self._sess = sess
        # The binding-level session under ORT's Python wrapper (``InferenceSession._sess``):
        # its run_with_ort_values skips the wrapper's per-call checks of every input, tens
        # of µs for a decoder with per-layer caches (the adapters feed the session's own
        # input names). A stand-in without one is its own binding.
        self._binding = getattr(sess, "_sess", sess)
        self.booked = OrtLedger()

    def _book(self, w0: int, c0: int) -> None:
        wall, cpu = time.perf_counter_ns() - w0, time.thread_time_ns() - c0
        for led in (ledger(), self.booked):
            led.calls += 1
            led.wall_ns += wall
            led.cpu_ns += cpu

    def run(self, output_names: Any, feeds: Any, *args: Any, **kwargs: Any) -> Any:
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            return self._sess.run(output_names, feeds, *args, **kwargs)
        finally:
            self._book(w0, c0)

    def run_with_ort_values(self, output_names: list[str], feeds: dict[str, Any]) -> Any:
        """One call on binding-level OrtValues (``feeds``: input name -> OrtValue of
        :mod:`as2d_cli.models.ortio`): the outputs named, an ``OrtValueVector``."""
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            return self._binding.run_with_ort_values(feeds, output_names, None)
        finally:
            self._book(w0, c0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)


def booked_wall_ns(model: Any) -> int:
    """ORT wall time booked so far by every session of ``model`` (an adapter object)."""
    return sum(v.booked.wall_ns for v in vars(model).values() if isinstance(v, TimedSession))
