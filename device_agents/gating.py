"""Gating before each measured episode (paper D.2.3/D.2.4): rest, every core online, and
the configured core's frequency ceiling at or above a threshold at two checks a set
interval apart. Each check is a small operation with available/show/apply, in the style of
pyperf's system tuning; every observation is recorded with the result. Nothing here ever
changes the device (no onlining cores, no governor or thermal changes)."""

from __future__ import annotations

import abc
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from as2d_cli.errors import DeviceError
from device_agents.base import Device

Sleep = Callable[[float], None]

PHONE_CORE = 4
PHONE_MIN_CEILING_KHZ = 1881600  # 1.8816 GHz, the paper's CPU4 threshold
LOCAL_SETTLE_S = 20.0
QUIET_LOAD = 0.3  # a one-minute load average below this: the host was already idle
QUIET_BUSY = 0.10  # a second counts as quiet when the cores were busy at most this fraction of it


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

    @classmethod
    def for_device(cls, device: Device) -> "GateConfig":
        """Phone defaults are the paper's; the local host checks only that cores are online
        (many hosts, VMs in particular, expose no cpufreq) and, once before measuring, that
        it has been quiet for a while (see :func:`settle`)."""
        if device.kind == "local":
            return cls(rest_s=0.0, interval_s=0.0, checks=1, core=0, min_ceiling_khz=None, settle_s=LOCAL_SETTLE_S)
        return cls()


@dataclass(frozen=True)
class GateResult:
    passed: bool
    device: str
    config: GateConfig
    observations: tuple[Observation, ...]
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "device": self.device, "config": asdict(self.config),
                "failure": self.failure, "observations": [asdict(o) for o in self.observations]}


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
        return Observation(self.name, time.time(), None, f"rest {self.seconds:g} s before checking",
                           {"seconds": self.seconds})

    def apply(self, device: Device, sleep: Sleep) -> list[Observation]:
        start = time.monotonic()
        if self.seconds > 0:
            sleep(self.seconds)
        return [Observation(self.name, time.time(), None, f"rested {self.seconds:g} s",
                            {"seconds": self.seconds, "measured_s": round(time.monotonic() - start, 3)})]


class CoresOnline(Operation):
    name = "cores_online"

    def available(self, device: Device) -> bool:
        return device.read_files(["/sys/devices/system/cpu/online"]).get("/sys/devices/system/cpu/online") is not None

    def show(self, device: Device) -> Observation:
        state = device.cpu_state()
        all_cpus = [c.cpu for c in state.cores]
        offline = [c for c in all_cpus if c not in state.online]
        ok = not offline
        msg = (f"all {len(all_cpus)} cores online" if ok else
               f"CPU{','.join(map(str, offline))} offline on {device.serial} ({len(state.online)}/{len(all_cpus)} online); "
               f"the phone's core control took it down (heat or power saving) -- let it idle and cool "
               f"down, then retry; as2d never onlines cores itself")
        return Observation(self.name, state.wall_time, ok, msg,
                           {"online": sorted(state.online), "offline": offline})


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
            return Observation(self.name, state.wall_time, False,
                               f"cannot read CPU{self.core}'s frequency ceiling ({self._path()}) on {device.serial}; "
                               f"pick a core that exists with --gate-core", {"core": self.core})
        ok = core.online and ceiling >= self.min_khz
        if not core.online:
            msg = f"CPU{self.core} is offline on {device.serial}; let the phone idle and cool down, then retry"
        elif ok:
            msg = f"CPU{self.core} ceiling {ceiling / 1e6:.4f} GHz >= {self.min_khz / 1e6:.4f} GHz"
        else:
            msg = (f"CPU{self.core} frequency ceiling {ceiling / 1e6:.4f} GHz is below {self.min_khz / 1e6:.4f} GHz "
                   f"on {device.serial} (thermal throttling); let the phone cool down and retry")
        return Observation(self.name, state.wall_time, ok, msg,
                           {"core": self.core, "ceiling_khz": ceiling, "min_khz": self.min_khz,
                            "online": core.online})

    def apply(self, device: Device, sleep: Sleep) -> list[Observation]:
        out: list[Observation] = []
        for i in range(self.checks):
            if i:
                sleep(self.interval_s)
            obs = self.show(device)
            out.append(Observation(obs.check, obs.wall_time, obs.ok,
                                   f"check {i + 1}/{self.checks}: {obs.message}", {**obs.detail, "check": i + 1}))
            if not obs.ok:
                break
        return out


