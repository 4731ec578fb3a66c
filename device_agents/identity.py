"""One identity per device, resolved once per command: what the device *is* (its name in
the phone table, model id, hardware serial), not how it is reached today. A phone over
wireless adb gets a new connection serial every time; its hardware serial
(``ro.serialno``) and model stay, so resumable work and stored files key on those.

Where a device's files live follows one rule (as2d_cli/formats/layout.py): everything is
named by :attr:`DeviceIdentity.name`. A phone that
comes back under another adb serial is found by its hardware serial
(:func:`find_attached`, :func:`attached_identity`), and a command printed for later names it
by :attr:`DeviceIdentity.phone_option`, never by a connection that may not last."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats.layout import device_part
from device_agents.phones import KNOWN_PHONES, by_model


@dataclass(frozen=True)
class DeviceIdentity:
    name: str  # "local", a known phone's name (k70, mi14, …), else the phone's model id
    kind: str  # "local" | "adb"
    model_id: str | None  # ro.product.model; the host's CPU model for the local host
    serial: str  # hardware serial: ro.serialno, the host's machine id; stable across connections
    connection: str  # how the device is reached now: the adb serial, or "local"
    marketing_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> str:
        """Stable across connections: names resumable work (calibration partials)."""
        return device_part(f"{self.name}-{self.serial}")

    @property
    def phone_option(self) -> str:
        """The ``--phone`` value that finds this device again whatever its connection, for
        commands printed to run later: ``local``; a known phone's name (resolved by model
        among the attached phones); else the hardware serial (a USB phone's adb serial)."""
        if self.kind == "local":
            return "local"
        if self.name in KNOWN_PHONES:
            return self.name
        return self.serial

    def describe(self) -> str:
        what = self.marketing_name or self.model_id or self.kind
        via = "" if self.connection in (self.serial, "local") else f" via {self.connection}"
        return f"{self.name} ({what}, serial {self.serial}{via})"


def _local_serial() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            return text[:16]
    import platform

    return platform.node() or "local"


def identify(device: Any) -> DeviceIdentity:
    """The identity of ``device`` (a device_agents Device). Cached on the device, so a
    command that passes one Device around asks the phone once."""
    cached = getattr(device, "_identity", None)
    if isinstance(cached, DeviceIdentity):
        return cached
    if device.kind == "local":
        facts = device.facts()
        ident = DeviceIdentity(
            "local",
            "local",
            facts.get("soc") or facts.get("model_id"),
            _local_serial(),
            "local",
            None,
        )
    else:
        props = device.getprops()
        model = props.get("ro.product.model") or None
        known = by_model(model)
        hw = hardware_serial(props, device.serial)
        name = known.name if known else device_part(model or hw)
        ident = DeviceIdentity(
            name,
            device.kind,
            model,
            hw,
            device.serial,
            known.marketing_name if known else props.get("ro.product.marketname") or None,
        )
    device._identity = ident
    return ident


def hardware_serial(props: dict[str, str], fallback: str) -> str:
    """A phone's hardware serial from its properties (``ro.serialno``, else
    ``ro.boot.serialno``), else ``fallback`` (its adb serial)."""
    return props.get("ro.serialno") or props.get("ro.boot.serialno") or fallback


def find_attached(hw_serial: str, port: int | None = None, prefer: str | None = None) -> Any:
    """The attached phone (an AdbPhone, state ``device``) whose hardware serial is
    ``hw_serial``, trying the adb serial ``prefer`` first (where it was last seen); None
    when no attached phone has it or no adb server runs. A phone on wireless adb gets a new
    adb serial with every connection; its hardware serial stays."""
    from device_agents.adb_phone import AdbPhone, _server_up, adb_port, list_attached

    port = port or adb_port()
    if not _server_up(port):
        return None
    try:
        attached = [a.serial for a in list_attached(port) if a.state == "device"]
    except DeviceError:
        return None
    order = ([prefer] if prefer in attached else []) + [a for a in attached if a != prefer]
    for cand in order:
        dev = AdbPhone(cand, port)
        try:
            props = dev.getprops()
        except DeviceError:
            continue
        if hardware_serial(props, cand) == hw_serial:
            return dev
    return None


def attached_identity(serial: str, port: int | None = None) -> DeviceIdentity | None:
    """The identity of the attached phone whose adb serial is ``serial``; None when no adb
    server runs, the serial is not attached (in state ``device``) or the phone does not
    answer. Never starts a server, never raises."""
    from device_agents.adb_phone import AdbPhone, _server_up, adb_port, list_attached

    try:
        port = port or adb_port()
        if not _server_up(port):
            return None
        if not any(a.serial == serial and a.state == "device" for a in list_attached(port)):
            return None
        return identify(AdbPhone(serial, port))
    except (DeviceError, UserError):
        return None
