"""The emulated phone's `perfetto` through the real adb server: the binary config built with
the package's protos goes in, a real trace with the requested counters comes out."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import DeviceError
from device_agents.emulator.battery import BatteryModel, BatteryParams, EmulatedPower
from as2d_cli.energy.perfetto_capture import (
    device_boot_ns,
    pull_trace,
    push_config,
    remove_trace,
    start_background,
    trace_path_for,
    wait_trace_end,
)


def test_background_capture_round_trip(emulated_phone, tmp_path: Path) -> None:
    power = EmulatedPower(
        emulated_phone.phone, BatteryModel(BatteryParams(gauge_update_ms=250))
    ).install()
    power.model.set_plugged(False)
    dev = emulated_phone.device()
    with dev.run_dir("perfetto") as rd:
        spec = CaptureSpec(duration_ms=2000, poll_ms=250, include_current_avg=False)
        cfg = push_config(dev, rd, spec)
        trace = trace_path_for(rd)
        started = device_boot_ns(dev)
        with power.busy():  # one busy worker for the whole capture
            loaded = power.model.clock_ns()
            pid = start_background(dev, cfg, trace)
            assert pid > 0
            wait_trace_end(dev, started, spec.duration_ms, deadline_s=20)
        local = pull_trace(dev, trace, tmp_path / "t.perfetto-trace")
        remove_trace(dev, trace)
    s = read_battery_series(local)
    assert s.poll_ms == 250 and s.counters_requested == (
        "CURRENT",
        "VOLTAGE",
        "CHARGE",
        "CAPACITY_PERCENT",
    )
    assert 7 <= len(s) <= 10  # 2 s at 4 Hz, polled in real time
    assert not s.has("current_avg_ua")  # not requested, not written
    # Samples sit on the phone's boot clock, the clock /proc/uptime reports.
    assert abs(int(s.t_ns[0]) - started) < 2_000_000_000
    # idle 420 mA + one worker 1150 mA, discharging, with the gauge's 1 % jitter — from the
    # gauge's first update after the load began (a poll before it holds the reading taken
    # on the charger, as a real gauge's would)
    after = s.current_ua[s.t_ns >= loaded + 250_000_000]
    assert after.size >= 5
    assert (abs(after + 1_570_000) <= 0.0101 * 1_570_000).all()
    assert len(set(s.current_ua.tolist())) > 1
    power.stop_all()


def test_bad_config_is_refused_by_perfetto(emulated_phone) -> None:
    EmulatedPower(emulated_phone.phone).install()
    dev = emulated_phone.device()
    with dev.run_dir("perfetto") as rd:
        res = dev.shell(f"echo notaconfig > {rd}/x.pb")
        assert res.exit_code == 0
        with pytest.raises(DeviceError, match="perfetto did not start"):
            start_background(dev, f"{rd}/x.pb", trace_path_for(rd))


def test_installing_twice_replaces_the_model(emulated_phone) -> None:
    phone = emulated_phone.phone
    first = EmulatedPower(phone).install()
    second = EmulatedPower(phone).install()
    assert phone.as2d_power is second and phone.battery.model is second.model
    assert second._inner_launcher is first._inner_launcher  # not wrapped twice