def _busy_idle(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat's first line."""
    fields = [int(x) for x in stat.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def settle(device: Device, quiet_s: float, max_wait_s: float = 300.0, sleep: Sleep = time.sleep) -> Observation:
    """Wait, once before measuring, until the device has been quiet: a one-minute load
    average under QUIET_LOAD and a quiet first second, or ``quiet_s`` consecutive seconds with the cores busy at most
    QUIET_BUSY of the time. A host goes on running slower for tens of seconds after heavy
    work ends (2-core VM: target steps 1.30 ms right after a training run was stopped, 0.78 ms
    40 s later), so a calibration started at once prices the slow state and every later run
    looks faster than its replay. Never fails: after ``max_wait_s`` it says the host is still
    busy and measuring goes on (the observation records it)."""
    files = device.read_files(["/proc/loadavg", "/proc/stat"])
    load_text, stat = files.get("/proc/loadavg"), files.get("/proc/stat")
    if quiet_s <= 0 or not load_text or not stat:
        return Observation("settle", time.time(), None, "settle skipped" if quiet_s <= 0 else
                           "settle skipped: the device exposes no /proc/loadavg or /proc/stat", {"quiet_s": quiet_s})
    load1 = float(load_text.split()[0])
    start = time.monotonic()
    prev = _busy_idle(stat)
    quiet = seconds = 0
    busiest = 0.0
    while time.monotonic() - start < max_wait_s:
        sleep(1.0)
        now_stat = device.read_files(["/proc/stat"]).get("/proc/stat")
        if not now_stat:
            break
        cur = _busy_idle(now_stat)
        d_busy, d_total = cur[0] - prev[0], cur[1] - prev[1]
        prev = cur
        frac = d_busy / d_total if d_total > 0 else 0.0
        busiest = max(busiest, frac)
        quiet = quiet + 1 if frac <= QUIET_BUSY else 0
        seconds += 1
        # The load average lags a load that has just started: it may end the wait only
        # after a quiet first second.
        if seconds == 1 and quiet == 1 and load1 < QUIET_LOAD:
            return Observation("settle", time.time(), True, f"host idle (1-minute load {load1:.2f})",
                               {"load1": load1, "waited_s": round(time.monotonic() - start, 1), "quiet_s": quiet_s})
        if quiet >= quiet_s:
            waited = time.monotonic() - start
            return Observation("settle", time.time(), True,
                               f"waited {waited:.0f} s for a quiet host (1-minute load was {load1:.2f})",
                               {"load1": load1, "waited_s": round(waited, 1), "quiet_s": quiet_s})
    waited = time.monotonic() - start
    return Observation("settle", time.time(), None,
                       f"host still busy after {waited:.0f} s (1-minute load was {load1:.2f}); measuring anyway — "
                       f"stop other work on this machine for steadier figures",
                       {"load1": load1, "waited_s": round(waited, 1), "quiet_s": quiet_s, "busiest": round(busiest, 3)})


def operations(config: GateConfig) -> list[Operation]:
    ops: list[Operation] = [Rest(config.rest_s), CoresOnline()]
    if config.min_ceiling_khz is not None:
        ops.append(CeilingAtLeast(config.core, config.min_ceiling_khz, config.checks, config.interval_s))
    return ops


def run_gate(device: Device, config: GateConfig | None = None, sleep: Sleep = time.sleep) -> GateResult:
    """Apply every operation in order; stop at the first failed check. Never raises for a
    failed check (see :func:`require_gate`); device errors propagate."""
    config = config or GateConfig.for_device(device)
    observations: list[Observation] = []
    for op in operations(config):
        obs = op.apply(device, sleep)
        observations.extend(obs)
        bad = next((o for o in obs if o.ok is False), None)
        if bad is not None:
            return GateResult(False, device.serial, config, tuple(observations), f"gate failed: {bad.message}")
    return GateResult(True, device.serial, config, tuple(observations))


def require_gate(device: Device, config: GateConfig | None = None, sleep: Sleep = time.sleep) -> GateResult:
    result = run_gate(device, config, sleep)
    if not result.passed:
        raise GateFailed(result)
    return result


def show_gate(device: Device, config: GateConfig | None = None) -> list[tuple[str, bool, Observation | None]]:
    """(operation, available, one observation) for each check, without waiting."""
    config = config or GateConfig.for_device(device)
    rows = []
    for op in operations(config):
        avail = op.available(device)
        rows.append((op.name, avail, op.show(device) if avail else None))
    return rows
