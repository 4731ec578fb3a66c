"""The scripted phone behind the emulated adbd: properties, a sysfs/procfs tree computed
from its CPU/thermal/battery state, a per-run files area under /data/local/tmp (a host temp
dir), the pluggable command table, and fault injection."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from device_agents.emulator.pipes import Pipe, StreamClosed
from device_agents.emulator.profiles import PROFILES, PhoneProfile, profile_named
from device_agents.emulator.shell import (
    CommandContext,
    Handler,
    Interpreter,
    Writer,
    run_host_program,
)
from device_agents.emulator.vfs import VirtualFS
from device_agents.gating import HOST_STAT

if TYPE_CHECKING:
    from device_agents.emulator.adbd import EmulatedAdbd

Launcher = Callable[[CommandContext, str], int]

# The emulated phone's /proc/stat is scripted (set_load), so the gate's settle check can be
# tested; its programs really run on the host, whose CPU time HOST_STAT gives: the `cpu`
# lines of the host's own /proc/stat, read on every read (empty where the host has none).
# A run's recorded CPU busy and steal come from there (CpuTimes.read_work); a real phone has
# no such file and its own /proc/stat is the truth.
_HOST_PROC_STAT = Path("/proc/stat")


def host_cpu_stat(path: Path = _HOST_PROC_STAT) -> str:
    """The ``cpu`` lines of this host's /proc/stat ("" where it has none)."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    return "".join(line + "\n" for line in text.splitlines() if line.startswith("cpu"))


@dataclass
class Battery:
    """Battery state as dumpsys and /sys/class/power_supply/battery report it. The energy
    model may replace ``ScriptedPhone.battery`` with any object offering dumpsys() and
    sysfs() (name -> text)."""

    level: int = 82
    temperature_dc: int = 310  # tenths of a degree Celsius, as Android reports it
    voltage_mv: int = 4123
    current_ua: int = -412000  # negative while discharging (Qualcomm convention)
    charge_counter_uah: int = 3949000
    usb_powered: bool = True

    @property
    def status(self) -> int:
        return 2 if self.usb_powered else 3  # BATTERY_STATUS_CHARGING / _DISCHARGING

    def dumpsys(self) -> str:
        return (
            "Current Battery Service state:\n"
            f"  AC powered: false\n  USB powered: {str(self.usb_powered).lower()}\n"
            "  Wireless powered: false\n  Dock powered: false\n"
            "  Max charging current: 500000\n  Max charging voltage: 5000000\n"
            f"  Charge counter: {self.charge_counter_uah}\n  status: {self.status}\n"
            "  health: 2\n  present: true\n"
            f"  level: {self.level}\n  scale: 100\n  voltage: {self.voltage_mv}\n"
            f"  temperature: {self.temperature_dc}\n  technology: Li-poly\n"
        )

    def sysfs(self) -> dict[str, str]:
        return {
            "capacity": str(self.level),
            "temp": str(self.temperature_dc),
            "voltage_now": str(self.voltage_mv * 1000),
            "current_now": str(self.current_ua),
            "charge_counter": str(self.charge_counter_uah),
            "status": "Charging" if self.usb_powered else "Discharging",
            "present": "1",
        }


THERMAL_ZONES = (
    "aoss-0",
    "cpu-0-0-0",
    "cpu-1-0-0",
    "cpu-1-4-0",
    "cpu-1-7-0",
    "gpuss-0",
    "skin-msm-therm",
)
CPU = "/sys/devices/system/cpu"


def _text(content: str) -> Callable[[], str]:
    """A dynamic file whose content never changes."""
    return lambda: content


def _ranges(cpus: list[int]) -> str:
    out: list[tuple[int, int]] = []
    for c in sorted(cpus):
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


