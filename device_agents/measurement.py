"""What every measuring command resolves once, before anything runs: the device behind
``--phone``, its identity, the CPU placement and the gate configuration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from as2d_cli.errors import UserError
from device_agents.affinity import Placement, placement
from device_agents.base import Device
from device_agents.gating import GateConfig
from device_agents.identity import DeviceIdentity, identify


@dataclass(frozen=True)
class Measurement:
    device: Device
    identity: DeviceIdentity
    placement: Placement
    gate: GateConfig

    def record(self) -> dict[str, Any]:
        """What a run's files say about where and how it measured."""
        return {
            "device": self.identity.to_dict(),
            "placement": self.placement.to_dict(),
            "gate": dataclasses.asdict(self.gate),
        }


@dataclass(frozen=True)
class MeasureOptions:
    """The measuring options a command passes on together (``--rest``, ``--interval``,
    ``--settle``, ``--max-temp``, ``--temp-sensor``, ``--verifier-cores``,
    ``--producer-cores``, ``--os-placement``); None: the device's default."""

    rest_s: float | None = None
    interval_s: float | None = None
    settle_s: float | None = None
    max_temp_c: float | None = None
    temp_sensor: str | None = None
    verifier_cores: str | None = None
    producer_cores: str | None = None
    os_placement: bool = False


def prepare(
    phone: str,
    options: MeasureOptions = MeasureOptions(),
    *,
    adb_port: int | None = None,
    gate_core: int | None = None,
) -> Measurement:
    """Resolve ``--phone`` and the measuring options into one Measurement.
    ``options.max_temp_c`` 0 turns the temperature gate off."""
    from device_agents.registry import resolve_phone  # adb's client: only when measuring

    device = resolve_phone(phone, adb_port)
    ident = identify(device)
    gate = gate_for(device, options)
    changes: dict[str, Any] = {}
    if gate_core is not None:
        n = len(device.cpus())
        if not 0 <= gate_core < n:
            raise UserError(
                f"--gate-core {gate_core}: {ident.name} has CPUs 0-{n - 1}; pick one of those"
            )
        changes["core"] = gate_core
    return Measurement(
        device,
        ident,
        placement(device, options.verifier_cores, options.producer_cores, options.os_placement),
        dataclasses.replace(gate, **changes),
    )


def gate_for(device: Device, options: MeasureOptions) -> GateConfig:
    """The device's default gate with the measuring options' changes (None: the default);
    ``options.max_temp_c`` 0 turns the temperature gate off."""
    changes: dict[str, Any] = {
        k: v
        for k, v in (
            ("rest_s", options.rest_s),
            ("interval_s", options.interval_s),
            ("settle_s", options.settle_s),
            ("temp_sensor", options.temp_sensor),
        )
        if v is not None
    }
    if options.max_temp_c is not None:
        changes["max_temp_c"] = None if options.max_temp_c == 0 else options.max_temp_c
    return dataclasses.replace(GateConfig.for_device(device), **changes)
