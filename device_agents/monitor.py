"""The 1 Hz monitor that runs during measured episodes (paper D.2.3): a thread sampling
cores online, each core's frequency ceiling and current frequency, the thermal zones and
the battery temperature. Frequency and temperature changes are recorded; a core going offline
(or the device going away) trips the monitor, and :func:`run_batch` stops the batch with a
:class:`BatchStopped` error that keeps the failure record and everything measured so far."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from as2d_cli.errors import DeviceError
from device_agents.base import CpuState, Device
from device_agents.gating import GateConfig, GateFailed, GateResult, Sleep, require_gate

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the monitor started
    wall_time: float
    online: tuple[int, ...]
    ceiling_khz: dict[int, int | None]
    cur_khz: dict[int, int | None]
    thermal_c: dict[str, float] = field(default_factory=dict)
    battery_temp_c: float | None = None

    @classmethod
    def of(cls, t0: float, state: CpuState) -> Sample:
        return cls(
            round(time.monotonic() - t0, 3),
            state.wall_time,
            tuple(sorted(state.online)),
            {c.cpu: c.ceiling_khz for c in state.cores},
            {c.cpu: c.cur_khz for c in state.cores},
            dict(state.thermal_c),
            state.battery_temp_c,
        )


@dataclass(frozen=True)
class FailureRecord:
    kind: str  # "core_offline" | "device_lost" | "episode_error" (the episode raised a DeviceError)
    t_s: float
    wall_time: float
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


class CoreMonitor:
    """Samples ``device.cpu_state()`` every ``interval_s`` in a thread. ``expected`` is the
    set of cores that must stay online (default: those online at the first sample).

    ``away_ok``: a device that cannot be reached (a phone unplugged on purpose for an
    energy capture) does not trip the monitor; each stretch it was away is recorded in
    ``gaps`` and sampling goes on, so a core found offline when it is back still trips it."""

    def __init__(
        self,
        device: Device,
        interval_s: float = 1.0,
        expected: set[int] | None = None,
        on_trip: Callable[[FailureRecord], None] | None = None,
        away_ok: bool = False,
    ) -> None:
        self.device = device
        self.on_trip = on_trip  # called once, from the monitor's thread, when it trips
        self.interval_s = interval_s
        self.expected = expected
        self.away_ok = away_ok
        self.samples: list[Sample] = []
        self.gaps: list[dict[str, Any]] = []  # away_ok: {"from_s", "to_s", "message"}
        self.failure: FailureRecord | None = None
        self.tripped = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> CoreMonitor:
        self._t0 = time.monotonic()
        self._sample()  # first sample synchronously: the episode starts from a known state
        self._thread = threading.Thread(target=self._loop, daemon=True, name="as2d-core-monitor")
        self._thread.start()
        return self

    def _loop(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.interval_s
            if not self._sample():
                return

    def _sample(self) -> bool:
        try:
            state = self.device.cpu_state()
        except DeviceError as exc:
            if self.away_ok:
                t = round(time.monotonic() - self._t0, 3)
                last = self.gaps[-1] if self.gaps else None
                if last is not None and last["open"]:
                    last["to_s"] = t
                else:
                    self.gaps.append({"from_s": t, "to_s": t, "message": str(exc), "open": True})
                return True
            self._trip(
                FailureRecord(
                    "device_lost", round(time.monotonic() - self._t0, 3), time.time(), str(exc)
                )
            )
            return False
        s = Sample.of(self._t0, state)
        if self.gaps:
            self.gaps[-1]["open"] = False
        before = self.samples[-1] if self.samples else None
        self.samples.append(s)
        if self.expected is None:
            self.expected = set(s.online)
        gone = sorted(self.expected - set(s.online))
        if gone:
            self._trip(
                FailureRecord(
                    "core_offline",
                    s.t_s,
                    s.wall_time,
                    f"CPU{','.join(map(str, gone))} went offline on {self.device.serial} {s.t_s:.1f} s into the episode "
                    f"(at {time.strftime('%H:%M:%S', time.localtime(s.wall_time))}); the batch is stopped (results so far "
                    f"are kept) -- let the phone cool down and rerun",
                    {
                        "offline": gone,
                        "online": list(s.online),
                        # the last sample that saw every expected core online: the loss
                        # happened after it (None: at the monitor's first sample)
                        "last_good_wall_time": None if before is None else before.wall_time,
                    },
                )
            )
            return False
        return True

    def _trip(self, record: FailureRecord) -> None:
        first = self.failure is None
        if first:
            self.failure = record
        self.tripped.set()
        if first and self.on_trip is not None:
            try:
                self.on_trip(record)
            except Exception:  # noqa: BLE001 - stopping the work is best effort; the record stands
                pass

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval_s))
        return self.samples

    def check(self) -> None:
        """Raise at once if the monitor has tripped (episodes call this between steps)."""
        if self.failure is not None:
            raise DeviceError(self.failure.message)

    def __enter__(self) -> CoreMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self) -> dict[str, Any]:
        """Every sample and the failure, as stored beside a run's results."""
        rec: dict[str, Any] = {
            "interval_s": self.interval_s,
            "samples": [asdict(s) for s in self.samples],
            "failure": asdict(self.failure) if self.failure else None,
        }
        if self.away_ok:
            rec["gaps"] = [{k: v for k, v in g.items() if k != "open"} for g in self.gaps]
        return rec