class ScriptedPhone:
    def __init__(
        self,
        profile: str | PhoneProfile = "k70",
        root: Path | None = None,
        serial: str = "as2demu0001",
        connection: str = "usb",
    ) -> None:
        if isinstance(profile, str):
            found = profile_named(profile)
            if found is None:
                raise ValueError(f"unknown phone profile {profile!r}; known: {', '.join(PROFILES)}")
            profile = found
        self.profile = profile
        if connection not in ("usb", "wireless"):
            raise ValueError("connection must be 'usb' or 'wireless'")
        self.connection = connection
        self._owned_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="as2d-phone-")) if root is None else root
        self.fs = VirtualFS(self.root)
        self.serial = serial
        self.props = self.profile.props(serial)
        self.battery: Battery = Battery()
        self.commands: dict[str, Handler] = {}
        from device_agents.emulator.commands import BUILTINS

        self.commands.update(BUILTINS)
        self.launcher: Launcher = default_launcher
        self.online: set[int] = set(range(self.profile.n_cpus))
        self.ceiling_khz: dict[int, int] = {c.cpus[0]: c.max_khz for c in self.profile.clusters}
        self.thermal_mc: dict[str, int] = {z: 36000 + 1000 * i for i, z in enumerate(THERMAL_ZONES)}
        # What /proc/stat and /proc/loadavg report: busy and steal fractions of the CPU time
        # from now on, and the 1-minute load average (tests set them; see set_load).
        self.load = {"busy": 0.02, "steal": 0.0, "load1": 0.05}
        self._jiffies = [0, 0, 0]  # busy (incl. steal), steal, idle: accumulated at 100 Hz per CPU
        self._jiffies_at = time.monotonic()
        self._jiffies_lock = threading.Lock()
        self.history: list[str] = []  # every script received, for tests and debugging
        self.affinity_log: list[tuple[int, list[str]]] = []
        self.stalled: set[str] = set()
        self.vanish_on: set[str] = set()
        self.adb_server_port: int | None = None  # set to let unplug/replug tell the server
        self._adbd: EmulatedAdbd | None = None
        self._timers: list[threading.Timer] = []
        self._stopped = threading.Event()
        # Host processes running the phone's commands (process ids; their children are
        # found in /proc when the phone freezes), and what a freeze stopped.
        self.processes: set[int] = set()
        self._frozen = 0  # freezes in force
        self._frozen_pids: set[int] = set()
        self._proc_lock = threading.Lock()
        self._install_sysfs()

    # -- extension point ---------------------------------------------------------------
    def register_command(self, name: str, handler: Handler) -> None:
        """Add or replace a command; ``handler(ctx) -> exit status``."""
        self.commands[name] = handler

    def attach_adbd(self, adbd: EmulatedAdbd) -> None:
        self._adbd = adbd

    def banner(self, features: str) -> bytes:
        p = self.props
        return (
            f"device::ro.product.name={p['ro.product.name']};ro.product.model={p['ro.product.model']};"
            f"ro.product.device={p['ro.product.device']};features={features}"
        ).encode()

    # -- sysfs / procfs ----------------------------------------------------------------
    def _policy(self, cpu: int) -> int:
        for c in self.profile.clusters:
            if cpu in c.cpus:
                return c.cpus[0]
        raise KeyError(cpu)

    def _cluster(self, cpu: int):  # type: ignore[no-untyped-def]
        return next(c for c in self.profile.clusters if cpu in c.cpus)

    def online_mask(self) -> int:
        return sum(1 << c for c in self.online)

    def _install_sysfs(self) -> None:
        fs, n = self.fs, self.profile.n_cpus
        fs.add_dynamic(f"{CPU}/possible", lambda: f"0-{n - 1}\n")
        fs.add_dynamic(f"{CPU}/present", lambda: f"0-{n - 1}\n")
        fs.add_dynamic(f"{CPU}/online", lambda: _ranges(sorted(self.online)) + "\n")
        fs.add_dynamic(
            f"{CPU}/offline", lambda: _ranges(sorted(set(range(n)) - self.online)) + "\n"
        )
        for cpu in range(n):
            cl = self._cluster(cpu)
            base = f"{CPU}/cpu{cpu}"
            fs.add_dynamic(f"{base}/online", partial(self._online_file, cpu))
            fq = f"{base}/cpufreq"
            fs.add_dynamic(f"{fq}/cpuinfo_max_freq", _text(f"{cl.max_khz}\n"))
            fs.add_dynamic(f"{fq}/cpuinfo_min_freq", _text(f"{cl.min_khz}\n"))
            fs.add_dynamic(f"{fq}/scaling_min_freq", _text(f"{cl.min_khz}\n"))
            fs.add_dynamic(f"{fq}/scaling_max_freq", partial(self._ceiling_file, cpu))
            fs.add_dynamic(f"{fq}/scaling_cur_freq", partial(self._current_file, cpu))
            fs.add_dynamic(f"{fq}/related_cpus", _text(" ".join(map(str, cl.cpus)) + "\n"))
            fs.add_dynamic(f"{fq}/scaling_governor", lambda: "walt\n")
        for i, zone in enumerate(THERMAL_ZONES):
            fs.add_dynamic(f"/sys/class/thermal/thermal_zone{i}/type", _text(zone + "\n"))
            fs.add_dynamic(
                f"/sys/class/thermal/thermal_zone{i}/temp", partial(self._thermal_file, zone)
            )
        fs.add_dynamic("/sys/class/kgsl/kgsl-3d0/gpu_model", lambda: self.profile.gpu_model + "\n")
        for key in Battery().sysfs():
            fs.add_dynamic(
                f"/sys/class/power_supply/battery/{key}",
                partial(self._battery_file, key),
            )
        fs.add_dynamic(
            "/sys/class/power_supply/usb/online",
            lambda: "1\n" if self.battery.usb_powered else "0\n",
        )
        fs.add_dynamic(
            "/proc/meminfo",
            lambda: (
                f"MemTotal:       {self.profile.mem_total_kb} kB\n"
                f"MemFree:         {self.profile.mem_total_kb // 5} kB\n"
                f"MemAvailable:    {self.profile.mem_total_kb // 2} kB\n"
            ),
        )
        fs.add_dynamic("/proc/stat", self._proc_stat)
        fs.add_dynamic(HOST_STAT, host_cpu_stat)
        fs.add_dynamic("/proc/loadavg", lambda: f"{self.load['load1']:.2f} 0.05 0.01 1/512 4242\n")
        fs.add_dynamic(
            "/proc/version", lambda: "Linux version 6.1.75-android14-11 (emulated by as2d)\n"
        )

    def set_load(
        self, busy: float | None = None, steal: float | None = None, load1: float | None = None
    ) -> None:
        """From now on the CPUs are ``busy`` (of which ``steal`` is taken by a hypervisor)."""
        self._proc_stat()  # account the time so far at the old load
        for key, v in (("busy", busy), ("steal", steal), ("load1", load1)):
            if v is not None:
                self.load[key] = v

    def _proc_stat(self) -> str:
        with self._jiffies_lock:
            now = time.monotonic()
            ticks = (now - self._jiffies_at) * 100 * len(self.online)
            self._jiffies_at = now
            busy = max(self.load["busy"], self.load["steal"])
            self._jiffies[0] += round(ticks * busy)
            self._jiffies[1] += round(ticks * self.load["steal"])
            self._jiffies[2] += round(ticks * (1 - busy))
            b, st, idle = self._jiffies
        user = b - st
        return f"cpu  {user} 0 0 {idle} 0 0 0 {st} 0 0\n"

    def _online_file(self, cpu: int) -> str:
        return "1\n" if cpu in self.online else "0\n"

    def _ceiling_file(self, cpu: int) -> str:
        return f"{self.ceiling_khz[self._policy(cpu)]}\n"

    def _current_file(self, cpu: int) -> str:
        return f"{self.current_khz(cpu)}\n"

    def _thermal_file(self, zone: str) -> str:
        return f"{self.thermal_mc[zone]}\n"

    def _battery_file(self, key: str) -> str:
        return self.battery.sysfs()[key] + "\n"

    def current_khz(self, cpu: int) -> int:
        """A plausible running clock: 70 % of the cluster maximum, never above the ceiling."""
        cl = self._cluster(cpu)
        return min(self.ceiling_khz[self._policy(cpu)], int(cl.max_khz * 0.7) // 100 * 100)

    # -- running commands ----------------------------------------------------------------
    def run_script(
        self, script: str, stdin: Pipe, stdout: Writer, stderr: Writer, cancel: threading.Event
    ) -> int:
        self.history.append(script)
        return Interpreter(self, stdin, stdout, stderr, cancel).run(script)

    def execute(self, ctx: CommandContext) -> int:
        """Run one simple command (after faults are applied)."""
        name = ctx.argv[0]
        base = name.rsplit("/", 1)[-1]
        if name in self.stalled or base in self.stalled:
            while not ctx.cancel.wait(0.05):  # a stalled command: only the host can end it
                if self._stopped.is_set():
                    break
            return 137
        if name in self.vanish_on or base in self.vanish_on:
            return self._run_then_vanish(ctx)
        return self._lookup_and_run(ctx)

    def _lookup_and_run(self, ctx: CommandContext) -> int:
        name = ctx.argv[0]
        handler = self.commands.get(name)
        if handler is None and "/" in name:
            handler = (
                self.commands.get(name.rsplit("/", 1)[-1])
                if name.startswith("/system/bin/")
                else None
            )
            if handler is None:
                st = self.fs.stat(ctx.path(name))
                if st is not None and stat.S_ISREG(st[0]) and st[0] & 0o111:
                    return self.launcher(ctx, str(self.fs.host_path(ctx.path(name))))
                if st is not None:
                    ctx.err(f"/system/bin/sh: {name}: can't execute: Permission denied\n")
                    return 126
                ctx.err(f"/system/bin/sh: {name}: inaccessible or not found\n")
                return 127
        if handler is None:
            ctx.err(f"/system/bin/sh: {name}: inaccessible or not found\n")
            return 127
        return handler(ctx)

    def _run_then_vanish(self, ctx: CommandContext) -> int:
        fired = threading.Event()
        real_out = ctx.stdout

        def out(data: bytes) -> None:
            real_out(data)
            if not fired.is_set():
                fired.set()
                self.vanish()
                raise StreamClosed()

        ctx.stdout = out
        try:
            self._lookup_and_run(ctx)
        finally:
            if not fired.is_set():
                self.vanish()
        raise StreamClosed()

    # -- faults ----------------------------------------------------------------------------
    def set_core_online(self, cpu: int, online: bool) -> None:
        if online:
            self.online.add(cpu)
        else:
            self.online.discard(cpu)

    def set_ceiling(self, cpu: int, khz: int) -> None:
        """Frequency ceiling drop (or restore) for the policy (cluster) holding ``cpu``."""
        self.ceiling_khz[self._policy(cpu)] = khz

    def process_started(self, pid: int) -> None:
        """A host process now runs one of the phone's commands; during a freeze it is
        stopped at once, as the rest of the phone's work."""
        with self._proc_lock:
            self.processes.add(pid)
            if self._frozen:
                self._stop_trees()

    def process_ended(self, pid: int) -> None:
        with self._proc_lock:
            self.processes.discard(pid)

    def freeze(self, seconds: float) -> None:
        """The phone's work stalls: every process it runs for its commands, children
        included, is stopped (SIGSTOP) now and continued (SIGCONT) after ``seconds``;
        processes started meanwhile are stopped too."""
        with self._proc_lock:
            self._frozen += 1
            self._stop_trees()
        self.schedule(seconds, self._thaw)

    def _thaw(self) -> None:
        with self._proc_lock:
            self._frozen = max(0, self._frozen - 1)
            if self._frozen:
                return
            for pid in self._frozen_pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:  # it ended (killed by the host) meanwhile
                    pass
            self._frozen_pids.clear()

    def _stop_trees(self) -> None:
        """SIGSTOP the phone's processes and their descendants until no new one appears
        (a stopped process cannot fork). Called with the lock held."""
        while new := _process_trees(self.processes) - self._frozen_pids:
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
            self._frozen_pids |= new

    def stall_command(self, name: str) -> None:
        self.stalled.add(name)

    def vanish_on_command(self, name: str) -> None:
        """The device disappears while ``name`` runs (after its first output)."""
        self.vanish_on.add(name)

    def vanish(self) -> None:
        """The device disappears: connections cut, new ones refused."""
        if self._adbd is not None:
            self._adbd.drop_connections(refuse=True)

    def unplug(self) -> None:
        """USB cable out. Over USB the device leaves the adb server; over wireless adb it
        stays connected and only the battery stops charging."""
        self.battery.usb_powered = False
        if self.connection == "usb" and self._adbd is not None:
            self._adbd.drop_connections(refuse=True)
            self._tell_server("disconnect")

    def replug(self) -> None:
        self.battery.usb_powered = True
        if self.connection == "usb" and self._adbd is not None:
            self._adbd.accept_again()
            self._tell_server("connect")

    def _tell_server(self, what: str) -> None:
        if self.adb_server_port is None or self._adbd is None:
            return
        import adbutils

        client = adbutils.AdbClient(host="127.0.0.1", port=self.adb_server_port)
        try:
            if what == "connect":
                client.connect(self._adbd.serial, timeout=5)
            else:
                client.disconnect(self._adbd.serial)
        except Exception:  # the server may already have dropped it; hotplug is best effort
            pass

    def schedule(self, after_s: float, action: Callable[[], None]) -> None:
        t = threading.Timer(after_s, action)
        t.daemon = True
        self._timers.append(t)
        t.start()

    def close(self) -> None:
        self._stopped.set()
        for t in self._timers:
            t.cancel()
        with self._proc_lock:  # never leave a process stopped behind
            self._frozen = 1
        self._thaw()
        if self._owned_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _process_trees(roots: set[int]) -> set[int]:
    """``roots`` and all their descendants (from /proc; only ``roots`` where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set(roots)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def default_launcher(ctx: CommandContext, host_path: str) -> int:
    """Run an executable pushed to the phone as a real host program. Arguments naming
    files under a writable area (/data/local/tmp, /sdcard) are mapped to host paths."""
    args = [
        str(ctx.phone.fs.host_path(a)) if a.startswith("/") and ctx.phone.fs.writable(a) else a
        for a in ctx.argv[1:]
    ]
    return run_host_program(ctx, [host_path, *args])
