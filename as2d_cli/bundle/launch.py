"""How a bundle is started on a device, and the checks before it is.

Android has no /lib/ld-linux-aarch64.so.1, no /etc/passwd and no /tmp, so the bundle is
started with its own loader invoked explicitly, HOME and TMPDIR set to directories of
ours, PYTHONHOME/PYTHONPATH pointing into the bundle and LD_PRELOAD unset (an Android
preload is a bionic library glibc cannot load)::

    cd BUNDLE && env -u LD_PRELOAD HOME=… TMPDIR=… PYTHONHOME=… PYTHONPATH=… \\
        ./ld-linux-aarch64.so.1 --library-path ./lib ./python3.11 -m MODULE ARGS
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from as2d_cli.errors import DeviceError

# glibc's restartable-sequences registration can trip a vendor seccomp filter; this
# tunable turns it off (only needed where a plain start dies with SIGSYS).
RSEQ_OFF = "glibc.pthread.rseq=0"
SIGSYS_EXIT = 128 + 31  # a shell's exit status for a process killed by SIGSYS


@dataclass(frozen=True)
class Launch:
    """A bundle start on a device: working directory, environment and argv."""

    bundle_dir: str
    env: dict[str, str]
    argv: list[str]

    def shell(self) -> str:
        """One POSIX/mksh command line that starts it (every value quoted)."""
        assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items()))
        return f"cd {shlex.quote(self.bundle_dir)} && env -u LD_PRELOAD {assigns} {shlex.join(self.argv)}"


def launch(
    manifest: dict,
    bundle_dir: str,
    args: Sequence[str],
    *,
    home: str,
    tmpdir: str,
    rseq_off: bool = False,
) -> Launch:
    """The start of ``python3.11 ARGS`` (e.g. ``-m native.runner``) from a bundle at ``bundle_dir``."""
    spec = manifest["launch"]
    d = bundle_dir.rstrip("/")
    env = {
        "PYTHONHOME": f"{d}/{spec['pythonhome']}",
        "PYTHONPATH": ":".join(f"{d}/{p}" for p in spec["pythonpath"]),
        "HOME": home,
        "TMPDIR": tmpdir,
        "PYTHONNOUSERSITE": "1",
        "PYTHONUTF8": "1",
        "LC_ALL": "C",
    }
    if rseq_off:
        env["GLIBC_TUNABLES"] = RSEQ_OFF
    argv = [f"./{spec['loader']}", "--library-path", f"./{spec['library_path']}", f"./{spec['python']}", *args]
    return Launch(d, env, argv)


# Run on the device before the first start: what onnxruntime's CPU detection reads.
PREFLIGHT = (
    "n=$(grep -c '^processor' /proc/cpuinfo 2>/dev/null); echo cpuinfo=${n:-0}; "
    "n=$(ls /sys/devices/system/cpu 2>/dev/null | grep -c '^cpu[0-9]'); echo sysfs=${n:-0}; "
    "echo arch=$(uname -m)"
)


@dataclass(frozen=True)
class Preflight:
    cpuinfo_processors: int
    sysfs_cpus: int
    machine: str


def parse_preflight(output: str, device: str) -> Preflight:
    """Parse PREFLIGHT's output; raise one DeviceError line for a phone the bundle cannot run on."""
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition("=")
        values[key] = value.strip()
    try:
        pf = Preflight(int(values.get("cpuinfo") or 0), int(values.get("sysfs") or 0), values.get("arch", ""))
    except ValueError:
        raise DeviceError(f"{device}: unexpected answer to the bundle preflight check ({output.strip()[:80]!r}); reconnect the phone and retry") from None
    if pf.machine and pf.machine not in ("aarch64", "arm64", "armv8l"):
        raise DeviceError(f"{device}: CPU architecture is {pf.machine}, the bundle is arm64; use an arm64 phone")
    if pf.machine == "armv8l":
        raise DeviceError(f"{device}: runs a 32-bit kernel userland (armv8l); the arm64 bundle needs a 64-bit Android")
    if pf.cpuinfo_processors == 0:
        raise DeviceError(
            f"{device}: /proc/cpuinfo is hidden or lists no processors, which onnxruntime's CPU detection needs; "
            "this phone cannot run the bundled runner (try another phone or a vendor build without the restriction)"
        )
    if pf.sysfs_cpus == 0:
        raise DeviceError(
            f"{device}: /sys/devices/system/cpu is hidden, which onnxruntime's CPU detection and the gate need; "
            "this phone cannot run the bundled runner (try another phone or a vendor build without the restriction)"
        )
    return pf
