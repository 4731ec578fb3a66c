"""The one `Device` interface: shell with a total deadline, push/pull inside a per-run
directory, hardware facts (the paper's Table 6), CPU state, and running a program under a
CPU affinity mask. Implementations: :mod:`device_agents.local` (this host) and
:mod:`device_agents.adb_phone` (a phone over adb; the emulated phone is one of these)."""

from __future__ import annotations

import abc
import contextlib
import posixpath
import shlex
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import DeviceError, UserError

if TYPE_CHECKING:
    from device_agents.process import DeviceProcess

# -- errors ----------------------------------------------------------------------------


class DeviceTimeout(DeviceError):
    """A command did not finish within its total deadline; ``partial`` keeps its output."""

    def __init__(self, message: str, partial: ShellResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class DeviceDisconnected(DeviceError):
    """The device went away (cable, adb server, crash) mid-command; ``partial`` keeps what
    the command printed before."""

    def __init__(self, message: str, partial: ShellResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class DeviceUnavailable(DeviceError):
    """The device is attached but not usable: unauthorized, offline, or gone."""


# -- records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ShellResult:
    command: str
    exit_code: int | None  # None when the command never finished (timeout, disconnect)
    stdout: str
    stderr: str
    seconds: float

    def check(self, what: str) -> ShellResult:
        if self.exit_code != 0:
            detail = (self.stderr or self.stdout).strip().splitlines()
            raise DeviceError(
                f"{what} failed on the device (exit {self.exit_code}): "
                f"{detail[-1] if detail else 'no output'}"
            )
        return self


@dataclass(frozen=True)
class Fact:
    """One hardware fact: a value and where it came from, or None and why not."""

    value: Any
    source: str

    @property
    def available(self) -> bool:
        return self.value is not None


UNAVAILABLE = "unavailable"

FACT_NAMES = (
    "model_id",
    "marketing_name",
    "soc",
    "cpu_cores",
    "cpu_peak_ghz",
    "cpu_max_ghz_by_core",
    "gpu",
    "ram_gib",
    "android_version",
    "api_level",
    "build",
    "security_patch",
    "opencl",
)


@dataclass(frozen=True)
class Facts:
    """The paper's Table 6 fields. A fact that cannot be read is recorded as unavailable
    (value None, source says why), never guessed."""

    values: dict[str, Fact]

    def get(self, name: str) -> Any:
        f = self.values.get(name)
        return None if f is None else f.value

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {k: {"value": v.value, "source": v.source} for k, v in self.values.items()}

    def updated(self, **facts: Fact) -> Facts:
        """A copy with facts another component measured (e.g. the runner's OpenCL version)."""
        return Facts({**self.values, **facts})


@dataclass(frozen=True)
class CoreState:
    cpu: int
    online: bool
    cur_khz: int | None  # scaling_cur_freq
    ceiling_khz: int | None  # scaling_max_freq: the frequency ceiling the gate checks
    max_khz: int | None  # cpuinfo_max_freq: the hardware maximum


@dataclass(frozen=True)
class CpuState:
    wall_time: float
    cores: tuple[CoreState, ...]
    thermal_c: dict[str, float] = field(default_factory=dict)
    battery_temp_c: float | None = None

    @property
    def online(self) -> frozenset[int]:
        return frozenset(c.cpu for c in self.cores if c.online)

    def core(self, cpu: int) -> CoreState | None:
        return next((c for c in self.cores if c.cpu == cpu), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- sysfs parsing shared by Linux hosts and Android phones ------------------------------

CPU_DIR = "/sys/devices/system/cpu"
THERMAL_DIR = "/sys/class/thermal"
BATTERY_TEMP = "/sys/class/power_supply/battery/temp"


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,5,7-7' -> [0, 1, 2, 3, 5, 7]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        cpus.extend(range(int(a), int(b or a) + 1))
    return cpus


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def cpu_state_paths(n_cpus: list[int], zones: list[str]) -> list[str]:
    paths = [f"{CPU_DIR}/online", BATTERY_TEMP]
    for c in n_cpus:
        for name in ("scaling_cur_freq", "scaling_max_freq", "cpuinfo_max_freq"):
            paths.append(f"{CPU_DIR}/cpu{c}/cpufreq/{name}")
    for z in zones:
        paths += [f"{THERMAL_DIR}/{z}/type", f"{THERMAL_DIR}/{z}/temp"]
    return paths


def build_cpu_state(cpus: list[int], zones: list[str], files: dict[str, str | None]) -> CpuState:
    online_text = files.get(f"{CPU_DIR}/online")
    online = set(parse_cpu_list(online_text)) if online_text else set()
    cores = []
    for c in cpus:
        base = f"{CPU_DIR}/cpu{c}/cpufreq"
        cores.append(
            CoreState(
                c,
                c in online,
                _int(files.get(f"{base}/scaling_cur_freq")),
                _int(files.get(f"{base}/scaling_max_freq")),
                _int(files.get(f"{base}/cpuinfo_max_freq")),
            )
        )
    thermal: dict[str, float] = {}
    for z in zones:
        kind = (files.get(f"{THERMAL_DIR}/{z}/type") or z).strip()
        milli = _int(files.get(f"{THERMAL_DIR}/{z}/temp"))
        if milli is not None:
            thermal[kind] = milli / 1000.0
    bt = _int(files.get(BATTERY_TEMP))
    return CpuState(time.time(), tuple(cores), thermal, None if bt is None else bt / 10.0)


# -- the interface ---------------------------------------------------------------------

RUN_ROOT = "/data/local/tmp"


class Device(abc.ABC):
    """A place where models run and are measured."""

    kind: str  # "local" | "adb"
    serial: str

    @abc.abstractmethod
    def shell(self, command: str | Sequence[str], deadline_s: float = 30.0) -> ShellResult:
        """Run a shell command; it must finish within ``deadline_s`` seconds in total (not
        per read) or :class:`DeviceTimeout` is raised with the output so far. A sequence
        is quoted argument by argument (shlex.quote) -- the only safe way to pass names."""

    @abc.abstractmethod
    def read_files(self, paths: Sequence[str], deadline_s: float = 10.0) -> dict[str, str | None]:
        """Contents of several small text files in one round trip; None where unreadable."""

    @abc.abstractmethod
    def list_dir(self, path: str, deadline_s: float = 10.0) -> list[str]:
        """Names in a directory ([] when missing)."""

    @abc.abstractmethod
    def push(self, local: Path, remote: str, deadline_s: float = 120.0) -> None:
        """Copy a file to the device; ``remote`` must lie inside a run directory."""

    @abc.abstractmethod
    def pull(self, remote: str, local: Path, deadline_s: float = 120.0) -> None:
        """Copy a file from the device."""

    @abc.abstractmethod
    def facts(self) -> Facts:
        """Table 6 hardware facts."""

    @abc.abstractmethod
    def run(
        self, argv: Sequence[str], affinity: set[int] | None = None, deadline_s: float = 60.0
    ) -> ShellResult:
        """Run a program, pinned to the CPUs in ``affinity`` when given."""

    @abc.abstractmethod
    def spawn(self, argv: Sequence[str], affinity: set[int] | None = None) -> DeviceProcess:
        """Start a long-running program with streamed stdin/stdout (line protocol)."""

    @abc.abstractmethod
    def run_root(self) -> str:
        """Where per-run directories are created."""

    # -- shared behaviour ---------------------------------------------------------------
    def cpus(self) -> list[int]:
        text = self.read_files([f"{CPU_DIR}/possible"]).get(f"{CPU_DIR}/possible")
        if not text:
            raise DeviceError(
                f"{self.serial}: cannot read {CPU_DIR}/possible; is this a Linux/Android device?"
            )
        return parse_cpu_list(text)

    def thermal_zones(self) -> list[str]:
        return sorted(
            (z for z in self.list_dir(THERMAL_DIR) if z.startswith("thermal_zone")),
            key=lambda z: int(z[len("thermal_zone") :] or 0),
        )

    def cpu_state(self) -> CpuState:
        """Cores online, current/ceiling/max frequency per core, thermal zones, battery
        temperature -- in one round trip after the first call."""
        if not hasattr(self, "_layout"):
            self._layout = (self.cpus(), self.thermal_zones())
        cpus, zones = self._layout
        return build_cpu_state(cpus, zones, self.read_files(cpu_state_paths(cpus, zones)))

    @contextlib.contextmanager
    def run_dir(self, label: str = "run") -> Iterator[str]:
        """A fresh per-run directory on the device, removed afterwards (also on errors)."""
        safe = "".join(ch for ch in label if ch.isalnum() or ch in "-_")[:32] or "run"
        path = posixpath.join(self.run_root(), f"as2d-{safe}-{uuid.uuid4().hex[:8]}")
        self.shell(["mkdir", "-p", path]).check(f"creating {path}")
        try:
            yield path
        finally:
            try:
                self.shell(["rm", "-rf", path], deadline_s=30)
            except DeviceError:
                pass  # the device left; nothing more we can remove

    def _check_remote(self, remote: str) -> str:
        norm = posixpath.normpath(remote)
        prefix = posixpath.join(self.run_root(), "as2d-")
        if not norm.startswith(prefix) or "/" not in norm[len(prefix) :]:
            raise UserError(
                f"refusing to push to {remote!r}: files go only inside a per-run directory "
                f"{prefix}<run>/ (use Device.run_dir())"
            )
        return norm


def quote_command(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(list(command))


def mask_hex(cpus: set[int]) -> str:
    return format(sum(1 << c for c in cpus), "x")