@dataclass
class EpisodeRecord(Generic[T]):
    index: int
    result: T | None
    gate: GateResult | None
    samples: list[Sample]
    failure: FailureRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "gate": self.gate.to_dict() if self.gate else None,
            "samples": [asdict(s) for s in self.samples],
            "failure": asdict(self.failure) if self.failure else None,
        }


class BatchStopped(DeviceError):
    """The batch stopped early. ``completed`` holds every finished episode, ``interrupted``
    the episode that was running (its result, if it returned one, is kept but must not be
    used as a measurement), ``failure`` the record that stopped it."""

    def __init__(
        self,
        message: str,
        completed: list[EpisodeRecord[Any]],
        interrupted: EpisodeRecord[Any] | None,
        failure: FailureRecord | None,
        gate: GateResult | None = None,
    ) -> None:
        super().__init__(message)
        self.completed = completed
        self.interrupted = interrupted
        self.failure = failure
        self.gate = gate


Episode = Callable[[CoreMonitor], T]


def run_batch(
    device: Device,
    episodes: Sequence[Episode[T]],
    gate: GateConfig | None = None,
    monitor_interval_s: float = 1.0,
    sleep: Sleep = time.sleep,
    use_gate: bool = True,
) -> list[EpisodeRecord[T]]:
    """Gate, then run each episode under the monitor. An episode receives the monitor so
    it can stop early (``monitor.tripped`` / ``monitor.check()``)."""
    done: list[EpisodeRecord[T]] = []
    for i, episode in enumerate(episodes):
        gate_result = None
        if use_gate:
            try:
                gate_result = require_gate(device, gate, sleep)
            except GateFailed as exc:
                raise BatchStopped(
                    f"episode {i + 1}/{len(episodes)} not started: {exc} "
                    f"({len(done)} finished episodes kept)",
                    done,
                    None,
                    None,
                    exc.result,
                ) from None
        monitor = CoreMonitor(device, monitor_interval_s).start()
        result: T | None = None
        try:
            result = episode(monitor)
        except BaseException as exc:
            if not isinstance(exc, DeviceError):
                monitor.stop()  # never leave the sampling thread behind
                raise
            samples = monitor.stop()
            failure = monitor.failure or FailureRecord(
                "episode_error", round(time.monotonic() - monitor._t0, 3), time.time(), str(exc)
            )
            rec: EpisodeRecord[T] = EpisodeRecord(i, None, gate_result, samples, failure)
            raise BatchStopped(
                f"episode {i + 1}/{len(episodes)} stopped: {failure.message} "
                f"({len(done)} finished episodes kept)",
                done,
                rec,
                failure,
            ) from None
        samples = monitor.stop()
        rec = EpisodeRecord(i, result, gate_result, samples, monitor.failure)
        if monitor.failure is not None:
            raise BatchStopped(
                f"episode {i + 1}/{len(episodes)} stopped: {monitor.failure.message} "
                f"({len(done)} finished episodes kept)",
                done,
                rec,
                monitor.failure,
            )
        done.append(rec)
    return done


def abort_on_trip(runner: Any) -> Callable[[FailureRecord], None]:
    """A CoreMonitor ``on_trip`` that stops ``runner``'s command in flight (runners that
    cannot be stopped from outside, a phone's file-mode batches, have no ``abort``)."""

    def abort(_record: FailureRecord) -> None:
        stop = getattr(runner, "abort", None)
        if stop is not None:
            stop()

    return abort


def call_monitored(
    device: Device, runner: Any, cmd: dict[str, Any], interval_s: float = 1.0
) -> dict[str, Any]:
    """One runner command with the monitor beside it; the result gains the monitor's
    record. A core going offline stops it (a runner with ``abort()`` at once) and raises
    one line naming the core and the time."""
    monitor = CoreMonitor(device, interval_s, on_trip=abort_on_trip(runner)).start()
    try:
        res = runner.call(cmd)
    except DeviceError:
        if monitor.failure is None or monitor.failure.kind != "core_offline":
            raise
        res = {}
    finally:
        monitor.stop()
    if monitor.failure is not None and monitor.failure.kind == "core_offline":
        raise DeviceError(
            monitor.failure.message.replace(
                "the batch is stopped (results so far are kept)", "the request is stopped"
            )
        )
    return {**res, "monitor": monitor.record()}
