"""The emulated phone: a loopback adbd that the real adb server connects to, backed by a
scripted phone (getprop, a sysfs tree, dumpsys battery, a pluggable command table) that
can inject faults. See docs/devices.md ("The emulated phone")."""

from device_agents.emulator.adbd import EmulatedAdbd
from device_agents.emulator.phone import ScriptedPhone
from device_agents.emulator.profiles import PROFILES, PhoneProfile

__all__ = ["EmulatedAdbd", "ScriptedPhone", "PROFILES", "PhoneProfile"]
