"""The emulated phone's battery: a gauge model driven by device activity, and a writer of
real Perfetto traces (TracePacket + BatteryCounters from the `perfetto` package's protos).

Conventions follow Android's BatteryManager: current in µA, negative while discharging,
positive while net charge flows in; voltage in µV; charge counter in µAh. Like real fuel
gauges, the reported values update once per `gauge_update_ms` (1 s by default) however fast
they are polled: the updates fall on a fixed grid of the boot clock (every period from the
model's creation), so the period does not depend on when, or how late, the polls come.
Faults a real gauge shows (stale values, mA reported in the µA field, no voltage, discharge
current reported positive) are switches on the model so refusals can be tested end to end.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOTTIME = pb.BuiltinClock.Value("BUILTIN_CLOCK_BOOTTIME")
MONOTONIC = pb.BuiltinClock.Value("BUILTIN_CLOCK_MONOTONIC")
REALTIME = pb.BuiltinClock.Value("BUILTIN_CLOCK_REALTIME")
SEQUENCE_ID = 1  # one trusted writer sequence, as traced's battery poller uses


def boottime_ns() -> int:
    """The boot-time clock (CLOCK_BOOTTIME), the clock of Perfetto's default timestamps."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


@dataclass
class BatteryParams:
    """A phone battery of the paper's class (Xiaomi 14: 4610 mAh, ~10 W under load)."""

    capacity_mah: float = 4610.0
    ocv_full_v: float = 4.45  # open-circuit voltage at 100 %
    ocv_empty_v: float = 3.40  # open-circuit voltage at 0 %
    r_internal_ohm: float = 0.10
    idle_ma: float = 420.0  # screen on, app in foreground
    per_worker_ma: float = 1150.0  # one busy inference worker
    charge_ma: float = 2000.0  # charger input while plugged
    gauge_update_ms: int = 1000  # the gauge's update period (a fixed grid on the boot clock)
    initial_percent: float = 78.0
    current_noise: float = 0.01  # relative jitter of each reported current reading
    seed: int = 6


@dataclass
class GaugeFaults:
    """Ways real gauges mislead; each one must end in a refusal, not a number."""

    stale: bool = False  # the gauge never updates after its first reading
    current_scale: float = 1.0  # 1e-3: mA written into the µA field; 1e3: nA
    report_voltage: bool = True
    charge_scale: float = 1.0  # 1e-3: the charge counter reports mAh in the µAh field
    current_sign: int = 1  # -1: discharge current reported positive (a vendor's convention)


# The gauge's conventions `as2d emulator start --battery` can set (tests of sign and units).
GAUGE_SIGNS = {"negative": 1, "positive": -1}  # the sign of discharge current (Android: -)
GAUGE_UNITS = {"uA": 1.0, "mA": 1e-3, "nA": 1e3}  # the unit written into the µA field
GAUGE_PERIOD_MS = (10, 60_000)  # the update periods the options accept


def gauge_model(period_ms: int = 1000, sign: str = "negative", units: str = "uA") -> BatteryModel:
    """A battery model whose gauge updates every `period_ms` on the boot clock, reports
    discharge current with `sign` (GAUGE_SIGNS) and writes current in `units` (GAUGE_UNITS)."""
    from as2d_cli.errors import UserError

    lo, hi = GAUGE_PERIOD_MS
    if not lo <= period_ms <= hi:
        raise UserError(f"gauge period {period_ms} ms is outside {lo}-{hi} ms")
    if sign not in GAUGE_SIGNS:
        raise UserError(f"gauge sign {sign!r} is not one of {', '.join(GAUGE_SIGNS)}")
    if units not in GAUGE_UNITS:
        raise UserError(f"gauge units {units!r} are not one of {', '.join(GAUGE_UNITS)}")
    return BatteryModel(
        BatteryParams(gauge_update_ms=period_ms),
        GaugeFaults(current_scale=GAUGE_UNITS[units], current_sign=GAUGE_SIGNS[sign]),
    )


@dataclass(frozen=True)
class GaugeReading:
    t_boot_ns: int
    current_ua: int
    current_avg_ua: int
    voltage_uv: int | None
    charge_uah: int
    capacity_percent: float
    updated_ns: int | None = None  # boot time of the gauge update this reading comes from


