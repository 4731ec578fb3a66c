"""`--phone` resolution and discovery: ``local``, a known phone name (resolved through its
model ID among attached phones), or any adb serial."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from as2d_cli.errors import DeviceError, UserError
from device_agents.adb_phone import STATE_ADVICE, AdbPhone, _server_up, _state_error, adb_port, list_attached
from device_agents.base import Device, Facts
from device_agents.local import LocalHost


@dataclass(frozen=True)
class KnownPhone:
    name: str
    marketing_name: str
    model_id: str


# From the paper's Table 6 (shared/phones.md).
KNOWN_PHONES: dict[str, KnownPhone] = {
    "k70": KnownPhone("k70", "Redmi K70 Pro", "23117RK66C"),
    "11pro": KnownPhone("11pro", "Xiaomi 11 Pro", "M2102K1AC"),
    "14": KnownPhone("14", "Xiaomi 14", "23127PN0CC"),
    "note9pro": KnownPhone("note9pro", "Redmi Note 9 Pro 5G", "M2007J17C"),
}
ALIASES = {"mi11pro": "11pro", "mi14": "14", "redmi-k70-pro": "k70"}


def known_names() -> str:
    return ", ".join(["local", *KNOWN_PHONES])


def resolve_phone(name: str, port: int | None = None) -> Device:
    """The device for a ``--phone`` value, or one clear error line."""
    if name == "local":
        return LocalHost()
    port = port or adb_port()
    if not _server_up(port):
        raise UserError(f"--phone {name}: no adb server runs on port {port}; start it with `adb start-server` "
                        f"(or set ANDROID_ADB_SERVER_PORT), attach the phone, and check `as2d devices`")
    attached = list_attached(port)
    key = ALIASES.get(name, name)
    if key in KNOWN_PHONES:
        known = KNOWN_PHONES[key]
        matches, seen = [], []
        for a in attached:
            if a.state != "device":
                seen.append(f"{a.serial} ({a.state})")
                continue
            model = AdbPhone(a.serial, port).shell(["getprop", "ro.product.model"], 10).stdout.strip()
            seen.append(f"{a.serial} ({model or 'unknown model'})")
            if model == known.model_id:
                matches.append(a.serial)
        if len(matches) == 1:
            return AdbPhone(matches[0], port)
        if len(matches) > 1:
            raise UserError(f"--phone {name}: several attached phones are a {known.marketing_name} "
                            f"({', '.join(matches)}); pass one serial with --phone SERIAL")
        raise UserError(f"--phone {name}: no attached phone is a {known.marketing_name} (model {known.model_id}); "
                        f"attached: {', '.join(seen) or 'none'} -- see `as2d devices`")
    for a in attached:
        if a.serial == name:
            if a.state != "device":
                raise _state_error(a.serial, a.state)
            return AdbPhone(a.serial, port)
    serials = ", ".join(a.serial for a in attached) or "none"
    raise UserError(f"unknown --phone {name!r}: use one of {known_names()} or the serial of an attached "
                    f"phone (attached: {serials})")


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
        return {"serial": self.serial, "kind": self.kind, "state": self.state, "known_as": self.known_as,
                "advice": self.advice, "error": self.error,
                "facts": self.facts.to_dict() if self.facts else None}


def discover(port: int | None = None, include_local: bool = True) -> list[DeviceListing]:
    """The local host and every phone the adb server knows, with state and facts."""
    out: list[DeviceListing] = []
    if include_local:
        out.append(DeviceListing("local", "local", "device", None, LocalHost().facts()))
    by_model = {k.model_id: k.name for k in KNOWN_PHONES.values()}
    for a in list_attached(port):
        item = DeviceListing(a.serial, "adb", a.state)
        if a.state != "device":
            item.advice = STATE_ADVICE.get(a.state, "check the cable and `adb devices`")
        else:
            try:
                item.facts = AdbPhone(a.serial, port).facts()
                item.known_as = by_model.get(item.facts.get("model_id") or "")
            except DeviceError as exc:  # one phone failing must not hide the others
                item.error = str(exc)
        out.append(item)
    return out
