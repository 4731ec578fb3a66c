"""The same device checks against a real phone. Skipped unless AS2D_TEST_PHONE names one
(`local`, a known name such as k70, or a serial) on the adb server of
$ANDROID_ADB_SERVER_PORT:

    AS2D_TEST_PHONE=k70 python -m pytest -m hardware tests/test_devices_hardware.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from device_agents.base import Device
from device_agents.gating import GateConfig, run_gate, show_gate
from device_agents.registry import resolve_phone

NAME = os.environ.get("AS2D_TEST_PHONE")
pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(not NAME, reason="set AS2D_TEST_PHONE to run against a real phone"),
]


@pytest.fixture(scope="module")
def device() -> Device:
    assert NAME
    return resolve_phone(NAME)


def test_facts_read_the_basics(device: Device) -> None:
    f = device.facts()
    assert f.get("cpu_cores") and f.get("cpu_cores") >= 1
    assert f.get("ram_gib") and f.get("ram_gib") > 0
    for name, fact in f.values.items():
        assert fact.available or fact.source.startswith("unavailable"), name


def test_cpu_state_and_gate_show(device: Device) -> None:
    st = device.cpu_state()
    assert st.online and all(c.online == (c.cpu in st.online) for c in st.cores)
    rows = show_gate(device)
    assert [r[0] for r in rows][:2] == ["rest", "cores_online"]


def test_short_gate_records_every_observation(device: Device) -> None:
    cfg = GateConfig.for_device(device)
    result = run_gate(
        device,
        GateConfig(
            rest_s=0, interval_s=1, checks=2, core=cfg.core, min_ceiling_khz=cfg.min_ceiling_khz
        ),
    )
    assert result.observations and result.observations[0].check == "rest"


def test_push_pull_round_trip_and_cleanup(device: Device, tmp_path: Path) -> None:
    src = tmp_path / "blob"
    src.write_bytes(os.urandom(1 << 20))
    with device.run_dir("hwtest") as rd:
        device.push(src, f"{rd}/blob")
        device.pull(f"{rd}/blob", tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == src.read_bytes()
    assert device.shell(["ls", rd]).exit_code != 0
