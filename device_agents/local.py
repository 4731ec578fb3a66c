"""This machine as a device: Linux sysfs/procfs for cores, frequencies and thermal zones,
os.sched_setaffinity for pinning. Facts it cannot read are recorded as unavailable."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from as2d_cli.errors import DeviceError, UserError
from device_agents.base import (
    CPU_DIR,
    Device,
    DeviceTimeout,
    Fact,
    Facts,
    ShellResult,
    quote_command,
)

if TYPE_CHECKING:
    from device_agents.process import LocalProcess


class LocalHost(Device):
    kind = "local"

    def __init__(self, root: str | None = None) -> None:
        self.serial = "local"
        self._root = root or tempfile.gettempdir()

    def run_root(self) -> str:
        return self._root

    def _execute(
        self, argv: list[str], deadline_s: float, cpus: set[int] | None, shown: str
    ) -> ShellResult:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        try:
            out, err = proc.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            partial = ShellResult(
                shown,
                None,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.monotonic() - start,
            )
            raise DeviceTimeout(
                f"local: {shown[:80]!r} did not finish within {deadline_s:g} s (deadline); "
                f"output so far is kept",
                partial,
            ) from None
        return ShellResult(
            shown,
            proc.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            time.monotonic() - start,
        )

    def shell(self, command: str | Sequence[str], deadline_s: float = 30.0) -> ShellResult:
        cmd = quote_command(command)
        return self._execute(["/bin/sh", "-c", cmd], deadline_s, None, cmd)

    def run(
        self, argv: Sequence[str], affinity: set[int] | None = None, deadline_s: float = 60.0
    ) -> ShellResult:
        if affinity:
            usable = os.sched_getaffinity(0)
            if not affinity <= usable:
                raise UserError(
                    f"affinity {sorted(affinity)} names CPUs this host cannot use; "
                    f"usable CPUs: {sorted(usable)}"
                )
        return self._execute(list(argv), deadline_s, affinity, quote_command(argv))

    def spawn(self, argv: Sequence[str], affinity: set[int] | None = None) -> LocalProcess:
        from device_agents.process import LocalProcess

        if affinity and not affinity <= os.sched_getaffinity(0):
            raise UserError(
                f"affinity {sorted(affinity)} names CPUs this host cannot use; "
                f"usable CPUs: {sorted(os.sched_getaffinity(0))}"
            )
        return LocalProcess(list(argv), affinity, quote_command(argv))

    def read_files(self, paths: Sequence[str], deadline_s: float = 10.0) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for p in paths:
            try:
                out[p] = Path(p).read_text()
            except OSError:
                out[p] = None
        return out

    def list_dir(self, path: str, deadline_s: float = 10.0) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def push(self, local: Path, remote: str, deadline_s: float = 120.0) -> None:
        target = Path(self._check_remote(remote))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)
        shutil.copymode(local, target)

    def pull(self, remote: str, local: Path, deadline_s: float = 120.0) -> None:
        try:
            shutil.copyfile(remote, local)
        except OSError as exc:
            raise DeviceError(f"local: cannot copy {remote}: {exc.strerror}") from None

    def facts(self) -> Facts:
        cpus = self.cpus()
        files = self.read_files(
            ["/proc/cpuinfo", "/proc/meminfo", "/etc/os-release"]
            + [f"{CPU_DIR}/cpu{c}/cpufreq/cpuinfo_max_freq" for c in cpus]
        )
        model = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in (files["/proc/cpuinfo"] or "").splitlines()
                if ln.lower().startswith(("model name", "hardware"))
            ),
            None,
        )
        per_core = {
            str(c): int(t) / 1e6
            for c in cpus
            if (t := files.get(f"{CPU_DIR}/cpu{c}/cpufreq/cpuinfo_max_freq"))
        }
        os_name = next(
            (
                ln.split("=", 1)[1].strip('"')
                for ln in (files["/etc/os-release"] or "").splitlines()
                if ln.startswith("PRETTY_NAME=")
            ),
            None,
        )
        no_freq = "unavailable: no cpufreq in sysfs (common in VMs and containers)"
        from device_agents.adb_phone import _mem_fact

        return Facts(
            {
                "model_id": Fact(platform.node() or None, "hostname"),
                "marketing_name": Fact(os_name, "/etc/os-release")
                if os_name
                else Fact(None, "unavailable: no /etc/os-release"),
                "soc": Fact(model, "/proc/cpuinfo")
                if model
                else Fact(None, "unavailable: /proc/cpuinfo names no model"),
                "cpu_cores": Fact(len(cpus), f"{CPU_DIR}/possible"),
                "cpu_max_ghz_by_core": Fact(per_core, "cpufreq/cpuinfo_max_freq")
                if per_core
                else Fact(None, no_freq),
                "cpu_peak_ghz": Fact(max(per_core.values()), "max cpufreq/cpuinfo_max_freq")
                if per_core
                else Fact(None, no_freq),
                "gpu": Fact(None, "unavailable: the local host runs models on the CPU"),
                "ram_gib": _mem_fact(files["/proc/meminfo"]),
                "android_version": Fact(None, "unavailable: not an Android device"),
                "api_level": Fact(None, "unavailable: not an Android device"),
                "build": Fact(platform.release(), "kernel release"),
                "security_patch": Fact(None, "unavailable: not an Android device"),
                "opencl": Fact(None, "unavailable: not used on the local host"),
            }
        )
