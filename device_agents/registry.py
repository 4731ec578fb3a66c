"""`--phone` resolution and discovery: ``local``, a known phone name (resolved through its
model ID among attached phones), or any adb serial."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from as2d_cli.errors import DeviceError, UserError
from device_agents import phones
from device_agents.adb_phone import (
    STATE_ADVICE,
    AdbPhone,
    _server_up,
    _state_error,
    adb_port,
    list_attached,
)
from device_agents.base import Device, Facts
from device_agents.local import LocalHost


def known_names() -> str:
    return phones.known_names()


def _looks_like_serial(name: str) -> bool:
    """adb serials: USB serials (letters and digits) or host:port for network devices."""
    return ":" in name or any(c.isdigit() for c in name)


def resolve_phone(name: str, port: int | None = None) -> Device:
    """The device for a ``--phone`` value, or one clear error line."""
    if name == "local":
        return LocalHost()
    port = port or adb_port()
    key = phones.canonical(name)
    hint = phones.did_you_mean(name) if key is None else ""
    if not _server_up(port):
        if hint:  # k7O, k-70: a typo of a known name, not a serial to look for
            raise UserError(
                f"unknown --phone {name!r}{hint}; known: {known_names()} (an adb serial needs "
                f"a running adb server: none on port {port})"
            )
        if key is None and not _looks_like_serial(name):
            raise UserError(
                f"unknown --phone {name!r}: use one of {known_names()} or the serial of an "
                f"attached phone (see `as2d devices`)"
            )
        raise UserError(
            f"--phone {name}: no adb server runs on port {port}; start it with `adb start-server` "
            f"(or set ANDROID_ADB_SERVER_PORT), attach the phone, and check `as2d devices`"
        )
    attached = list_attached(port)
    if key is not None:
        known = phones.KNOWN_PHONES[key]
        matches, seen = [], []
        for a in attached:
            if a.state != "device":
                seen.append(f"{a.serial} ({a.state})")
                continue
            model = (
                AdbPhone(a.serial, port).shell(["getprop", "ro.product.model"], 10).stdout.strip()
            )
            seen.append(f"{a.serial} ({model or 'unknown model'})")
            if model == known.model_id:
                matches.append(a.serial)
        if len(matches) == 1:
            return AdbPhone(matches[0], port)
        if len(matches) > 1:
            raise UserError(
                f"--phone {name}: several attached phones are a {known.marketing_name} "
                f"({', '.join(matches)}); pass one serial with --phone SERIAL"
            )
        raise UserError(
            f"--phone {name}: no attached phone is a {known.marketing_name} (model {known.model_id}); "
            f"attached: {', '.join(seen) or 'none'} -- see `as2d devices`"
        )
    for a in attached:
        if a.serial == name:
            if a.state != "device":
                raise _state_error(a.serial, a.state)
            return AdbPhone(a.serial, port)
    if not hint:  # a hardware serial: the phone under whatever adb serial it has now
        from device_agents.identity import find_attached

        found = find_attached(name, port)
        if found is not None:
            return found
    serials = ", ".join(a.serial for a in attached) or "none"
    raise UserError(
        f"unknown --phone {name!r}{hint}: use one of {known_names()} or the serial of an "
        f"attached phone (attached: {serials})"
    )


@dataclass
class DeviceListing:
    serial: str
    kind: str
    state: str
    known_as: str | None = None
    facts: Facts | None = None
    advice: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "serial": self.serial,
            "kind": self.kind,
            "state": self.state,
            "known_as": self.known_as,
            "advice": self.advice,
            "error": self.error,
            "facts": self.facts.to_dict() if self.facts else None,
        }


def discover(port: int | None = None, include_local: bool = True) -> list[DeviceListing]:
    """The local host and every phone the adb server knows, with state and facts."""
    out: list[DeviceListing] = []
    if include_local:
        out.append(DeviceListing("local", "local", "device", None, LocalHost().facts()))
    for a in list_attached(port):
        item = DeviceListing(a.serial, "adb", a.state)
        if a.state != "device":
            item.advice = STATE_ADVICE.get(a.state, "check the cable and `adb devices`")
        else:
            try:
                item.facts = AdbPhone(a.serial, port).facts()
                known = phones.by_model(item.facts.get("model_id"))
                item.known_as = known.name if known else None
            except DeviceError as exc:  # one phone failing must not hide the others
                item.error = str(exc)
        out.append(item)
    return out
