"""`as2d emulator start`: run an emulated phone (a loopback adbd the adb server connects to)
for dry runs, until Ctrl-C."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from as2d_cli.cli import options
from as2d_cli.cli.groups import grouped, subcommands
from as2d_cli.errors import UserError


@dataclass(frozen=True)
class _Phone:
    """Who the emulated phone is and how it is reached (the phone's options)."""

    profile: str
    connection: str
    auth: str
    authorized_keys: Path | None
    serial: str


@dataclass(frozen=True)
class _Extras:
    """What the emulated phone has besides a shell: faults, arm64 programs, python, a battery."""

    fault: list[str]
    arm64_bundle: bool
    python: bool
    battery: bool
    gauge_period_ms: int | None
    gauge_sign: str | None
    gauge_units: str | None


def _phone(
    profile: str = typer.Option(
        "k70", "--profile", help="Phone to emulate: k70, mi14, mi11pro, note9pro."
    ),
    connection: str = typer.Option(
        "usb", "--connection", help="usb (unplug removes the phone) or wireless (it stays)."
    ),
    auth: str = typer.Option(
        "device",
        "--auth",
        help="device (only authorized adb keys are accepted), unauthorized (no key accepted) or offline (no handshake).",
    ),
    authorized_keys: Path | None = typer.Option(
        None,
        "--authorized-keys",
        metavar="FILE",
        help="adb public keys the phone accepts, one per line in adbkey.pub format (default: the key of the adb server it attaches to).",
    ),
    serial: str = typer.Option(
        "as2demu0001",
        "--serial",
        help="The phone's hardware serial (ro.serialno); give each emulated phone of a farm its own.",
    ),
) -> _Phone:
    from device_agents.emulator.profiles import PROFILES, profile_named

    chosen = profile_named(profile)
    if chosen is None:
        raise UserError(
            f"unknown --profile {profile!r}; choose one of {', '.join(PROFILES)} "
            "(aliases: 14, 11pro)"
        )
    if connection not in ("usb", "wireless"):
        raise UserError("--connection must be usb or wireless")
    if auth not in ("device", "unauthorized", "offline"):
        raise UserError("--auth must be device, unauthorized or offline")
    return _Phone(chosen.name, connection, auth, authorized_keys, serial)


def _extras(
    fault: list[str] = typer.Option(
        [],
        "--fault",
        help="Fault to inject (repeatable): core-offline:CPU@T, ceiling:CPU=GHZ@T, stall:CMD, freeze@T+D, vanish:CMD, vanish@T, unplug@T[+D].",
    ),
    arm64_bundle: bool = typer.Option(
        False,
        "--arm64-bundle",
        help="Run arm64 programs pushed to the phone (the runtime bundle) under qemu-aarch64-static, so commands take the real-phone path (docs/phones.md).",
    ),
    python: bool = typer.Option(
        False,
        "--python",
        help="Give the phone a python3 (this host's interpreter, without the project): the native runner is pushed to it as a payload and runs at host speed (docs/runner-protocol.md).",
    ),
    battery: bool = typer.Option(
        False,
        "--battery",
        help="Install the battery model and a perfetto that writes real traces, so `as2d energy` can measure (docs/energy.md).",
    ),
    gauge_period_ms: int | None = options.milliseconds(
        None,
        "--gauge-period-ms",
        minimum=10,
        maximum=60_000,
        help="With --battery: the fuel gauge's update period (default 1000).",
    ),
    gauge_sign: str | None = options.one_of(
        None,
        "--gauge-sign",
        choices=("negative", "positive"),
        help="With --battery: the sign the gauge gives discharge current (default negative, Android's).",
    ),
    gauge_units: str | None = options.one_of(
        None,
        "--gauge-units",
        choices=("uA", "mA", "nA"),
        help="With --battery: the unit the gauge writes into the µA current field (default uA).",
    ),
) -> _Extras:
    gauge_given = [
        flag
        for flag, value in (
            ("--gauge-period-ms", gauge_period_ms),
            ("--gauge-sign", gauge_sign),
            ("--gauge-units", gauge_units),
        )
        if value is not None
    ]
    if gauge_given and not battery:
        raise UserError(f"{gauge_given[0]} sets the battery model's gauge; add --battery")
    return _Extras(
        list(fault), arm64_bundle, python, battery, gauge_period_ms, gauge_sign, gauge_units
    )


@grouped(phone=_phone, extras=_extras)
def start(
    port: int = options.emulator_port(
        0, "--port", help="Loopback port of the emulated adbd (0: any free port)."
    ),
    adb_port: int | None = options.adb_port(
        help="adb server to attach to (default: $ANDROID_ADB_SERVER_PORT or 5037; started privately if none runs there)."
    ),
    private_server: bool = typer.Option(
        False,
        "--private-server",
        help="Start a private adb server (own port and HOME) instead of using a running one.",
    ),
    phone: _Phone = _Phone("k70", "usb", "device", None, "as2demu0001"),
    extras: _Extras = _Extras([], False, False, False, None, None, None),
) -> None:
    """Run an emulated phone until Ctrl-C and print how to reach it."""
    from device_agents.adb_phone import adb_port as default_adb_port
    from device_agents.emulator.adbd import PhoneAuth
    from device_agents.emulator.session import EmulatorSession

    session = EmulatorSession(
        profile=phone.profile,
        port=port,
        adb_port=None if private_server else (adb_port or default_adb_port()),
        private_server=private_server,
        connection=phone.connection,
        serial=phone.serial,
        auth=PhoneAuth(mode=phone.auth, authorized_keys=phone.authorized_keys),
    )
    try:
        armed = _arm(session.phone, extras)
    except UserError:
        session.phone.close()
        raise
    session.start()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _announce(session, phone, extras, armed)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        session.stop()
        typer.echo("emulated phone stopped")


def _arm(emulated: Any, extras: _Extras) -> list[str]:
    """The faults armed and the extras installed on the phone; the faults as armed."""
    from device_agents.emulator.faults import apply_fault

    armed = [apply_fault(emulated, spec) for spec in extras.fault]
    if extras.arm64_bundle:
        from as2d_cli.bundle.emulated import enable_arm64_bundle

        enable_arm64_bundle(emulated)
    if extras.python:
        from device_agents.emulator.python import enable_python

        enable_python(emulated)
    if extras.battery:
        from device_agents.emulator.battery import EmulatedPower, gauge_model

        model = gauge_model(
            extras.gauge_period_ms or 1000,
            extras.gauge_sign or "negative",
            extras.gauge_units or "uA",
        )
        EmulatedPower(emulated, model).install()
    return armed


def _announce(session: Any, phone: _Phone, extras: _Extras, armed: list[str]) -> None:
    """Where the phone is, what it has, and how to reach it."""
    p = session.phone.profile
    typer.echo(
        f"emulated {p.marketing_name} ({p.model_id}) at {session.serial} ({phone.connection}, "
        f"{phone.auth}), adb server on port {session.adb_port}"
        + (" (private, stops with the emulator)" if session.server else "")
    )
    for a in armed:
        typer.echo(f"fault: {a}")
    if extras.arm64_bundle:
        typer.echo(
            "arm64 programs pushed to the phone (the runtime bundle) run under qemu-aarch64-static"
        )
    if extras.python:
        typer.echo(
            "python3 on the phone runs this host's interpreter; the native runner is pushed to it as a payload"
        )
    if extras.battery:
        typer.echo(
            "battery model installed: `as2d energy` measures it through perfetto (gauge: "
            f"updates every {extras.gauge_period_ms or 1000} ms, discharge current "
            f"{extras.gauge_sign or 'negative'}, current in {extras.gauge_units or 'uA'})"
        )
    typer.echo(
        f"try: ANDROID_ADB_SERVER_PORT={session.adb_port} as2d devices   "
        f"(or: adb -P {session.adb_port} -s {session.serial} shell getprop ro.product.model)"
    )
    typer.echo("press Ctrl-C to stop", nl=True)


def register(app: typer.Typer) -> None:
    subcommands(
        app,
        "emulator",
        "An emulated phone for dry runs and tests (no hardware needed).",
        {"start": start},
    )
