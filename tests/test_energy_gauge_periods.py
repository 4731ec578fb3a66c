"""Energy at any gauge period (issue 46 item 1): the analysis against the emulated battery's
true energy at gauge periods 0.25–2 s, the noise under load, a dip inside a window, a trace
cut before the last window, the sign check with a charger in the tail, the warm-up sized
from the probed period, and the emulated battery's thread counting.

Captures are simulated on a virtual boot clock (device_agents.emulator.battery
.simulate_episode), written as real Perfetto traces and read back through the toolkit's
reader: deterministic, and independent of how loaded the machine is.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.energy.analysis import (
    analyse_episode,
    correct_current_sign,
    integrate_energy_j,
    reading_noise,
)
from as2d_cli.energy.episode_records import Episode, RequestRecord
from as2d_cli.energy.episode_script import EpisodePlan, lead_s, render_script
from as2d_cli.energy.gauge import estimate_gauge
from as2d_cli.energy.gauge_probe import FILES, GaugeProbe, probe_gauge, size_plan
from as2d_cli.energy.trace_reader import read_battery_series
from device_agents.emulator.battery import (
    BatteryModel,
    BatteryParams,
    EpisodeTiming,
    GaugeFaults,
    GaugeReading,
    ManualClock,
    SimRequest,
    encode_trace,
    simulate_episode,
)

S = 1_000_000_000
COUNTERS = ["CURRENT", "VOLTAGE", "CHARGE", "CAPACITY_PERCENT", "CURRENT_AVG"]
DISCHARGING = {"battery_status_at_start": "Discharging", "battery_status_at_end": "Discharging"}


def _series(tmp_path: Path, readings: list[GaugeReading]):  # type: ignore[no-untyped-def]
    path = tmp_path / "sim.perfetto-trace"
    path.write_bytes(encode_trace(readings, None, COUNTERS))
    return read_battery_series(path)


def _episode(sim, meta: dict[str, str] | None = None) -> Episode:  # type: ignore[no-untyped-def]
    recs = [RequestRecord(m, ph, a, b, b, 100, 0) for m, ph, a, b in sim.windows]
    return Episode(recs, dict(DISCHARGING if meta is None else meta))


def _requests(rng: random.Random, period_s: float) -> list[SimRequest]:
    """The default measuring: per method a warm-up at least one period plus one poll long,
    then three formal requests back to back (2.5–8 s), As²d at 1.3 workers."""
    out = []
    for method, workers in (("as2d", 1.3), ("target-only", 1.0)):
        out.append(SimRequest(method, "warmup", max(lead_s(period_s, 0.25), 2.5), workers))
        out += [SimRequest(method, "formal", rng.uniform(2.5, 8.0), workers) for _ in range(3)]
    return out


@pytest.mark.parametrize("period_ms", [250, 500, 1000, 1250, 1500, 2000])
def test_every_formal_request_within_two_percent_at_any_gauge_period(
    tmp_path: Path, period_ms: int
) -> None:
    errors, inside, polled = _sweep(tmp_path, period_ms, 4)
    # The first formal request of each method is among these, measured like the others.
    assert max(errors) < 0.02, max(errors)
    assert np.mean(inside) >= 0.95


def test_the_polled_curve_would_miss_where_the_placed_readings_do_not(tmp_path: Path) -> None:
    # Not vacuous: through the same captures the polled curve (the gauge's readings held
    # from the poll that shows them) is off by more than 2 % somewhere — a reading the
    # gauge took between two requests, held into the next one.
    worst_placed, worst_polled = 0.0, 0.0
    for period_ms in (1250, 1750, 2000):
        errors, _, polled = _sweep(tmp_path, period_ms, 8)
        worst_placed, worst_polled = max(worst_placed, max(errors)), max(worst_polled, polled)
    assert worst_placed < 0.02 < worst_polled


def _sweep(tmp_path: Path, period_ms: int, phases: int) -> tuple[list[float], list[bool], float]:
    """(|relative error| and whether inside the bound per formal request, the polled
    curve's worst |relative error|) over `phases` phases against the gauge's grid."""
    errors, inside, polled_worst = [], [], 0.0
    for k in range(phases):  # four phases of the requests against the gauge's update grid
        rng = random.Random(period_ms + k)
        sim = simulate_episode(
            BatteryParams(gauge_update_ms=period_ms),
            _requests(rng, period_ms / 1000),
            EpisodeTiming(
                late_ms=200, phase_s=period_ms / 1000 * k / phases, between_s=(0.02, 0.08)
            ),
            seed=k,
        )
        series = _series(tmp_path, sim.readings)
        a = analyse_episode(series, _episode(sim))
        assert a.gauge is not None and a.gauge.period_s == pytest.approx(period_ms / 1000, rel=0.05)
        for r, true_j in zip(a.requests, sim.truth_j):
            if r.phase != "formal":
                continue
            assert r.energy_j is not None and r.energy_bound_j is not None
            errors.append(abs(r.energy_j / true_j - 1))
            inside.append(abs(r.energy_j - true_j) <= r.energy_bound_j)
            polled = integrate_energy_j(series, r.origin_boot_ns, r.end_boot_ns)
            polled_worst = max(polled_worst, abs(polled / true_j - 1))
    return errors, inside, polled_worst


def _loaded_and_quiet(noise_loaded: float) -> tuple[list[GaugeReading], list[tuple[int, int]]]:
    """Readings every second: 60 s at a steady 1.7 W with no jitter, two 5 s windows at
    6.4 W whose readings jitter by `noise_loaded` (relative, alternating sign)."""
    t0, out, windows = 100 * S, [], [(120 * S, 125 * S), (140 * S, 145 * S)]
    for k in range(60):
        t = t0 + k * S
        busy = any(a <= t <= b for a, b in windows)
        amps = (1.6 if busy else 0.425) * (1 + (noise_loaded * (-1) ** k if busy else 0.0))
        out.append(GaugeReading(t, -round(amps * 1e6), 0, 4_000_000, 4_000_000 - k * 100, 50.0))
    return out, windows


def test_reading_noise_is_estimated_from_readings_under_load(tmp_path: Path) -> None:
    readings, windows = _loaded_and_quiet(0.01)
    series = _series(tmp_path, readings)
    gauge = estimate_gauge(series)
    under_load = reading_noise(series, gauge, windows)
    whole = reading_noise(series, gauge)
    # ±1 % alternating: consecutive changes of 2 %, i.e. σ = 2 % / √2 ≈ 1.4 %
    assert under_load == pytest.approx(0.02 / np.sqrt(2), rel=0.05)
    assert whole < under_load / 5  # the quiet readings would hide it


def test_a_dip_the_gauge_caught_inside_a_window_is_in_the_bound(tmp_path: Path) -> None:
    # A 1 s gauge whose update at 4.0 s after the origin lands in a 150 ms dip to idle.
    req = [
        SimRequest("as2d", "warmup", 3.0),
        SimRequest("as2d", "formal", 8.0, 1.0, ((3.9, 0.15),)),
        SimRequest("as2d", "formal", 8.0, 1.0),
    ]
    sim = simulate_episode(
        BatteryParams(gauge_update_ms=1000),
        req,
        EpisodeTiming(settle_s=3.0, between_s=(0.0, 0.0)),
        seed=3,
    )
    a = analyse_episode(_series(tmp_path, sim.readings), _episode(sim))
    dipped, steady = a.requests[1], a.requests[2]
    assert dipped.energy_j is not None and dipped.energy_bound_j is not None
    err = dipped.energy_j - sim.truth_j[1]
    # the reading at the dip stands for about a second of idle: ~4.6 W × (1 − 0.15) s lost
    assert err < -3.0 and abs(err) <= dipped.energy_bound_j
    assert steady.energy_bound_j is not None and steady.energy_j is not None
    assert abs(steady.energy_j - sim.truth_j[2]) <= steady.energy_bound_j
    assert dipped.energy_bound_j > 5 * steady.energy_bound_j  # accounted for, not smoothed


def _cut_run_folder(tmp_path: Path) -> tuple[Path, int]:
    """A pulled run folder of two formal requests whose trace was cut mid-packet during the
    second one."""
    from dataclasses import asdict

    from as2d_cli.energy.capture_config import CaptureSpec, build_trace_config

    t0 = 2000 * S
    req = [SimRequest("target-only", "formal", 4.0), SimRequest("as2d", "formal", 4.0)]
    sim = simulate_episode(
        BatteryParams(gauge_update_ms=1000),
        req,
        EpisodeTiming(settle_s=2.0, between_s=(0.5, 0.5), tail_s=2.0, start_ns=t0),
    )
    cfg = build_trace_config(CaptureSpec(duration_ms=13_000))
    full = encode_trace(sim.readings, cfg, COUNTERS[:4])
    second = sim.windows[1][2]
    n = sum(1 for r in sim.readings if r.t_boot_ns < second + 2 * S)  # polls kept: 2 s into it
    cut = len(encode_trace(sim.readings[:n], cfg, COUNTERS[:4])) + 7  # 7 bytes of the next
    d = tmp_path / "run"
    (d / "raw").mkdir(parents=True)
    (d / "trace.perfetto-trace").write_bytes(full[:cut])  # 7 bytes after its last packet
    plan = EpisodePlan(methods=("target-only", "as2d"), request_cmd="req", warmups=0)
    doc = {"plan": asdict(plan), "poll_ms": 250, "duration_ms": 13_000, "connection": "usb"}
    (d / "plan.json").write_text(json.dumps(doc))
    files = {"battery_status_at_start": "Discharging\n", "battery_status_at_end": "Discharging\n"}
    for k, (_, _, a, b) in enumerate(sim.windows):
        files[f"req{k:03d}.origin"] = f"{a // S}.{a % S // 10_000_000:02d} 1\n"
        files[f"req{k:03d}.end"] = f"{b // S}.{b % S // 10_000_000:02d} 1\n"
        files[f"req{k:03d}.rc"] = "0\n"
        files[f"req{k:03d}.out"] = "AS2D_REQUEST body_tokens=40\n"
    for name, text in files.items():
        (d / "raw" / name).write_text(text)
    return d, 7


def test_a_trace_cut_before_the_last_window_keeps_the_windows_it_covers(
    tmp_path: Path, capsys
) -> None:
    from as2d_cli.cli.main import main
    from as2d_cli.energy.results import load_energy_result

    d, lost = _cut_run_folder(tmp_path)
    try:
        main(["energy", "--from-run", str(d), "--baseline", "target-only"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 0, err
    doc = load_energy_result(d / "energy.json")
    first, second = doc["requests"]
    assert first["status"] == "ok" and first["energy_j"] > 0
    assert second["status"].startswith("not covered:") and "cut mid-packet" in second["status"]
    assert "request budget" not in second["status"]  # advice that does not apply is not given
    assert doc["capture"]["trace_lost_bytes"] == lost
    table = (d / "table.md").read_text()
    assert "not covered" in table
    (m,) = [m for m in doc["methods"] if m["method"] == "as2d"]
    assert m["status"].startswith("not covered:") and m["energy_j"] is None


@pytest.mark.parametrize("flipped", [False, True])
def test_a_weak_charger_in_the_idle_tail_does_not_fool_the_sign_check(
    tmp_path: Path, flipped: bool
) -> None:
    # 500 mA in while idle (420 mA draw): the tail reads charging, more polls than the
    # requests; the status says Discharging at both ends (too weak to charge under load).
    req = [SimRequest("as2d", "formal", 4.0), SimRequest("target-only", "formal", 4.0)]
    plug_at = 100 * S + 3 * S + 8 * S + 1 * S
    sim = simulate_episode(
        BatteryParams(gauge_update_ms=1000, charge_ma=500.0),
        req,
        EpisodeTiming(between_s=(0.0, 0.0), tail_s=30.0),
        plugged=lambda t: t >= plug_at,
        faults=GaugeFaults(current_sign=-1 if flipped else 1),
    )
    series = _series(tmp_path, sim.readings)
    shown = np.median(series.current_ua)
    # the old rule (most polls positive while Discharging) would have flipped the real sign
    assert (shown > 0) != flipped
    fixed, note = correct_current_sign(series, DISCHARGING)
    assert (note is not None) == flipped
    a = analyse_episode(series, _episode(sim))
    for r, true_j in zip(a.requests, sim.truth_j):
        assert r.status == "ok" and r.energy_j == pytest.approx(true_j, rel=0.02)
    assert a.cross_check.excluded_charging_samples > 0  # the tail's charging polls


def test_probe_estimates_the_gauge_period_from_quick_reads() -> None:
    clock = ManualClock(500 * S)
    model = BatteryModel(BatteryParams(gauge_update_ms=1250), clock_ns=clock)
    model.set_activity(1.0)

    def read() -> dict[str, str | None]:
        clock.now_ns += 60_000_000  # one round trip
        g = model.read()
        return dict(zip(FILES, (str(g.current_ua), str(g.voltage_uv), str(g.charge_uah))))

    probe = probe_gauge(read, clock_ns=lambda: clock.now_ns)
    assert probe.period_s == pytest.approx(1.25, rel=0.06)
    assert 3 * 1.25 <= probe.seconds <= 5 * 1.25  # stops after three new readings
    frozen = BatteryModel(BatteryParams(), GaugeFaults(stale=True), clock_ns=clock)

    def stale() -> dict[str, str | None]:
        clock.now_ns += 60_000_000
        g = frozen.read()
        return dict(zip(FILES, (str(g.current_ua), str(g.voltage_uv), str(g.charge_uah))))

    none = probe_gauge(stale, max_s=2.0, clock_ns=lambda: clock.now_ns)
    assert none.period_s is None and none.seconds >= 2.0


def test_warm_up_and_gaps_are_sized_from_the_probed_period() -> None:
    plan = EpisodePlan(
        methods=("as2d", "target-only"),
        request_cmd="run {method} {phase} {min_s} {min_ms}",
        warmups=2,
        gap_s=0.5,
        request_budget_s=10.0,
    )
    probe = GaugeProbe(period_s=1.75, readings=4, seconds=5.0, reads=100)
    sized, line = size_plan(plan, probe, 250)
    want = lead_s(1.75 + 0.05, 0.25)
    assert sized.lead_s == want >= 1.75 + 0.25 and sized.gap_s == want
    assert sized.gauge_period_s == 1.75
    assert line.startswith("gauge: updates every 1.75 s") and "gaps raised" in line
    script = render_script(sized, "/r", "/r/c.pb", "/t", "x")
    # only each method's last warm-up holds the lead; everything else gets 0
    runs = [ln for ln in script.splitlines() if "sh -c" in ln]
    assert [("2.05" in ln) for ln in runs] == [False, True, False, False, True, False]
    assert sum(f"{round(want * 1000)}" in ln for ln in runs) == 2
    # what cannot be sized says so in one line, before anything runs
    _, none = size_plan(dataclasses.replace(plan, warmups=0), probe, 250)
    assert "--warmups 0" in none and "\n" not in none
    _, budget = size_plan(dataclasses.replace(plan, request_budget_s=1.0), probe, 250)
    assert "--request-budget-s" in budget
    _, fixed = size_plan(dataclasses.replace(plan, request_cmd="run {method}"), probe, 250)
    assert "does not take {min_s}" in fixed
    same, unknown = size_plan(plan, GaugeProbe(None, 1, 8.0, 100), 250)
    assert same == plan and "unknown" in unknown


def test_thread_load_counts_threads_and_child_processes(monkeypatch) -> None:
    import types

    from device_agents.emulator import battery

    # Scripted /proc: a request process (10) with a producer child (11) that ends.
    times = iter(
        [
            {10: (1, 0.0, 0.0), 11: (10, 0.0, 0.0)},
            {10: (1, 0.2, 0.0), 11: (10, 0.1, 0.0)},  # two threads busy in 10, one in 11 /0.1s
            {10: (1, 0.4, 0.15)},  # 11 used 0.05 more, then was reaped into 10's children
        ]
    )
    monkeypatch.setattr(battery, "_cpu_times", lambda pids: next(times))
    monkeypatch.setattr("device_agents.emulator.phone._process_trees", lambda roots: {10, 11})
    phone = types.SimpleNamespace(processes={10})
    load = battery.ThreadLoad(phone, BatteryModel(clock_ns=ManualClock(0)))
    assert load.sample(0.1) == 0.0
    assert load.sample(0.1) == pytest.approx(3.0)  # three threads, not one per process
    assert load.sample(0.1) == pytest.approx(2.5)  # 0.2 own + 0.05 of the reaped child
