"""Gating before each measured episode (paper D.2.3/D.2.4): rest, a cool phone, then every
core online and the configured core's frequency ceiling at or above a threshold at each of
two checks a set interval apart. Each check is a small operation with available/show/apply, in the style of
pyperf's system tuning; every observation is recorded with the result. Nothing here ever
changes the device (no onlining cores, no governor or thermal changes)."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from as2d_cli.errors import DeviceError
from device_agents.base import Device

Sleep = Callable[[float], None]

PHONE_CORE = 4
PHONE_MIN_CEILING_KHZ = 1881600  # 1.8816 GHz, the paper's CPU4 threshold
LOCAL_SETTLE_S = 20.0
QUIET_LOAD = 0.3  # a one-minute load average below this: the host was already idle
QUIET_BUSY = 0.10  # a second counts as quiet when the cores were busy at most this fraction of it
QUIET_STEAL = 0.05  # ... and the hypervisor took at most this fraction of it (VMs: CPU steal)
# The paper gives no temperature threshold; ours: a phone's battery sensor (the sensor the
# paper's Table 16 reports) at most 40 °C, waiting up to 10 minutes for it to cool down.
PHONE_MAX_TEMP_C = 40.0
COOL_WAIT_S = 600.0
COOL_POLL_S = 10.0
# The emulated phone's own /proc/stat is scripted (tests set it for the settle check) while its
# programs run on the host; it serves the `cpu` lines of the host's /proc/stat here
# (device_agents/emulator/phone.py). A real phone has no such file.
HOST_STAT = "/proc/as2d/host_stat"


@dataclass(frozen=True)
class Observation:
    check: str
    wall_time: float
    ok: bool | None  # None: informational or not applicable
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GateConfig:
    rest_s: float = 15.0
    interval_s: float = 5.0
    checks: int = 2
    core: int = PHONE_CORE
    min_ceiling_khz: int | None = PHONE_MIN_CEILING_KHZ  # None: no ceiling check
    settle_s: float = 0.0  # once, before the first measurement: seconds of quiet host (0: skip)
    max_temp_c: float | None = PHONE_MAX_TEMP_C  # None: no temperature gate
    temp_sensor: str = "battery"  # "battery", or a thermal zone type (substring), e.g. "skin"
    cool_wait_s: float = COOL_WAIT_S  # how long a hot device may take to cool down

    @classmethod
    def for_device(cls, device: Device) -> GateConfig:
        """Phone defaults are the paper's; the local host checks only that cores are online
        (many hosts, VMs in particular, expose no cpufreq) and, once before measuring, that
        it has been quiet for a while (see :func:`settle`)."""
        if device.kind == "local":
            return cls(
                rest_s=0.0,
                interval_s=0.0,
                checks=1,
                core=0,
                min_ceiling_khz=None,
                settle_s=LOCAL_SETTLE_S,
                max_temp_c=None,
            )
        return cls()


@dataclass(frozen=True)
class GateResult:
    passed: bool
    device: str
    config: GateConfig
    observations: tuple[Observation, ...]
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "device": self.device,
            "config": asdict(self.config),
            "failure": self.failure,
            "observations": [asdict(o) for o in self.observations],
        }


class GateFailed(DeviceError):
    """A gate check failed; ``result`` holds every observation."""

    def __init__(self, result: GateResult) -> None:
        super().__init__(result.failure or "gate failed")
        self.result = result


class Operation(abc.ABC):
    name: str

    @abc.abstractmethod
    def available(self, device: Device) -> bool:
        """Can this check be made on this device?"""

    @abc.abstractmethod
    def show(self, device: Device) -> Observation:
        """Observe once, without waiting."""

    def apply(self, device: Device, sleep: Sleep) -> list[Observation]:
        """Perform the check as the protocol prescribes (may wait)."""
        return [self.show(device)]


class Rest(Operation):
    name = "rest"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def available(self, device: Device) -> bool:
        return True

    def show(self, device: Device) -> Observation:
        return Observation(
            self.name,
            time.time(),
            None,
            f"rest {self.seconds:g} s before checking",
            {"seconds": self.seconds},
        )

    def apply(self, device: Device, sleep: Sleep) -> list[Observation]:
        start = time.monotonic()
        if self.seconds > 0:
            sleep(self.seconds)
        return [
            Observation(
                self.name,
                time.time(),
                None,
                f"rested {self.seconds:g} s",
                {"seconds": self.seconds, "measured_s": round(time.monotonic() - start, 3)},
            )
        ]


def temperature(state: Any, sensor: str) -> tuple[str | None, float | None]:
    """(sensor name, °C) from a CpuState: the battery sensor, or the first thermal zone
    whose type contains ``sensor``."""
    if sensor == "battery":
        return (
            ("battery", state.battery_temp_c) if state.battery_temp_c is not None else (None, None)
        )
    for zone, c in sorted(state.thermal_c.items()):
        if sensor in zone:
            return zone, c
    return None, None


class Cooled(Operation):
    """The device's temperature sensor at most ``max_c``: a hot device waits (polling) up to
    ``wait_s`` instead of being measured; the first and last readings are recorded."""

    name = "temperature"

    def __init__(
        self, max_c: float, sensor: str, wait_s: float, poll_s: float = COOL_POLL_S
    ) -> None:
        self.max_c, self.sensor, self.wait_s, self.poll_s = max_c, sensor, wait_s, poll_s

    def available(self, device: Device) -> bool:
        return temperature(device.cpu_state(), self.sensor)[1] is not None

    def show(self, device: Device) -> Observation:
        state = device.cpu_state()
        zone, c = temperature(state, self.sensor)
        if c is None:
            return Observation(
                self.name,
                state.wall_time,
                False,
                f"no {self.sensor} temperature sensor on {device.serial}; pick another with "
                f"--temp-sensor (a thermal zone type) or turn the temperature gate off with --max-temp 0",
                {"sensor": self.sensor},
            )
        ok = c <= self.max_c
        msg = (
            f"{zone} {c:.1f} °C <= {self.max_c:g} °C"
            if ok
            else f"{zone} {c:.1f} °C is above {self.max_c:g} °C on {device.serial}"
        )
        return Observation(
            self.name, state.wall_time, ok, msg, {"sensor": zone, "temp_c": c, "max_c": self.max_c}
        )

    def apply(self, device: Device, sleep: Sleep) -> list[Observation]:
        first = self.show(device)
        if first.ok is not False or "temp_c" not in first.detail:
            return [first]
        start = time.monotonic()
        obs = first
        while obs.ok is False and time.monotonic() - start < self.wait_s:
            sleep(min(self.poll_s, max(0.0, self.wait_s - (time.monotonic() - start))))
            obs = self.show(device)
        waited = round(time.monotonic() - start, 1)
        detail = {**obs.detail, "first_c": first.detail["temp_c"], "waited_s": waited}
        # The first reading is kept as a record (informational); the last one decides.
        first = Observation(
            first.check,
            first.wall_time,
            None,
            f"{first.message}: waiting to cool down",
            first.detail,
        )
        if obs.ok:
            return [
                first,
                Observation(
                    self.name,
                    obs.wall_time,
                    True,
                    f"cooled down in {waited:g} s: {obs.message}",
                    detail,
                ),
            ]
        return [
            first,
            Observation(
                self.name,
                obs.wall_time,
                False,
                f"{obs.message} after waiting {waited:g} s to cool down; let the phone cool "
                f"(off the charger, out of the sun) and retry, or raise --max-temp",
                detail,
            ),
        ]


@dataclass(frozen=True)
class CpuTimes:
    """All-CPU jiffies from /proc/stat: busy (everything but idle and iowait), steal (time a
    hypervisor gave another guest; part of busy), total."""

    busy: int
    steal: int
    total: int
    # Whose CPU time: "host" (this machine: the local host, or the host running an emulated
    # phone's programs) or "phone" (a phone's own /proc/stat).
    source: str = "host"

    @classmethod
    def parse(cls, stat: str) -> CpuTimes:
        f = [int(x) for x in stat.splitlines()[0].split()[1:]]
        f = f[:8] + [0] * (8 - len(f[:8]))  # user nice system idle iowait irq softirq steal
        total = sum(f)
        return cls(total - f[3] - f[4], f[7], total)

    @classmethod
    def read(cls, device: Device) -> CpuTimes | None:
        """The device's own /proc/stat (the settle check's; scripted on the emulated phone)."""
        text = device.read_files(["/proc/stat"]).get("/proc/stat")
        return cls._own(device, text)

    @classmethod
    def read_work(cls, device: Device) -> CpuTimes | None:
        """CPU times of the machine that runs the device's work, as a run records them: on
        the emulated phone the host's (HOST_STAT), not its scripted /proc/stat; elsewhere the
        device's own /proc/stat. ``source`` says which."""
        files = device.read_files(["/proc/stat", HOST_STAT])
        host = files.get(HOST_STAT)
        if host:
            return replace(cls.parse(host), source="host")
        return cls._own(device, files.get("/proc/stat"))

    @classmethod
    def _own(cls, device: Device, text: str | None) -> CpuTimes | None:
        if not text:
            return None
        return replace(cls.parse(text), source="host" if device.kind == "local" else "phone")

    def since(self, earlier: CpuTimes) -> dict[str, float]:
        """Busy and steal fractions of the time between two readings."""
        d = self.total - earlier.total
        if d <= 0:
            return {"busy": 0.0, "steal": 0.0}
        return {
            "busy": round((self.busy - earlier.busy) / d, 4),
            "steal": round((self.steal - earlier.steal) / d, 4),
        }


