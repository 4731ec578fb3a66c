"""The emulated phone's `perfetto` through the real adb server: the binary config built with
the package's protos goes in, a real trace with the requested counters comes out."""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.perfetto_capture import (
    device_boot_ns,
    pull_trace,
    push_config,
    remove_trace,
    start_background,
    trace_path_for,
    wait_trace_end,
)
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import DeviceError
from device_agents.emulator.battery import BatteryModel, BatteryParams, EmulatedPower


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


def test_a_python3_request_counts_the_cpu_its_threads_and_workers_use(
    make_emulated_phone, tmp_path: Path
) -> None:
    # python3 on the phone (device_agents.emulator.python) is load by what it keeps busy:
    # a request with two worker processes that each burn 0.4 s of CPU counts about 0.8
    # worker-seconds more than its own, however the host schedules them — one worker per
    # process would count its wall time instead.
    import time

    from device_agents.emulator.python import enable_python

    s = make_emulated_phone()
    enable_python(s.phone)
    power = EmulatedPower(s.phone, BatteryModel()).install()
    power.model.set_plugged(False)
    counted: list[float] = []
    sample = power.threads.sample

    def spy(dt_s: float) -> float:
        w = sample(dt_s)
        counted.append(w * dt_s)
        return w

    power.threads.sample = spy  # type: ignore[method-assign]
    script = (
        "import os, resource, subprocess, sys, time\n"
        "burn = 'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass'\n"
        "ps = [subprocess.Popen([sys.executable, '-S', '-c', burn]) for _ in range(2)]\n"
        "[p.wait() for p in ps]\n"
        "time.sleep(0.3)\n"
        "r = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(sum(x.ru_utime + x.ru_stime for x in r))\n"
    )
    res = s.device().shell(["python3", "-c", script])
    assert res.exit_code == 0, res
    used = float(res.stdout.split()[-1])  # the request's CPU seconds, its workers' included
    deadline = time.monotonic() + 30
    while power.model._activity_now() != 0.0 and time.monotonic() < deadline:
        time.sleep(0.05)  # the next sample sees it gone
    power.stop_all()
    assert used >= 0.8
    # Sampled every 100 ms at the clock's tick: the request's own last CPU after the final
    # sample (it sleeps then) and one tick per process may go uncounted.
    assert sum(counted) == pytest.approx(used, abs=0.15)
    assert power.model._activity_now() == 0.0
