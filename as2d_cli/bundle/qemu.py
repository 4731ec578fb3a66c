"""Running an arm64 bundle on this (x86-64) machine with Debian's qemu-user-static.

qemu-user shows the guest the host's /proc/cpuinfo; onnxruntime's CPU detection
(cpuinfo) then crashes on x86 text. So each start gets a private mount namespace
(``unshare -m``) with an arm64 cpuinfo bind-mounted over /proc/cpuinfo, which a real
phone has anyway. The loader is invoked explicitly as on a phone; binfmt_misc is never
registered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from as2d_cli.bundle.recipe import QEMU
from as2d_cli.errors import UserError

# A Cortex-A76-class core as an arm64 kernel reports it (one block per processor).
_CPU_BLOCK = (
    "processor\t: {n}\n"
    "BogoMIPS\t: 38.40\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
    "asimdrdm lrcpc dcpop asimddp\n"
    "CPU implementer\t: 0x41\n"
    "CPU architecture: 8\n"
    "CPU variant\t: 0x4\n"
    "CPU part\t: 0xd0b\n"
    "CPU revision\t: 0\n\n"
)


def arm64_cpuinfo(processors: int | None = None) -> str:
    """An arm64 /proc/cpuinfo with as many processors as this host's sysfs shows."""
    n = processors or os.cpu_count() or 1
    return "".join(_CPU_BLOCK.format(n=i) for i in range(n))


def qemu_binary(arch: str = "arm64") -> str | None:
    return shutil.which(QEMU[arch])


def require_qemu(arch: str = "arm64") -> str:
    path = qemu_binary(arch)
    if path is None:
        raise UserError(
            f"{QEMU[arch]} not found; install Debian's qemu-user-static "
            "(`apt-get install qemu-user-static`) to run the arm64 bundle on this machine"
        )
    if shutil.which("unshare") is None:
        raise UserError("unshare not found; install util-linux to run the arm64 bundle under qemu")
    return path


def wrap(argv: Sequence[str], cpuinfo: Path, arch: str = "arm64") -> list[str]:
    """``argv`` (loader first) run by qemu in a mount namespace with ``cpuinfo`` over /proc/cpuinfo."""
    qemu = require_qemu(arch)
    userns = (
        [] if os.geteuid() == 0 else ["-r"]
    )  # unprivileged: map ourselves to root in a user namespace
    mount = shutil.which("mount") or "/bin/mount"
    script = f'{mount} --bind "$1" /proc/cpuinfo || exit 125; shift; exec "$@"'
    # Absolute paths throughout: callers may hand the guest a phone's PATH.
    return [
        shutil.which("unshare") or "unshare",
        *userns,
        "-m",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        script,
        "sh",
        str(cpuinfo),
        qemu,
        *argv,
    ]


def run(
    bundle_dir: Path,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cpuinfo: Path,
    input: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run a bundle command (``./ld-linux-aarch64.so.1 …``) in ``bundle_dir`` under qemu.

    The guest sees only ``env`` (plus PATH), like a fresh ``adb shell``: no host
    LD_PRELOAD, PYTHON* or locale variables leak in.
    """
    clean = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}
    return subprocess.run(
        wrap(argv, cpuinfo),
        cwd=bundle_dir,
        env=clean,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