class CoresOnline(Operation):
    name = "cores_online"

    def available(self, device: Device) -> bool:
        return (
            device.read_files(["/sys/devices/system/cpu/online"]).get(
                "/sys/devices/system/cpu/online"
            )
            is not None
        )

    def show(self, device: Device) -> Observation:
        state = device.cpu_state()
        all_cpus = [c.cpu for c in state.cores]
        offline = [c for c in all_cpus if c not in state.online]
        ok = not offline
        msg = (
            f"all {len(all_cpus)} cores online"
            if ok
            else f"CPU{','.join(map(str, offline))} offline on {device.serial} ({len(state.online)}/{len(all_cpus)} online); "
            f"the phone's core control took it down (heat or power saving) -- let it idle and cool "
            f"down, then retry; as2d never onlines cores itself"
        )
        return Observation(
            self.name,
            state.wall_time,
            ok,
            msg,
            {"online": sorted(state.online), "offline": offline},
        )


class CeilingAtLeast(Operation):
    name = "ceiling"

    def __init__(self, core: int, min_khz: int, checks: int, interval_s: float) -> None:
        self.core, self.min_khz, self.checks, self.interval_s = core, min_khz, checks, interval_s

    def _path(self) -> str:
        return f"/sys/devices/system/cpu/cpu{self.core}/cpufreq/scaling_max_freq"

    def available(self, device: Device) -> bool:
        return device.read_files([self._path()]).get(self._path()) is not None

    def show(self, device: Device) -> Observation:
        state = device.cpu_state()
        core = state.core(self.core)
        ceiling = core.ceiling_khz if core else None
        if core is None or ceiling is None:
            return Observation(
                self.name,
                state.wall_time,
                False,
                f"cannot read CPU{self.core}'s frequency ceiling ({self._path()}) on {device.serial}; "
                f"pick a core that exists with --gate-core",
                {"core": self.core},
            )
        ok = core.online and ceiling >= self.min_khz
        if not core.online:
            msg = f"CPU{self.core} is offline on {device.serial}; let the phone idle and cool down, then retry"
        elif ok:
            msg = f"CPU{self.core} ceiling {ceiling / 1e6:.4f} GHz >= {self.min_khz / 1e6:.4f} GHz"
        else:
            msg = (
                f"CPU{self.core} frequency ceiling {ceiling / 1e6:.4f} GHz is below {self.min_khz / 1e6:.4f} GHz "
                f"on {device.serial} (thermal throttling); let the phone cool down and retry"
            )
        return Observation(
            self.name,
            state.wall_time,
            ok,
            msg,
            {
                "core": self.core,
                "ceiling_khz": ceiling,
                "min_khz": self.min_khz,
                "online": core.online,
            },
        )


