"""An arm64 emulated phone that really runs the bundle: arm64 executables pushed to it
are run by qemu-aarch64-static (with an arm64 /proc/cpuinfo), so the whole real-phone
path -- push, unpack, preflight, start with the explicit loader -- runs here.

Uses the emulated phone's extension points (docs/devices.md): ``register_command`` for
the toybox commands the deploy step needs (env, tar, mv) where the phone lacks them, a
dynamic /proc/cpuinfo, and ``launcher`` for executables pushed to the phone.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shutil
import tarfile
from pathlib import Path

from as2d_cli.bundle import qemu
from as2d_cli.bundle.elf import EM_AARCH64, is_elf, read_elf
from device_agents.emulator.phone import ScriptedPhone, default_launcher
from device_agents.emulator.shell import CommandContext
from native.producer import emulated_cpus_env

CPUINFO_FILE = ".as2d-qemu-cpuinfo"


def enable_arm64_bundle(phone: ScriptedPhone) -> ScriptedPhone:
    """Make ``phone`` run arm64 programs through qemu; returns the same phone."""
    qemu.require_qemu("arm64")
    n = phone.profile.n_cpus
    phone.fs.add_dynamic("/proc/cpuinfo", lambda: qemu.arm64_cpuinfo(n))
    for name, handler in (("env", _env), ("tar", _tar), ("mv", _mv)):
        if name not in phone.commands:
            phone.register_command(name, handler)
    phone.launcher = _launcher
    return phone


def _map(ctx: CommandContext, value: str) -> str:
    """Phone paths in writable areas (also inside PATH-like lists) to their host paths."""
    fs = ctx.phone.fs
    parts = value.split(":")
    return ":".join(
        str(fs.host_path(p)) if p.startswith("/") and fs.writable(p) else p for p in parts
    )


def _launcher(ctx: CommandContext, host_path: str) -> int:
    path = Path(host_path)
    if not (is_elf(path) and read_elf(path).machine == EM_AARCH64):
        return default_launcher(ctx, host_path)
    cpuinfo = ctx.phone.fs.root / CPUINFO_FILE
    cpuinfo.write_text(
        qemu.arm64_cpuinfo()
    )  # the host's CPU count: the guest reads the host's sysfs
    args = [_map(ctx, a) for a in ctx.argv[1:]]
    env = {k: _map(ctx, v) for k, v in ctx.env.items()}
    env.update(emulated_cpus_env())  # the phone's virtual CPU numbers map onto this host's
    # `env -i`: the guest sees exactly the phone shell's environment, as on a phone.
    argv = [
        shutil.which("env") or "/usr/bin/env",
        "-i",
        *[f"{k}={v}" for k, v in sorted(env.items())],
        *qemu.wrap([host_path, *args], cpuinfo),
    ]
    return ctx.run_host(argv)


def _env(ctx: CommandContext) -> int:
    """toybox env: [-i] [-u NAME]... [NAME=VALUE]... [COMMAND ARGS...]."""
    args = ctx.argv[1:]
    env = dict(ctx.env)
    while args:
        a = args[0]
        if a == "-i":
            env, args = {}, args[1:]
        elif a == "-u" and len(args) > 1:
            env.pop(args[1], None)
            args = args[2:]
        elif "=" in a and not a.startswith("="):
            key, _, value = a.partition("=")
            env[key] = value
            args = args[1:]
        else:
            break
    if not args:
        ctx.out("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
        return 0
    return ctx.phone.execute(dataclasses.replace(ctx, argv=args, env=env))


def _tar(ctx: CommandContext) -> int:
    """toybox tar, extraction only: tar -x[z]f ARCHIVE [-C DIR]."""
    args = ctx.argv[1:]
    flags, archive, dest = "", None, ctx.cwd
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-C" and i + 1 < len(args):
            dest, i = ctx.path(args[i + 1]), i + 2
            continue
        if a.startswith("-") or i == 0:
            flags += a.lstrip("-")
            if "f" in a and i + 1 < len(args):
                archive, i = args[i + 1], i + 2
                continue
        i += 1
    if "x" not in flags or archive is None:
        ctx.err("tar: only -x[z]f ARCHIVE [-C DIR] is emulated\n")
        return 1
    fs = ctx.phone.fs
    src, out = ctx.path(archive), dest
    if not fs.writable(out):
        ctx.err(f"tar: {out}: Read-only file system\n")
        return 1
    try:
        with tarfile.open(fs.host_path(src), "r:gz" if "z" in flags else "r:") as tar:
            tar.extractall(fs.host_path(out), filter="data")
    except (OSError, tarfile.TarError) as exc:
        ctx.err(f"tar: {exc}\n")
        return 1
    return 0


def _mv(ctx: CommandContext) -> int:
    args = [a for a in ctx.argv[1:] if not a.startswith("-")]
    if len(args) != 2:
        ctx.err("mv: need SOURCE DEST\n")
        return 1
    fs = ctx.phone.fs
    src, dst = ctx.path(args[0]), ctx.path(args[1])
    if fs.is_dir(dst):
        dst = posixpath.join(dst, posixpath.basename(src))
    if not (fs.writable(src) and fs.writable(dst)):
        ctx.err(f"mv: {dst}: Read-only file system\n")
        return 1
    try:
        fs.host_path(src).rename(fs.host_path(dst))
    except OSError as exc:
        ctx.err(f"mv: {exc}\n")
        return 1
    return 0
