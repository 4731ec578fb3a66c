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
    argv = [
        f"./{spec['loader']}",
        "--library-path",
        f"./{spec['library_path']}",
        f"./{spec['python']}",
        *args,
    ]
    return Launch(d, env, argv)


# Run on the device before the first start: what onnxruntime's CPU detection reads.
# Plain commands only (no command substitution), so any Android shell runs it.
PREFLIGHT = (
    "echo @cpuinfo; grep '^processor' /proc/cpuinfo; "
    "echo @sysfs; ls /sys/devices/system/cpu; "
    "echo @arch; uname -m; echo @end"
)


@dataclass(frozen=True)
class Preflight:
    cpuinfo_processors: int
    sysfs_cpus: int
    machine: str


def parse_preflight(output: str, device: str) -> Preflight:
    """Parse PREFLIGHT's output; raise one DeviceError line for a phone the bundle cannot run on."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("@"):
            current = sections.setdefault(line[1:], [])
        elif line and current is not None:
            current.append(line)
    if "end" not in sections:
        raise DeviceError(
            f"{device}: unexpected answer to the bundle preflight check ({output.strip()[:80]!r}); reconnect the phone and retry"
        )
    pf = Preflight(
        sum(1 for line in sections.get("cpuinfo", []) if line.startswith("processor")),
        sum(
            1 for name in sections.get("sysfs", []) if name.startswith("cpu") and name[3:].isdigit()
        ),
        (sections.get("arch") or [""])[0],
    )
    if pf.machine and pf.machine not in ("aarch64", "arm64", "armv8l"):
        raise DeviceError(
            f"{device}: CPU architecture is {pf.machine}, the bundle is arm64; use an arm64 phone"
        )
    if pf.machine == "armv8l":
        raise DeviceError(
            f"{device}: runs a 32-bit kernel userland (armv8l); the arm64 bundle needs a 64-bit Android"
        )
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