def settle(
    device: Device,
    quiet_s: float,
    max_wait_s: float = 300.0,
    sleep: Sleep = time.sleep,
    waiting: Callable[[float, int], None] | None = None,
) -> Observation:
    """Wait, once before measuring, until the device has been quiet: a one-minute load
    average under QUIET_LOAD and a quiet first second, or ``quiet_s`` consecutive seconds with
    the cores busy at most QUIET_BUSY of the time and the hypervisor's steal at most
    QUIET_STEAL. A host goes on running slower for tens of seconds after heavy work ends
    (2-core VM: target steps 1.30 ms right after a training run was stopped, 0.78 ms 40 s
    later), and a VM whose neighbours take its CPU shows it only as steal, not as load, so
    a calibration started at once prices the slow state. Never fails: after ``max_wait_s``
    it says the host is still busy and measuring goes on (the observation records it).
    ``waiting(seconds waited, consecutive quiet seconds)`` is told every second."""
    load_text = device.read_files(["/proc/loadavg"]).get("/proc/loadavg")
    prev = CpuTimes.read(device)
    if quiet_s <= 0 or not load_text or prev is None:
        why = "" if quiet_s <= 0 else ": the device exposes no /proc/loadavg or /proc/stat"
        return Observation(
            "settle", time.time(), None, f"settle skipped{why}", {"quiet_s": quiet_s}
        )
    load1 = float(load_text.split()[0])
    start = time.monotonic()
    quiet = seconds = 0
    busiest = stolen = 0.0
    while time.monotonic() - start < max_wait_s:
        sleep(1.0)
        cur = CpuTimes.read(device)
        if cur is None:
            break
        frac = cur.since(prev)
        prev = cur
        busiest, stolen = max(busiest, frac["busy"]), max(stolen, frac["steal"])
        calm = frac["busy"] <= QUIET_BUSY and frac["steal"] <= QUIET_STEAL
        quiet = quiet + 1 if calm else 0
        seconds += 1
        if waiting is not None:
            waiting(time.monotonic() - start, quiet)
        detail = {
            "load1": load1,
            "waited_s": round(time.monotonic() - start, 1),
            "quiet_s": quiet_s,
            "steal": frac["steal"],
        }
        # The load average lags a load that has just started: it may end the wait only
        # after a quiet first second.
        if seconds == 1 and quiet == 1 and load1 < QUIET_LOAD:
            return Observation(
                "settle", time.time(), True, f"host idle (1-minute load {load1:.2f})", detail
            )
        if quiet >= quiet_s:
            return Observation(
                "settle",
                time.time(),
                True,
                f"waited {detail['waited_s']:.0f} s for a quiet host (1-minute load was {load1:.2f}, "
                f"most steal {stolen:.0%})",
                detail,
            )
    return _still_busy(load1, time.monotonic() - start, quiet_s, busiest, stolen)