@dataclass
class BatteryModel:
    """Charge, current and voltage as functions of activity and of the charger.

    `activity` is the number of busy inference workers (fractional allowed); the model
    integrates the current piecewise-constant between changes on the boot clock. The gauge
    takes a reading at creation and then every `gauge_update_ms` on that grid; a poll gets
    the latest reading. `true_power_w` is the noise-free power (ground truth for tests).
    """

    params: BatteryParams = field(default_factory=BatteryParams)
    faults: GaugeFaults = field(default_factory=GaugeFaults)
    clock_ns: Callable[[], int] = boottime_ns
    activity_probe: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._charge_uah = self.params.capacity_mah * 1000.0 * self.params.initial_percent / 100.0
        self._plugged = True
        self._activity = 0.0
        self._t_ns = self.clock_ns()
        self._next_update_ns = self._t_ns  # the gauge's grid: creation + k·period
        self._gauge: GaugeReading | None = None
        self._avg_window: list[float] = []
        self._rng = random.Random(self.params.seed)  # reproducible gauge jitter
        # Ground truth for tests: (from_ns, to_ns, power_w) of every integrated stretch.
        self._truth: list[tuple[int, int, float]] = []

    # -- state driven by the emulated phone -------------------------------------------
    @property
    def plugged(self) -> bool:
        return self._plugged

    def set_plugged(self, plugged: bool) -> None:
        with self._lock:
            self._advance_locked()
            self._plugged = plugged

    def set_activity(self, workers: float) -> None:
        with self._lock:
            self._advance_locked()
            self._activity = max(0.0, workers)

    def add_activity(self, delta: float) -> None:
        with self._lock:
            self._advance_locked()
            x = self._activity + delta
            # Fractions added and taken away again leave a float residue (1e-16), not zero:
            # below a billionth of a worker nothing runs.
            self._activity = x if x > 1e-9 else 0.0

    # -- physics --------------------------------------------------------------------------
    def _activity_now(self) -> float:
        if self.activity_probe is not None:
            return max(0.0, float(self.activity_probe()))
        return self._activity

    def _current_ma(self, activity: float) -> float:
        """Net battery current in mA (Android sign: negative while discharging)."""
        draw = self.params.idle_ma + self.params.per_worker_ma * activity
        return (self.params.charge_ma - draw) if self._plugged else -draw

    def _soc(self) -> float:
        return min(1.0, max(0.0, self._charge_uah / (self.params.capacity_mah * 1000.0)))

    def _voltage_v(self, current_ma: float) -> float:
        p = self.params
        ocv = p.ocv_empty_v + (p.ocv_full_v - p.ocv_empty_v) * self._soc()
        return ocv + current_ma / 1000.0 * p.r_internal_ohm  # sags while discharging

    def _integrate_locked(self, to_ns: int, current_ma: float) -> None:
        if to_ns > self._t_ns:
            power_w = -current_ma / 1000.0 * self._voltage_v(current_ma)
            self._truth.append((self._t_ns, to_ns, power_w))
        dt_h = max(0, to_ns - self._t_ns) / 3.6e12
        cap = self.params.capacity_mah * 1000.0
        self._charge_uah = min(cap, max(0.0, self._charge_uah + current_ma * 1000.0 * dt_h))
        self._t_ns = max(self._t_ns, to_ns)

    def _advance_locked(self, through: bool = False) -> None:
        """Integrate the charge up to now under the activity held since the last change,
        taking a gauge reading at every grid instant passed on the way (before now; also
        at now with `through`, for a read — a change made at an instant is seen there)."""
        now = max(self.clock_ns(), self._t_ns)
        current_ma = self._current_ma(self._activity_now())
        period = max(1, int(self.params.gauge_update_ms)) * 1_000_000
        if self._gauge is not None and self.faults.stale:
            self._next_update_ns = now + period  # a frozen gauge never updates again
        due = self._next_update_ns
        last = now if through else now - 1
        if due <= last:
            n = (last - due) // period + 1
            if n > 20:  # long unobserved stretch: only the last readings matter
                due += (n - 20) * period
            while due <= last:
                self._integrate_locked(due, current_ma)
                self._update_gauge_locked(due, current_ma)
                due += period
            self._next_update_ns = due
        self._integrate_locked(now, current_ma)

    def _update_gauge_locked(self, at_ns: int, current_ma: float) -> None:
        # Readings jitter like a real gauge's; the charge counter integrates the true load.
        current_ma *= 1.0 + self.params.current_noise * (2.0 * self._rng.random() - 1.0)
        self._avg_window = (self._avg_window + [current_ma])[-10:]
        scale = 1000.0 * self.faults.current_scale * self.faults.current_sign
        volt = round(self._voltage_v(current_ma) * 1e6) if self.faults.report_voltage else None
        self._gauge = GaugeReading(
            t_boot_ns=at_ns,
            current_ua=round(current_ma * scale),
            current_avg_ua=round(sum(self._avg_window) / len(self._avg_window) * scale),
            voltage_uv=volt,
            charge_uah=round(self._charge_uah * self.faults.charge_scale),
            capacity_percent=round(self._soc() * 100.0, 1),
            updated_ns=at_ns,
        )

    def true_power_w(self) -> float:
        """The noise-free discharge power now (W, positive while discharging)."""
        with self._lock:
            self._advance_locked()
            current_ma = self._current_ma(self._activity_now())
            return -current_ma / 1000.0 * self._voltage_v(current_ma)

    def true_energy_j(self, from_ns: int, to_ns: int) -> float:
        """The noise-free discharge energy between two boot-clock instants (J): the
        ground truth a request window's measured energy is checked against."""
        with self._lock:
            self._advance_locked()
            return sum(
                w * (min(b, to_ns) - max(a, from_ns)) / 1e9
                for a, b, w in self._truth
                if b > from_ns and a < to_ns
            )

    def status(self) -> str:
        """'Charging' / 'Discharging' as /sys/class/power_supply/battery/status reports."""
        return "Charging" if self._plugged else "Discharging"

    def read(self) -> GaugeReading:
        """What the fuel gauge reports now: its latest reading, stamped with the poll time."""
        with self._lock:
            self._advance_locked(through=True)
            g = self._gauge
            assert g is not None  # the first reading is taken at creation
            return GaugeReading(
                self._t_ns,
                g.current_ua,
                g.current_avg_ua,
                g.voltage_uv,
                g.charge_uah,
                g.capacity_percent,
                g.updated_ns,
            )


