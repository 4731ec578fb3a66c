"""Fault specs for the emulated phone (``as2d emulator start --fault SPEC``). Times are
seconds after the fault is armed (the phone's start, for `as2d emulator start --fault`).

  core-offline:CPU@T       CPU goes offline at T (core-online:CPU@T brings it back)
  ceiling:CPU=GHZ@T        the frequency ceiling of CPU's cluster drops to GHZ at T
  stall:COMMAND            COMMAND never finishes (until the caller gives up)
  freeze@T+D               from T every program the phone runs (the host processes behind
                           its commands, children included) is stopped (SIGSTOP) for D
                           seconds, then continued; programs started meanwhile wait too
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
    return UserError(
        f"bad --fault {spec!r}: {why}; forms: core-offline:CPU@T, core-online:CPU@T, "
        f"ceiling:CPU=GHZ@T, stall:COMMAND, freeze@T+D, vanish:COMMAND, vanish@T, "
        f"unplug@T[+D]"
    )


def _apply_base_fault(phone: ScriptedPhone, spec: str) -> str:
    """Arm one fault of the device forms; returns a human description."""
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
    if m := re.fullmatch(r"freeze@([\d.]+)\+([\d.]+)", spec):
        at, seconds = float(m[1]), float(m[2])
        if seconds <= 0:
            raise _bad(spec, "the freeze lasts D > 0 seconds")
        phone.schedule(at, lambda: phone.freeze(seconds))
        return f"the phone's programs freeze at {at:g} s for {seconds:g} s"
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


# -- energy faults: the battery's charger status, perfetto/traced, a phone that comes back --
ENERGY_FAULT_HELP = """
  battery-status:STATUS@T  from T the battery reports STATUS (Charging, Full, Not-charging,
                           Discharging) in power_supply and dumpsys, whatever the cable says
  no-perfetto              the phone has no perfetto binary
  no-traced                traced is stopped and disabled (persist.traced.enable 0)
  reattach@T               a vanished or unplugged phone is reachable again at T (the
                           charger is not touched)
"""
FAULT_HELP += ENERGY_FAULT_HELP
STATUS_FILE = "/sys/class/power_supply/battery/status"
DUMPSYS_STATUS_CODE = {"Charging": 2, "Discharging": 3, "Not charging": 4, "Full": 5}
_ENERGY_FORMS = "battery-status:STATUS@T, no-perfetto, no-traced, reattach@T"


def force_battery_status(phone: ScriptedPhone, status: str) -> None:
    """From now on the battery reports `status` (power_supply/status and `dumpsys battery`),
    as a phone on a weak charger reports Charging while its net current stays negative."""
    if status not in DUMPSYS_STATUS_CODE:
        raise UserError(f"battery status {status!r} is not one of {', '.join(DUMPSYS_STATUS_CODE)}")
    phone.as2d_battery_status = status  # type: ignore[attr-defined]
    phone.fs.add_dynamic(STATUS_FILE, lambda: phone.as2d_battery_status + "\n")  # type: ignore[attr-defined]
    if getattr(phone, "_as2d_dumpsys_wrapped", False):
        return
    inner = phone.commands.get("dumpsys")

    def dumpsys(ctx) -> int:  # type: ignore[no-untyped-def]
        if ctx.argv[1:2] != ["battery"] and inner is not None:
            return inner(ctx)
        code = DUMPSYS_STATUS_CODE[phone.as2d_battery_status]  # type: ignore[attr-defined]
        ctx.out(re.sub(r"(?m)^(\s*status: )\d+$", rf"\g<1>{code}", phone.battery.dumpsys()))
        return 0

    phone.register_command("dumpsys", dumpsys)
    phone._as2d_dumpsys_wrapped = True  # type: ignore[attr-defined]


def remove_perfetto(phone: ScriptedPhone) -> None:
    """The phone has no perfetto (also after the battery model is installed)."""
    phone.as2d_no_perfetto = True  # type: ignore[attr-defined]
    phone.commands.pop("perfetto", None)
    phone.fs.remove_dynamic("/system/bin/perfetto")


def disable_traced(phone: ScriptedPhone) -> None:
    """traced is stopped and disabled: perfetto cannot connect to it."""
    phone.as2d_traced_off = True  # type: ignore[attr-defined]
    phone.props["init.svc.traced"] = "stopped"
    phone.props["persist.traced.enable"] = "0"


def reattach(phone: ScriptedPhone) -> None:
    """A phone that vanished (or was unplugged) is reachable again; the charger stays as it is."""
    if phone._adbd is not None:
        phone._adbd.accept_again()
        phone._tell_server("connect")


def apply_fault(phone: ScriptedPhone, spec: str) -> str:
    """Arm one fault (the forms above and the energy faults); returns a human description."""
    if m := re.fullmatch(r"battery-status:([A-Za-z-]+)@([\d.]+)", spec):
        status = m[1].replace("-", " ").capitalize()
        if status not in DUMPSYS_STATUS_CODE:
            raise _bad(
                spec,
                f"STATUS must be one of Charging, Full, Not-charging, Discharging; "
                f"energy forms: {_ENERGY_FORMS}",
            )
        at = float(m[2])
        if at <= 0:
            force_battery_status(phone, status)
        else:
            phone.schedule(at, lambda: force_battery_status(phone, status))
        return f"the battery reports {status} from {at:g} s"
    if spec == "no-perfetto":
        remove_perfetto(phone)
        return "the phone has no perfetto"
    if spec == "no-traced":
        disable_traced(phone)
        return "traced is stopped and disabled"
    if m := re.fullmatch(r"reattach@([\d.]+)", spec):
        phone.schedule(float(m[1]), lambda: reattach(phone))
        return f"the phone is reachable again at {float(m[1]):g} s"
    try:
        return _apply_base_fault(phone, spec)
    except UserError as exc:
        raise UserError(f"{exc}, {_ENERGY_FORMS}") from None