def _still_busy(
    load1: float, waited: float, quiet_s: float, busiest: float, stolen: float
) -> Observation:
    """The settle's observation when the host never went quiet: measuring goes on."""
    why = (
        "its hypervisor steals CPU time"
        if stolen > QUIET_STEAL and busiest <= QUIET_BUSY + stolen
        else "busy"
    )
    return Observation(
        "settle",
        time.time(),
        None,
        f"host still {why} after {waited:.0f} s (1-minute load was {load1:.2f}, steal up to "
        f"{stolen:.0%}); measuring anyway — stop other work on this machine for steadier figures",
        {
            "load1": load1,
            "waited_s": round(waited, 1),
            "quiet_s": quiet_s,
            "busiest": round(busiest, 3),
            "steal": round(stolen, 3),
        },
    )


def _waits(config: GateConfig) -> list[Operation]:
    """Operations that may wait before the checks: rest, then cooling down."""
    ops: list[Operation] = [Rest(config.rest_s)]
    if config.max_temp_c is not None:
        ops.append(Cooled(config.max_temp_c, config.temp_sensor, config.cool_wait_s))
    return ops


def _checks(config: GateConfig) -> list[Operation]:
    """Conditions observed at every one of the ``checks`` checks."""
    ops: list[Operation] = [CoresOnline()]
    if config.min_ceiling_khz is not None:
        ops.append(
            CeilingAtLeast(config.core, config.min_ceiling_khz, config.checks, config.interval_s)
        )
    return ops


def operations(config: GateConfig) -> list[Operation]:
    return [*_waits(config), *_checks(config)]


def run_gate(
    device: Device, config: GateConfig | None = None, sleep: Sleep = time.sleep
) -> GateResult:
    """Rest, cool down, then observe every condition at each check; stop at the first
    failed observation. Never raises for a failed check (see :func:`require_gate`); device
    errors propagate."""
    config = config or GateConfig.for_device(device)
    observations: list[Observation] = []

    def failed(obs: list[Observation]) -> GateResult | None:
        observations.extend(obs)
        bad = next((o for o in obs if o.ok is False), None)
        if bad is None:
            return None
        return GateResult(
            False, device.serial, config, tuple(observations), f"gate failed: {bad.message}"
        )

    for op in _waits(config):
        if (res := failed(op.apply(device, sleep))) is not None:
            return res
    for i in range(config.checks):
        if i:
            sleep(config.interval_s)
        for op in _checks(config):
            o = op.show(device)
            if config.checks > 1:
                o = Observation(
                    o.check,
                    o.wall_time,
                    o.ok,
                    f"check {i + 1}/{config.checks}: {o.message}",
                    {**o.detail, "check": i + 1},
                )
            if (res := failed([o])) is not None:
                return res
    return GateResult(True, device.serial, config, tuple(observations))


def require_gate(
    device: Device, config: GateConfig | None = None, sleep: Sleep = time.sleep
) -> GateResult:
    result = run_gate(device, config, sleep)
    if not result.passed:
        raise GateFailed(result)
    return result


def show_gate(
    device: Device, config: GateConfig | None = None
) -> list[tuple[str, bool, Observation | None]]:
    """(operation, available, one observation) for each check, without waiting."""
    config = config or GateConfig.for_device(device)
    rows = []
    for op in operations(config):
        avail = op.available(device)
        rows.append((op.name, avail, op.show(device) if avail else None))
    return rows