# -- the load the phone's programs put on it ---------------------------------------------------
THREAD_SAMPLE_S = 0.1  # how often the programs' CPU time is read
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _cpu_times(pids: set[int]) -> dict[int, tuple[int, float, float]]:
    """Per process: (parent pid, CPU seconds of its own threads, CPU seconds of its reaped
    children) from /proc/PID/stat (utime + stime, cutime + cstime)."""
    out: dict[int, tuple[int, float, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid = int(fields[1])
            own = (int(fields[11]) + int(fields[12])) * _TICK_S
            kids = (int(fields[13]) + int(fields[14])) * _TICK_S
        except (OSError, IndexError, ValueError):
            continue
        out[pid] = (ppid, own, kids)
    return out


class ThreadLoad:
    """The busy workers the phone's programs are: every `THREAD_SAMPLE_S`, the CPU time the
    processes the phone runs (and their descendants) used since the last sample, per second
    — a request with a target and a producer thread busy counts two, an idle one none. The
    model holds that load until the next sample."""

    def __init__(self, phone, model: BatteryModel) -> None:  # type: ignore[no-untyped-def]
        self.phone, self.model = phone, model
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="as2d-thread-load", daemon=True)
        self._held = 0.0
        self._seen: dict[int, tuple[int, float, float]] = {}  # pid → _cpu_times at the last sample

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._hold(0.0)

    def _hold(self, workers: float) -> None:
        self.model.add_activity(workers - self._held)
        self._held = workers

    def sample(self, dt_s: float) -> float:
        """Busy workers over the last `dt_s` seconds: the CPU time every process used since
        it was last seen (a new one from its start), its reaped children's included — less
        what a child seen before had used when it was reaped (now in its parent's share)."""
        from device_agents.emulator.phone import _process_trees

        roots = set(getattr(self.phone, "processes", ()))
        now = _cpu_times(_process_trees(roots)) if roots else {}
        used = 0.0
        for pid, (_, own, kids) in now.items():
            _, own0, kids0 = self._seen.get(pid, (0, 0.0, 0.0))
            used += max(0.0, own - own0) + max(0.0, kids - kids0)
        for pid, (ppid, own0, kids0) in self._seen.items():
            if pid not in now and ppid in now:  # reaped: its time moved into the parent's
                used -= own0 + kids0
        self._seen = now
        return max(0.0, used) / dt_s if dt_s > 0 else 0.0

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(THREAD_SAMPLE_S):
            t = time.monotonic()
            self._hold(self.sample(t - last))
            last = t


# -- trace writing ------------------------------------------------------------------------
def clock_snapshot_packet(boot_ns: int, mono_ns: int, real_ns: int) -> pb.TracePacket:
    """The snapshot that relates the boot-time clock to the others, as traced emits it."""
    pkt = pb.TracePacket()
    pkt.timestamp = boot_ns
    pkt.trusted_packet_sequence_id = SEQUENCE_ID
    snap = pkt.clock_snapshot
    snap.primary_trace_clock = BOOTTIME
    for cid, ts in ((BOOTTIME, boot_ns), (MONOTONIC, mono_ns), (REALTIME, real_ns)):
        c = snap.clocks.add()
        c.clock_id = cid
        c.timestamp = ts
    return pkt


def battery_packet(
    r: GaugeReading, counters: list[str], clock_id: int | None = None, clock_offset_ns: int = 0
) -> pb.TracePacket:
    """One android.power poll: BatteryCounters with the requested fields only."""
    pkt = pb.TracePacket()
    pkt.timestamp = r.t_boot_ns + clock_offset_ns
    if clock_id is not None:
        pkt.timestamp_clock_id = clock_id
    pkt.trusted_packet_sequence_id = SEQUENCE_ID
    bc = pkt.battery
    if "CHARGE" in counters:
        bc.charge_counter_uah = r.charge_uah
    if "CAPACITY_PERCENT" in counters:
        bc.capacity_percent = r.capacity_percent
    if "CURRENT" in counters:
        bc.current_ua = r.current_ua
    if "CURRENT_AVG" in counters:
        bc.current_avg_ua = r.current_avg_ua
    if "VOLTAGE" in counters and r.voltage_uv is not None:
        bc.voltage_uv = r.voltage_uv
    return pkt


def encode_trace(
    readings: list[GaugeReading],
    config: pb.TraceConfig | None,
    counters: list[str],
    *,
    mono_minus_boot_ns: int = 0,
    real_minus_boot_ns: int = 0,
    sample_clock_id: int | None = None,
) -> bytes:
    """A complete Perfetto trace: clock snapshot, the config, then one packet per poll.

    With `sample_clock_id` the samples carry an explicit clock (e.g. MONOTONIC) whose
    relation to the boot clock only the snapshot tells; readers must convert.
    """
    trace = pb.Trace()
    start = readings[0].t_boot_ns if readings else boottime_ns()
    trace.packet.append(
        clock_snapshot_packet(start, start + mono_minus_boot_ns, start + real_minus_boot_ns)
    )
    if config is not None:
        cp = pb.TracePacket()
        cp.trusted_packet_sequence_id = SEQUENCE_ID
        cp.trace_config.CopyFrom(config)
        trace.packet.append(cp)
    offset = (
        mono_minus_boot_ns
        if sample_clock_id == MONOTONIC
        else (real_minus_boot_ns if sample_clock_id == REALTIME else 0)
    )
    for r in readings:
        trace.packet.append(battery_packet(r, counters, sample_clock_id, offset))
    return trace.SerializeToString()


class BatteryRecorder:
    """The emulated `android.power` data source: poll the model, write the trace file.

    Runs in a thread for at most `duration_ms` (the trace ends by itself) or until
    `stop()`; the file is rewritten every `file_write_period_ms` so a partial trace exists.
    """

    def __init__(
        self,
        model: BatteryModel,
        config: pb.TraceConfig,
        out_path: Path,
        poll_ms: int,
        counters: list[str],
        duration_ms: int,
        file_write_period_ms: int = 5000,
    ) -> None:
        self.model = model
        self.config = config
        self.out_path = Path(out_path)
        self.poll_ms = poll_ms
        self.counters = counters
        self.duration_ms = duration_ms
        self.file_write_period_ms = max(file_write_period_ms, poll_ms)
        self.readings: list[GaugeReading] = []
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="as2d-battery-recorder", daemon=True)
        self._mono_minus_boot = time.monotonic_ns() - boottime_ns()
        self._real_minus_boot = time.time_ns() - boottime_ns()

    def start(self) -> None:
        self._thread.start()
        self._started.wait(5.0)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _flush(self) -> None:
        data = encode_trace(
            list(self.readings),
            self.config,
            self.counters,
            mono_minus_boot_ns=self._mono_minus_boot,
            real_minus_boot_ns=self._real_minus_boot,
        )
        tmp = self.out_path.with_name(self.out_path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(self.out_path)

    def _run(self) -> None:
        t0 = time.monotonic()
        end = t0 + self.duration_ms / 1000.0
        next_flush = t0 + self.file_write_period_ms / 1000.0
        k = 0
        self._started.set()
        try:
            while True:
                now = time.monotonic()
                if now >= end or self._stop.is_set():
                    break
                self.readings.append(self.model.read())
                if now >= next_flush:
                    self._flush()
                    next_flush = now + self.file_write_period_ms / 1000.0
                k += 1
                wake = min(end, t0 + k * self.poll_ms / 1000.0)
                self._stop.wait(max(0.0, wake - time.monotonic()))
        finally:
            self._flush()


class ManualClock:
    """A boot clock that only moves when told (deterministic simulations and tests)."""

    def __init__(self, start_ns: int) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns


def simulate_readings(
    params: BatteryParams,
    faults: GaugeFaults,
    start_ns: int,
    poll_ms: int,
    duration_ms: int,
    activity: Callable[[int], float],
    plugged: Callable[[int], bool] = lambda t: False,
) -> list[GaugeReading]:
    """Poll a model on a virtual boot clock; `activity(t_ns)` / `plugged(t_ns)` script it."""
    clock = ManualClock(start_ns)
    model = BatteryModel(params, faults, clock_ns=clock)
    out: list[GaugeReading] = []
    step = poll_ms * 1_000_000
    for k in range(duration_ms // poll_ms + 1):
        clock.now_ns = start_ns + k * step
        # State changes take effect at the poll instant (the model integrates up to it).
        model.set_plugged(plugged(clock.now_ns))
        model.set_activity(activity(clock.now_ns))
        out.append(model.read())
    return out


# -- the emulated phone's power subsystem ----------------------------------------------------
class EmulatedBattery:
    """Stands in for ScriptedPhone.battery (dumpsys battery, /sys/class/power_supply/battery)
    with values read from the model, so the phone's own tools see the same gauge as Perfetto.
    The phone's unplug()/replug() set `usb_powered`, which drives the model's charger."""

    def __init__(self, model: BatteryModel, temperature_dc: int = 310) -> None:
        self.model = model
        self.temperature_dc = temperature_dc

    @property
    def usb_powered(self) -> bool:
        return self.model.plugged

    @usb_powered.setter
    def usb_powered(self, value: bool) -> None:
        self.model.set_plugged(bool(value))

    @property
    def status(self) -> int:
        return 2 if self.model.plugged else 3  # BATTERY_STATUS_CHARGING / _DISCHARGING

    def dumpsys(self) -> str:
        g = self.model.read()
        volt_mv = 0 if g.voltage_uv is None else g.voltage_uv // 1000
        return (
            "Current Battery Service state:\n"
            f"  AC powered: false\n  USB powered: {str(self.usb_powered).lower()}\n"
            "  Wireless powered: false\n  Dock powered: false\n"
            "  Max charging current: 3000000\n  Max charging voltage: 5000000\n"
            f"  Charge counter: {g.charge_uah}\n  status: {self.status}\n"
            "  health: 2\n  present: true\n"
            f"  level: {int(g.capacity_percent)}\n  scale: 100\n  voltage: {volt_mv}\n"
            f"  temperature: {self.temperature_dc}\n  technology: Li-poly\n"
        )

    def sysfs(self) -> dict[str, str]:
        g = self.model.read()
        return {
            "capacity": str(int(g.capacity_percent)),
            "temp": str(self.temperature_dc),
            "voltage_now": "" if g.voltage_uv is None else str(g.voltage_uv),
            "current_now": str(g.current_ua),
            "charge_counter": str(g.charge_uah),
            "status": self.model.status(),
            "present": "1",
        }


class EmulatedPower:
    """Installs the battery model on an emulated phone through its command table:

    - ``perfetto`` — reads a binary TraceConfig (``-c FILE`` or ``-c -``), and for its
      ``android.power`` source polls the model every ``battery_poll_ms`` for at most
      ``duration_ms`` into the ``-o`` file, a real Perfetto trace; ``--background-wait``
      returns once polling runs and prints the pid, as the real tool does;
    - ``kill [-TERM|-0] PID`` — for a background perfetto's pid: ``-TERM`` (the default)
      ends its trace now and writes the file, as the real tool does on SIGTERM; ``-0``
      says whether it still runs;
      (``/system/bin/perfetto`` and ``/system/bin/traced`` exist, ``init.svc.traced`` is
      ``running`` and ``persist.traced.enable`` is ``1``, as on Android ≥ 11);
    - ``nohup`` — runs its command immune to the adb connection closing (USB unplug);
    - ``/proc/uptime`` on the boot clock the trace uses;
    - activity: the host programs the phone runs count with the threads they keep busy
      (ThreadLoad: the CPU time of their processes and threads, children included, per
      second); ``busy()`` lets other command handlers add busy workers of their own.
    """

    def __init__(self, phone, model: BatteryModel | None = None) -> None:  # type: ignore[no-untyped-def]
        self.phone = phone
        self.model = model or BatteryModel()
        self.recorders: list[BatteryRecorder] = []
        # Fault: False makes perfetto fail at run time as when traced dies (its properties
        # still say it runs); the emulator's `no-traced` fault turns the properties off too.
        self.traced_enabled = True
        self._pids = iter(range(31_000, 10**9))
        self._background: dict[int, BatteryRecorder] = {}  # pid -> a background capture

    def install(self) -> EmulatedPower:
        from device_agents.emulator.shell import CommandContext  # noqa: F401 (typing only)

        previous = getattr(self.phone, "as2d_power", None)
        if previous is not None:  # installing again replaces the old model, never stacks
            previous.stop_all()
            self.phone.launcher = previous._inner_launcher
        self.model.set_plugged(bool(getattr(self.phone.battery, "usb_powered", True)))
        self.phone.battery = EmulatedBattery(self.model)
        # Faults armed before the model (device_agents.emulator.faults) stay in force.
        if not getattr(self.phone, "as2d_no_perfetto", False):
            self.phone.register_command("perfetto", self._perfetto)
            self.phone.fs.add_dynamic("/system/bin/perfetto", lambda: "")
        self.phone.fs.add_dynamic("/system/bin/traced", lambda: "")
        self.phone.props.setdefault("init.svc.traced", "running")
        self.phone.props.setdefault("persist.traced.enable", "1")
        self.phone.register_command("nohup", self._nohup)
        self.phone.register_command("kill", self._kill)
        self.phone.fs.add_dynamic("/proc/uptime", self._uptime)
        self._inner_launcher = self.phone.launcher
        self.phone.as2d_power = self
        self.threads = ThreadLoad(self.phone, self.model)
        self.threads.start()
        return self

    class _Busy:
        def __init__(self, model: BatteryModel, workers: float) -> None:
            self.model, self.workers = model, workers

        def __enter__(self) -> None:
            self.model.add_activity(self.workers)

        def __exit__(self, *exc: object) -> None:
            self.model.add_activity(-self.workers)

    def busy(self, workers: float = 1.0) -> EmulatedPower._Busy:
        return EmulatedPower._Busy(self.model, workers)

    def stop_all(self) -> None:
        threads = getattr(self, "threads", None)
        if threads is not None:
            threads.stop()
        for r in self.recorders:
            r.stop()
        for r in self.recorders:
            r.join(5.0)

    def _kill(self, ctx) -> int:  # type: ignore[no-untyped-def]
        args = ctx.argv[1:]
        signal_name = "TERM"
        if args and args[0] == "-s" and len(args) > 1:
            signal_name, args = args[1], args[2:]
        elif args and args[0].startswith("-"):
            signal_name, args = args[0][1:], args[1:]
        if signal_name not in ("TERM", "15", "SIGTERM", "0"):
            ctx.err(f"kill (emulated): signal {signal_name} is not supported\n")
            return 1
        if not args:
            ctx.err("kill: needs a pid\n")
            return 1
        status = 0
        for a in args:
            rec = self._background.get(int(a)) if a.isdigit() else None
            if rec is None or not rec.running:
                ctx.err(f"kill: {a}: No such process\n")
                status = 1
            elif signal_name != "0":
                rec.stop()
                rec.join(5.0)  # the file written, as perfetto's own SIGTERM handling
        return status

    def _uptime(self) -> str:
        ns = self.model.clock_ns()
        return f"{ns // 1_000_000_000}.{ns // 10_000_000 % 100:02d} {ns / 2e9:.2f}\n"

    def _nohup(self, ctx) -> int:  # type: ignore[no-untyped-def]
        from device_agents.emulator.pipes import Pipe
        from device_agents.emulator.shell import Interpreter

        if len(ctx.argv) < 2:
            ctx.err("nohup: needs a command\n")
            return 127
        immune = threading.Event()  # SIGHUP from the closing adb connection is ignored
        sh = Interpreter(
            self.phone, Pipe(b"", closed=True), ctx.stdout, ctx.stderr, immune, ctx.cwd
        )
        sh.env = dict(ctx.env)
        try:
            return sh.dispatch(ctx.argv[1:], sh.stdin, ctx.stdout, ctx.stderr, ctx.affinity)
        except Exception as exc:  # noqa: BLE001 - the output stream may be gone; keep going
            try:
                ctx.err(f"nohup: {exc}\n")
            except Exception:  # noqa: BLE001
                pass
            return 1

    def _perfetto(self, ctx) -> int:  # type: ignore[no-untyped-def]
        args = ctx.argv[1:]
        cfg_src: str | None = None
        out: str | None = None
        background = False
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("-c", "--config") and i + 1 < len(args):
                cfg_src, i = args[i + 1], i + 2
            elif a in ("-o", "--out") and i + 1 < len(args):
                out, i = args[i + 1], i + 2
            elif a in ("--background-wait", "--background", "-d"):
                background, i = True, i + 1
            elif a == "--txt":
                ctx.err(
                    "perfetto (emulated): text configs are not supported here; pass the "
                    "binary TraceConfig\n"
                )
                return 1
            else:
                ctx.err(f"perfetto (emulated): unsupported argument {a}\n")
                return 1
        if cfg_src is None or out is None:
            ctx.err("perfetto: needs -c CONFIG and -o OUT\n")
            return 1
        if not self.traced_enabled or getattr(self.phone, "as2d_traced_off", False):
            ctx.err(
                "[perfetto] Could not connect to the traced socket /dev/socket/traced_consumer\n"
            )
            return 1
        try:
            raw = ctx.stdin.read() if cfg_src == "-" else self.phone.fs.read_file(ctx.path(cfg_src))
        except OSError as exc:
            ctx.err(f"perfetto: cannot read config: {exc}\n")
            return 1
        cfg = pb.TraceConfig()
        try:
            cfg.ParseFromString(raw)
        except Exception as exc:  # noqa: BLE001 - DecodeError
            ctx.err(f"perfetto: the config is not a binary TraceConfig ({exc})\n")
            return 1
        power = next(
            (
                ds.config.android_power_config
                for ds in cfg.data_sources
                if ds.config.name == "android.power"
            ),
            None,
        )
        if power is None or not cfg.duration_ms:
            ctx.err("perfetto (emulated): needs an android.power data source and duration_ms\n")
            return 1
        counters = [
            pb.AndroidPowerConfig.BatteryCounters.Name(v).removeprefix("BATTERY_COUNTER_")
            for v in power.battery_counters
        ]
        host_out = self.phone.fs.host_path(ctx.path(out))
        host_out.parent.mkdir(parents=True, exist_ok=True)
        rec = BatteryRecorder(
            self.model,
            cfg,
            host_out,
            int(power.battery_poll_ms or 1000),
            counters,
            int(cfg.duration_ms),
            int(cfg.file_write_period_ms or 5000),
        )
        self.recorders.append(rec)
        rec.start()
        if background:
            pid = next(self._pids)
            self._background[pid] = rec
            ctx.out(f"{pid}\n")
            return 0
        while rec.running and not ctx.cancel.is_set():
            rec.join(0.1)
        rec.stop()
        rec.join(5.0)
        return 0


# -- synthetic episodes: the battery model polled on a virtual clock -------------------------
@dataclass(frozen=True)
class SimRequest:
    """One request of a simulated episode: `workers` busy for `duration_s`, with idle
    `dips` inside it ((offset_s, length_s) from its origin: a request that briefly waits)."""

    method: str
    phase: str  # warmup | formal
    duration_s: float
    workers: float = 1.0
    dips: tuple[tuple[float, float], ...] = ()


@dataclass
class SimulatedEpisode:
    """The polls a simulated capture wrote, the requests' windows on the boot clock
    (method, phase, origin_ns, end_ns) and each window's true energy (J)."""

    readings: list[GaugeReading]
    windows: list[tuple[str, str, int, int]]
    truth_j: list[float]
    model: BatteryModel


def _poll_times(
    start: int, end: int, poll_ms: int, late_ms: float, rng: random.Random
) -> list[int]:
    """Polls every poll_ms from `start`, each up to late_ms late (a loaded phone), in order."""
    step = poll_ms * 1_000_000
    out: list[int] = []
    for k in range((end - start) // step + 1):
        late = int(rng.random() * late_ms * 1_000_000) if late_ms and k else 0
        out.append(max(out[-1] + 1 if out else start, start + k * step + late))
    return out


@dataclass(frozen=True)
class EpisodeTiming:
    """When a simulated episode's requests run and how Perfetto polls the gauge: every
    ``poll_ms`` (each poll up to ``late_ms`` late); the gauge's grid starts at ``start_ns``,
    the first request ``settle_s + phase_s`` later; between two requests the phone idles a
    random ``between_s`` (the episode script's stamps and checks); ``tail_s`` of idle after
    the last."""

    poll_ms: int = 250
    late_ms: float = 0.0
    phase_s: float = 0.0
    settle_s: float = 3.0
    between_s: tuple[float, float] = (0.01, 0.05)
    tail_s: float = 3.0
    start_ns: int = 100_000_000_000


def simulate_episode(
    params: BatteryParams,
    requests: list[SimRequest],
    timing: EpisodeTiming = EpisodeTiming(),
    *,
    seed: int = 0,
    plugged: Callable[[int], bool] = lambda t: False,
    faults: GaugeFaults | None = None,
) -> SimulatedEpisode:
    """Run the requests back to back on a battery model driven by a virtual boot clock and
    polled as Perfetto polls it (``timing``). `plugged(t)` scripts a charger. The truth is
    the model's own integral over each window (BatteryModel.true_energy_j)."""
    tm = timing
    start_ns, between_s = tm.start_ns, tm.between_s
    rng = random.Random(seed)
    s = 1_000_000_000
    t = start_ns + int((tm.settle_s + tm.phase_s) * s)
    events: list[tuple[int, float]] = [(start_ns, 0.0)]  # (from, busy workers)
    windows: list[tuple[str, str, int, int]] = []
    for k, r in enumerate(requests):
        origin, end = t, t + int(r.duration_s * s)
        events.append((origin, r.workers))
        for off, length in r.dips:
            events += [(origin + int(off * s), 0.0), (origin + int((off + length) * s), r.workers)]
        events.append((end, 0.0))
        windows.append((r.method, r.phase, origin, end))
        gap = rng.uniform(*between_s) if k + 1 < len(requests) else 0.0
        t = end + int(gap * s)
    stop = t + int(tm.tail_s * s)
    clock = ManualClock(start_ns)
    model = BatteryModel(replace(params, seed=seed), faults or GaugeFaults(), clock_ns=clock)
    model.set_plugged(plugged(start_ns))
    polls = _poll_times(start_ns, stop, tm.poll_ms, tm.late_ms, rng)
    todo = sorted([(a, 0, w) for a, w in events] + [(p, 1, 0.0) for p in polls])
    readings: list[GaugeReading] = []
    for at, kind, workers in todo:
        clock.now_ns = at
        model.set_plugged(plugged(at))
        if kind == 0:
            model.set_activity(workers)
        else:
            readings.append(model.read())
    truth = [model.true_energy_j(a, b) for _, _, a, b in windows]
    return SimulatedEpisode(readings, windows, truth, model)
