"""Perfetto battery capture on a device: check the phone can capture (preflight), push the
binary TraceConfig, start `perfetto` in the background, know when the bounded trace has
ended, pull it.

The config is built by as2d_cli.energy.capture_config with the `perfetto` package's protos
and fed to the device's perfetto on stdin (`cat CFG | perfetto -c - …`), which works on
every Android version whatever SELinux thinks of config file paths. Traces are written
under /data/misc/perfetto-traces, the one place traced may write to on Android.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import tempfile
import time
from pathlib import Path

from as2d_cli.energy.capture_config import CaptureSpec, serialize_trace_config
from as2d_cli.errors import DeviceError, UserError
from device_agents.base import Device

TRACE_DIR = "/data/misc/perfetto-traces"
CONFIG_NAME = "battery.trace_config.pb"
PERFETTO_BIN = "/system/bin/perfetto"
TRACED_BIN = "/system/bin/traced"
BATTERY_STATUS = "/sys/class/power_supply/battery/status"


def preflight(device: Device) -> dict[str, str]:
    """Before anything is pushed: the phone has `perfetto` and `traced`, traced runs (or init
    starts it: persist.traced.enable=1), and its battery status can be read (the episode
    waits on it and records it). One UserError line per problem; returns what was seen."""
    who = device.serial
    listed = set(device.shell(["ls", PERFETTO_BIN, TRACED_BIN], deadline_s=15).stdout.split())
    if PERFETTO_BIN not in listed:
        raise UserError(
            f"phone {who} has no perfetto ({PERFETTO_BIN} is missing): the battery "
            "counters are captured with Perfetto's command-line client, which "
            "Android 9 and later ship — update the phone or measure another one"
        )
    if TRACED_BIN not in listed:
        raise UserError(
            f"phone {who} has no traced ({TRACED_BIN} is missing): perfetto records "
            "through the traced service, which Android 9 and later ship — update "
            "the phone or measure another one"
        )
    state = device.shell(["getprop", "init.svc.traced"], deadline_s=15).stdout.strip()
    enabled = device.shell(["getprop", "persist.traced.enable"], deadline_s=15).stdout.strip()
    if state != "running" and enabled != "1":
        raise UserError(
            f"traced does not run on phone {who} (init.svc.traced={state or 'unset'}, "
            f"persist.traced.enable={enabled or 'unset'}); enable it with `adb shell "
            "setprop persist.traced.enable 1` and rerun"
        )
    status = device.shell(["cat", BATTERY_STATUS], deadline_s=15).stdout.strip()
    if not status:
        m = re.search(
            r"^\s*status:\s*(\d+)\s*$",
            device.shell(["dumpsys", "battery"], deadline_s=15).stdout,
            re.M,
        )
        status = f"dumpsys status {m.group(1)}" if m else ""
    if not status:
        raise UserError(
            f"phone {who}: neither {BATTERY_STATUS} nor `dumpsys battery` gives the "
            "battery status; the episode waits on it and refuses a charging capture "
            "by it — check `adb shell dumpsys battery`"
        )
    return {
        "traced": state or "unset",
        "persist.traced.enable": enabled or "unset",
        "battery_status": status,
    }


def trace_path_for(run_dir: str) -> str:
    """The device-side trace path of a run (named after its run directory)."""
    return f"{TRACE_DIR}/{posixpath.basename(run_dir.rstrip('/'))}.perfetto-trace"


def push_config(
    device: Device, run_dir: str, spec: CaptureSpec, keep_copy: Path | None = None
) -> str:
    """Serialize the TraceConfig, push it into the run directory; returns its device path."""
    data = serialize_trace_config(spec)
    remote = f"{run_dir.rstrip('/')}/{CONFIG_NAME}"
    if keep_copy is not None:
        keep_copy.write_bytes(data)
        device.push(keep_copy, remote)
        return remote
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / CONFIG_NAME
        local.write_bytes(data)
        device.push(local, remote)
    return remote


def start_command(config_remote: str, trace_remote: str) -> str:
    """The shell line that starts the capture detached (prints the perfetto pid)."""
    q = shlex.quote
    return f"cat {q(config_remote)} | perfetto --background-wait -c - -o {q(trace_remote)}"


def start_background(device: Device, config_remote: str, trace_remote: str) -> int:
    """Start the capture now (used over wireless adb or with USB in); returns perfetto's pid."""
    res = device.shell(start_command(config_remote, trace_remote), deadline_s=30)
    m = re.search(r"^\s*(\d+)\s*$", res.stdout, re.M)
    if res.exit_code != 0 or not m:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise DeviceError(
            f"perfetto did not start on {device.serial} (exit {res.exit_code}: "
            f"{detail[-1] if detail else 'no output'}); check `adb shell perfetto --version` "
            "and that traced runs (setprop persist.traced.enable 1)"
        )
    return int(m.group(1))


def device_boot_ns(device: Device) -> int:
    """The device's boot-time clock now (/proc/uptime, 10 ms resolution)."""
    from as2d_cli.energy.episode_script import parse_uptime_ns

    res = device.shell(["cat", "/proc/uptime"], deadline_s=10)
    res.check("reading /proc/uptime")
    return parse_uptime_ns(res.stdout, f"{device.serial}:/proc/uptime")


def wait_trace_end(
    device: Device, started_boot_ns: int, duration_ms: int, deadline_s: float, poll_s: float = 1.0
) -> None:
    """Block until the bounded trace has ended by itself (device boot clock), plus a flush
    margin. Raises DeviceError when that does not happen before `deadline_s`."""
    end_ns = started_boot_ns + duration_ms * 1_000_000 + 1_500_000_000
    limit = time.monotonic() + deadline_s
    while True:
        now = device_boot_ns(device)
        if now >= end_ns:
            return
        if time.monotonic() + min(poll_s, (end_ns - now) / 1e9) > limit:
            raise DeviceError(
                f"the trace on {device.serial} should end at boot time "
                f"{end_ns / 1e9:.1f} s but the phone says {now / 1e9:.1f} s; "
                "wait and rerun with --from-run to analyse what was pulled"
            )
        time.sleep(min(poll_s, max(0.05, (end_ns - now) / 1e9)))


def pull_trace(device: Device, trace_remote: str, local: Path) -> Path:
    device.pull(trace_remote, local)
    return local


def remove_trace(device: Device, trace_remote: str) -> None:
    """Delete the device copy once pulled (best effort: the device may have left)."""
    try:
        device.shell(["rm", "-f", trace_remote], deadline_s=15)
    except DeviceError:
        pass
