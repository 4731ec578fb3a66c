"""`as2d devices`: the local host and every attached phone with state and Table 6 facts;
`as2d devices gate --phone P`: show or run the pre-measurement gate."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from as2d_cli.cli import options
from as2d_cli.cli.groups import MEASURE, PLACEMENT, grouped, variant
from as2d_cli.formats import registry
from device_agents.measurement import MeasureOptions

DEVICES_SCHEMA, DEVICES_VERSION = registry.name_version("as2d.devices")
FARM_SCHEMA, FARM_VERSION = registry.name_version("as2d.farm")


def _fmt(value: object) -> str:
    if value is None:
        return "unavailable"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def devices(
    ctx: typer.Context,
    as_json: bool = options.as_json("Print JSON (schema as2d.devices/1) instead of a table."),
    adb_port: int | None = options.adb_port(),
    ray: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="List a phone farm instead: the Ray cluster's nodes and the phones attached to each.",
    ),
) -> None:
    """List the local host and every attached phone with state and hardware facts."""
    if ctx.invoked_subcommand is not None:
        return
    if ray is not None:
        _farm(ray, as_json)
        return
    from device_agents.registry import discover

    listing = discover(adb_port)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "schema": DEVICES_SCHEMA,
                    "version": DEVICES_VERSION,
                    "devices": [d.to_dict() for d in listing],
                },
                indent=2,
            )
        )
        return
    console = Console(highlight=False, soft_wrap=True)
    table, notes = _table(listing)
    console.print(table)
    for n in notes:
        console.print(n)


_COLUMNS = (
    "serial",
    "state",
    "known as",
    "model",
    "SoC",
    "cores",
    "peak GHz",
    "GPU",
    "RAM GiB",
    "Android/API",
    "build",
    "patch",
)


def _table(listing: list[Any]) -> tuple[Table, list[str]]:
    """A row per device (its facts), and the notes on those that could not be read."""
    table = Table(title="devices")
    for col in _COLUMNS:
        table.add_column(col)
    notes: list[str] = []
    for d in listing:
        f = d.facts
        if f is None:
            table.add_row(d.serial, d.state, *([""] * 10))
            if d.advice:
                notes.append(f"{d.serial} is {d.state}: {d.advice}")
            if d.error:
                notes.append(f"{d.serial}: {d.error}")
            continue
        android = (
            f"{_fmt(f.get('android_version'))}/{_fmt(f.get('api_level'))}"
            if d.kind == "adb"
            else "-"
        )
        facts = ("model_id", "soc", "cpu_cores", "cpu_peak_ghz", "gpu", "ram_gib")
        table.add_row(
            d.serial,
            d.state,
            d.known_as or "-",
            *(_fmt(f.get(k)) for k in facts),
            android,
            _fmt(f.get("build")),
            _fmt(f.get("security_patch")),
        )
    if len(listing) == 1:
        notes.append(
            "no phone attached: connect one over USB with USB debugging on (see docs/devices.md)"
        )
    return table, notes


def _farm(address: str, as_json: bool) -> None:
    """The nodes of the Ray cluster at ``address`` with their phones (docs/scale-out.md)."""
    from as2d_cli.execution.ray_executor import RayExecutor

    with RayExecutor(address) as ex:
        nodes = ex.nodes()
    if as_json:
        typer.echo(
            json.dumps({"schema": FARM_SCHEMA, "version": FARM_VERSION, "nodes": nodes}, indent=2)
        )
        return
    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"phone farm at {address}")
    for col in ("host", "address", "state", "CPUs", "phones", "busy"):
        table.add_column(col)
    for n in nodes:
        table.add_row(
            n["host"],
            n["address"],
            "alive" if n["alive"] else "dead",
            str(n["cpus"]),
            ", ".join(n["phones"]) or "-",
            ", ".join(n["busy"]) or "-",
        )
    console.print(table)
    phones = sum(len(n["phones"]) for n in nodes if n["alive"])
    console.print(
        f"{phones} phone{'s' if phones != 1 else ''} on {sum(n['alive'] for n in nodes)} live "
        "node(s); a node offers a phone with `ray start ... --resources '{\"phone:SERIAL\": 1}'`"
    )


# The gate's own options of the measuring group: its checks, without the host's quiet or the
# CPU placement.
GATE_ONLY = variant(
    MEASURE,
    drop=("settle", *PLACEMENT),
    help={
        "rest": "Seconds of rest before checking (phone default 15).",
        "interval": "Seconds between the ceiling checks (default 5).",
    },
)


@grouped(measure=GATE_ONLY)
def gate(
    phone: str = options.phone(
        ..., "local, a known phone (k70, mi14, mi11pro, note9pro) or a serial."
    ),
    show: bool = typer.Option(
        False, "--show", help="Only show each check once (no rest, no waiting)."
    ),
    measure: MeasureOptions = MeasureOptions(),
    core: int | None = options.core(
        None,
        "--gate-core",
        help="Core whose frequency ceiling is checked (default 4; one the device has).",
    ),
    min_ghz: float | None = options.positive(
        None, "--min-ghz", help="Minimum ceiling in GHz (default 1.8816)."
    ),
    as_json: bool = options.as_json("Print the gate record as JSON."),
    adb_port: int | None = options.adb_port("adb server port."),
) -> None:
    """Check a device as before a measured episode: rest, temperature, all cores online,
    frequency ceiling."""
    from dataclasses import replace

    from device_agents.gating import run_gate, show_gate
    from device_agents.measurement import prepare

    m = prepare(phone, measure, adb_port=adb_port, gate_core=core)
    device = m.device
    config = m.gate
    if min_ghz is not None:
        config = replace(config, min_ceiling_khz=int(round(min_ghz * 1e6)))
    console = Console(highlight=False, soft_wrap=True)
    if show:
        for name, available, obs in show_gate(device, config):
            status = (
                "unavailable"
                if not available
                else ("ok" if obs and obs.ok in (True, None) else "FAIL")
            )
            console.print(f"{name:13} {status:11} {obs.message if obs else ''}")
        return
    result = run_gate(device, config)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        for o in result.observations:
            mark = "ok" if o.ok in (True, None) else "FAIL"
            console.print(f"{o.check:13} {mark:5} {o.message}")
    if not result.passed:
        from device_agents.gating import GateFailed

        raise GateFailed(result)


def watch(
    phone: str = options.phone(
        ..., "local, a known phone (k70, mi14, mi11pro, note9pro) or a serial."
    ),
    seconds: float = options.positive_seconds(10.0, "--seconds", help="How long to watch."),
    interval: float = options.positive_seconds(
        1.0, "--interval", help="Seconds between samples (the episode monitor uses 1)."
    ),
    adb_port: int | None = options.adb_port("adb server port."),
) -> None:
    """Sample cores online and frequency ceilings as the episode monitor does; stop
    with the monitor's error if a core goes offline."""
    import time

    from device_agents.monitor import CoreMonitor
    from device_agents.registry import resolve_phone

    device = resolve_phone(phone, adb_port)
    console = Console(highlight=False, soft_wrap=True)
    mon = CoreMonitor(device, interval).start()
    shown = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and not mon.tripped.is_set():
            time.sleep(min(0.1, interval))
            for s in mon.samples[shown:]:
                ceilings = " ".join(
                    f"{c}:{'-' if k is None else f'{k / 1e6:.2f}'}"
                    for c, k in s.ceiling_khz.items()
                )
                console.print(
                    f"{s.t_s:7.1f} s  online {','.join(map(str, s.online))}  ceiling GHz {ceilings}"
                )
            shown = len(mon.samples)
    finally:
        mon.stop()
    mon.check()


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="List devices (the local host and adb phones) and check them before measuring.",
        invoke_without_command=True,
        no_args_is_help=False,
    )
    app.add_typer(sub, name="devices")

    sub.callback()(devices)

    sub.command("gate")(gate)

    sub.command("watch")(watch)
