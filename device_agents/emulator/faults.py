"""Fault specs for the emulated phone (``as2d emulator start --fault SPEC``). Times are
seconds after the phone starts.

  core-offline:CPU@T       CPU goes offline at T (core-online:CPU@T brings it back)
  ceiling:CPU=GHZ@T        the frequency ceiling of CPU's cluster drops to GHZ at T
  stall:COMMAND            COMMAND never finishes (until the caller gives up)
  vanish:COMMAND           the phone disappears while COMMAND runs
  vanish@T                 the phone disappears at T
  unplug@T[+D]             USB cable out at T (back after D seconds, if given)
"""

from __future__ import annotations

import re

from as2d_cli.errors import UserError
from device_agents.emulator.phone import ScriptedPhone

FAULT_HELP = __doc__ or ""


def _bad(spec: str, why: str) -> UserError:
    return UserError(f"bad --fault {spec!r}: {why}; forms: core-offline:CPU@T, core-online:CPU@T, "
                     f"ceiling:CPU=GHZ@T, stall:COMMAND, vanish:COMMAND, vanish@T, unplug@T[+D]")


def apply_fault(phone: ScriptedPhone, spec: str) -> str:
    """Arm one fault; returns a human description."""
    n = phone.profile.n_cpus
    if m := re.fullmatch(r"core-(offline|online):(\d+)@([\d.]+)", spec):
        cpu, at = int(m[2]), float(m[3])
        if cpu >= n:
            raise _bad(spec, f"the phone has CPUs 0-{n - 1}")
        online = m[1] == "online"
        phone.schedule(at, lambda: phone.set_core_online(cpu, online))
        return f"CPU{cpu} goes {m[1]} at {at:g} s"
    if m := re.fullmatch(r"ceiling:(\d+)=([\d.]+)@([\d.]+)", spec):
        cpu, ghz, at = int(m[1]), float(m[2]), float(m[3])
        if cpu >= n:
            raise _bad(spec, f"the phone has CPUs 0-{n - 1}")
        phone.schedule(at, lambda: phone.set_ceiling(cpu, int(ghz * 1e6)))
        return f"CPU{cpu}'s cluster ceiling drops to {ghz:g} GHz at {at:g} s"
    if m := re.fullmatch(r"stall:(\S+)", spec):
        phone.stall_command(m[1])
        return f"command {m[1]!r} stalls"
    if m := re.fullmatch(r"vanish:(\S+)", spec):
        phone.vanish_on_command(m[1])
        return f"the phone vanishes while {m[1]!r} runs"
    if m := re.fullmatch(r"vanish@([\d.]+)", spec):
        phone.schedule(float(m[1]), phone.vanish)
        return f"the phone vanishes at {float(m[1]):g} s"
    if m := re.fullmatch(r"unplug@([\d.]+)(?:\+([\d.]+))?", spec):
        at = float(m[1])
        phone.schedule(at, phone.unplug)
        if m[2]:
            phone.schedule(at + float(m[2]), phone.replug)
            return f"USB unplugged at {at:g} s, replugged at {at + float(m[2]):g} s ({phone.connection})"
        return f"USB unplugged at {at:g} s ({phone.connection})"
    raise _bad(spec, "unknown form")
