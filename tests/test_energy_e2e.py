"""`as2d energy` end to end against the emulated phone through the real adb server.

The phone carries the battery model (device_agents.emulator.battery.EmulatedPower): its
`perfetto` writes real traces, its gauge follows what the phone runs, and unplug/replug
move it off and back onto the adb server like a USB cable does. Requests are the real
busy-loop workload (device_agents/energy_workload.sh), pending the native runner hookup.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.cli.main import main
from as2d_cli.energy.analysis import analyse_episode, integrate_energy_j
from as2d_cli.energy.episode_records import read_episode
from as2d_cli.energy.episode_script import EpisodePlan
from as2d_cli.energy.protocol import EnergyRun, run_energy
from as2d_cli.energy.results import load_energy_result
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import UserError
from device_agents.emulator.battery import BatteryModel, BatteryParams, EmulatedPower
from device_agents.gating import GateConfig

WORKLOAD = Path(__file__).resolve().parents[1] / "device_agents" / "energy_workload.sh"
# The gate before the capture, without the phone defaults' 15 s rest and 5 s between checks.
FAST_GATE = GateConfig(rest_s=0.0, interval_s=0.0)
TIMING = [
    "--rest",
    "0",
    "--interval",
    "0",
    "--settle-s",
    "0.5",
    "--gap-s",
    "0.3",
    "--tail-s",
    "0.5",
    "--request-budget-s",
    "1.4",
    "--discharge-wait-s",
    "20",
]
TRACE_S = 0.5 + 4 * 1.4 + 3 * 0.3 + 0.5 + 1.0  # EpisodePlan.trace_duration_ms


def _args(session, out: Path, *extra: str) -> list[str]:
    return [
        "energy",
        "--phone",
        session.serial,
        "--adb-port",
        str(session.adb_port),
        "--methods",
        "as2d,target-only",
        "--method-cmd",
        "as2d={run_dir}/energy_workload.sh 700 40",
        "--method-cmd",
        "target-only={run_dir}/energy_workload.sh 900 40",
        "--push",
        str(WORKLOAD),
        "--out",
        str(out),
        *TIMING,
        *extra,
    ]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _power(session) -> EmulatedPower:
    return EmulatedPower(session.phone, BatteryModel(BatteryParams(gauge_update_ms=250))).install()


def _run_dir(out: Path) -> Path:
    (d,) = out.glob("*-energy-*")
    return d


def test_unplugged_usb_run_writes_versioned_results(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = make_emulated_phone(connection="usb")
    power = _power(s)
    events: list[str] = []
    seen_absent = threading.Event()

    # The "user": pulls the cable a moment after being told to, replugs after the trace.
    def unplug() -> None:
        events.append("unplug")
        s.phone.unplug()
        seen_absent.set()

    def replug() -> None:
        events.append("replug")
        s.phone.replug()

    def user() -> None:  # unplugs once the episode waits for it, replugs after the trace
        tmp = s.phone.fs.host_path("/data/local/tmp")
        deadline = time.monotonic() + 60
        while not list(tmp.glob("as2d-energy-*/state")) and time.monotonic() < deadline:
            time.sleep(0.05)
        unplug()
        time.sleep(TRACE_S + 3.0)
        replug()

    threading.Thread(target=user, daemon=True).start()
    code, out, err = _run(_args(s, tmp_path / "res"), capsys)
    power.stop_all()
    assert code == 0, err
    assert "Unplug the USB cable now" in err and "plug it back in" in err
    assert "Phone is back" in err and events == ["unplug", "replug"]

    d = _run_dir(tmp_path / "res")
    doc = load_energy_result(d / "energy.json")
    assert [r["method"] for r in doc["requests"]] == ["as2d", "as2d", "target-only", "target-only"]
    assert [r["phase"] for r in doc["requests"]] == ["warmup", "formal"] * 2
    assert all(r["status"] == "ok" for r in doc["requests"])
    m = {x["method"]: x for x in doc["methods"]}
    series = read_battery_series(d / "trace.perfetto-trace")
    p = -series.current_ua * series.voltage_uv * 1e-12  # W per poll: idle ≈ 1.7, busy ≈ 6.5
    again = analyse_episode(series, read_episode(d / "episode.tsv"))
    for x, y in zip(doc["requests"], again.requests):
        # Each figure comes from the trace and records kept beside it…
        assert x["energy_j"] == pytest.approx(y.energy_j)
        if x["energy_from"] == "polls":  # (no reading surely inside: the polled curve's)
            assert x["energy_j"] == pytest.approx(
                integrate_energy_j(series, x["origin_boot_ns"], x["end_boot_ns"])
            )
        # …and a busy window's mean power lies between idle and busy: 250 ms polls smear
        # the load edges, so a 0.7 s request reads well below the busy level, never idle.
        assert 1.5 * p.min() < x["mean_power_w"] <= p.max()
    for x in m.values():
        assert x["body_tokens"] == 40
    # The shorter request (700 ms of work vs 900 ms) costs less energy for the same tokens.
    # (700 ms, not less: a request must hold two 250 ms polls even when one comes late on a
    # loaded host.)
    assert m["as2d"]["energy_j"] < m["target-only"]["energy_j"]
    assert m["as2d"]["energy_vs_baseline_percent"] < 0
    # Responses hold at least the requested work (no own stamps: response = window).
    assert m["as2d"]["response_s"] >= 0.69 and m["target-only"]["response_s"] >= 0.89  # 10 ms ticks
    # The raw trace sits beside the table and reads back to the same figures' inputs.
    # The gauge updates every 250 ms on its own grid: only the first poll can still hold a
    # reading taken on the charger (the episode starts perfetto right after Discharging).
    assert series.poll_ms == 250 and (series.current_ua[1:] < 0).all()
    c = doc["cross_check"]
    k = 1 if series.current_ua[0] > 0 else 0  # a charging poll is left out of the check
    assert c["excluded_charging_samples"] == k
    i = -series.current_ua[k:]
    dt = np.diff(series.t_ns[k:]).astype(float)
    assert c["integrated_mah"] == pytest.approx(float(np.sum((i[1:] + i[:-1]) * dt) / 2 / 3.6e15))
    assert c["charge_drop_mah"] == pytest.approx(
        (series.charge_uah[k] - series.charge_uah[-1]) / 1e3
    )
    # The model's counter integrates the true load; the trace sees it through 250 ms
    # sample-and-hold polls. Each of the 8 load edges can be misplaced by ≤ 1 poll at
    # 1.15 A, i.e. ≤ 0.64 mAh on a ~2 mAh capture: the two readings agree within that.
    assert abs(c["integrated_mah"] - c["charge_drop_mah"]) <= 8 * 0.25 * 1150 / 3600
    ep = read_episode(d / "episode.tsv")
    assert len(ep.requests) == 4 and ep.meta["battery_status_at_start"] == "Discharging"
    assert "| as2d |" in out and re.search(r"results: .*energy\.json", out)

    # Re-analysis never overwrites.
    code, _, err = _run(["energy", "--from-run", str(d)], capsys)
    assert code == 2 and "never overwritten" in err and err.count("\n") == 1


def test_plugged_in_run_is_refused_and_raw_files_kept(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    # Wireless adb but the charger stays in: the phone gives up waiting for Discharging,
    # measures anyway, and the positive current must be refused, not reported.
    s = make_emulated_phone(connection="wireless")
    power = _power(s)
    argv = _args(s, tmp_path / "res", "--connection", "wireless")
    argv[argv.index("--discharge-wait-s") + 1] = "1"
    code, out, err = _run(argv, capsys)
    power.stop_all()
    assert code == 2
    (line,) = [
        ln for ln in err.splitlines() if not ln.startswith((">>> ", "energy: "))
    ]  # prompts and progress aside
    assert line.startswith("error: ") and "charging" in line and "disconnect USB" in line
    d = _run_dir(tmp_path / "res")
    assert not (d / "energy.json").exists()
    assert "positive" in (d / "refused.txt").read_text()
    assert (d / "trace.perfetto-trace").stat().st_size > 0 and (d / "raw" / "req003.out").exists()
    # Analysing the same folder again reaches the same verdict (and keeps the first one).
    code, _, err2 = _run(["energy", "--from-run", str(d)], capsys)
    assert code == 2 and "charging" in err2
    assert len(list(d.glob("refused*.txt"))) == 2


def test_wireless_run_needs_no_replug(make_emulated_phone, tmp_path: Path, capsys) -> None:
    s = make_emulated_phone(connection="wireless")
    power = _power(s)
    s.phone.schedule(0.5, s.phone.unplug)  # the charger comes off; adb stays connected
    code, out, err = _run(_args(s, tmp_path / "res", "--connection", "wireless"), capsys)
    power.stop_all()
    assert code == 0, err
    assert "Wireless adb" in err and "Unplug" not in err
    doc = load_energy_result(_run_dir(tmp_path / "res") / "energy.json")
    assert {m["method"] for m in doc["methods"]} == {"as2d", "target-only"}


def test_the_episode_ends_its_trace_instead_of_waiting_for_the_bound(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    """The request budget sizes the trace's bound for the slowest request (here about
    123 s); once its tail is recorded the episode stops perfetto (SIGTERM to the pid it
    printed), so the trace spans the episode and the host does not wait out the bound."""
    from as2d_cli.energy.results import TRACE_NAME
    from as2d_cli.energy.trace_reader import read_battery_series

    s = make_emulated_phone(connection="wireless")
    power = _power(s)
    s.phone.schedule(0.5, s.phone.unplug)
    argv = _args(s, tmp_path / "res", "--connection", "wireless", "--request-budget-s", "30")
    code, _, err = _run(argv, capsys)
    power.stop_all()
    assert code == 0, err
    d = _run_dir(tmp_path / "res")
    assert (d / "raw" / "t_trace_ended").exists()
    series = read_battery_series(d / TRACE_NAME)
    assert (series.t_ns[-1] - series.t_ns[0]) / 1e9 < 30
    assert {m["method"] for m in load_energy_result(d / "energy.json")["methods"]} == {
        "as2d",
        "target-only",
    }


def test_phone_that_is_never_unplugged_is_one_clear_error(
    make_emulated_phone, tmp_path: Path
) -> None:
    s = make_emulated_phone(connection="usb")
    power = _power(s)
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="{run_dir}/energy_workload.sh 100 5",
        settle_s=0,
        gap_s=0,
        tail_s=0,
        request_budget_s=1,
        discharge_wait_s=1,
    )
    run = EnergyRun(
        s.device(),
        plan,
        tmp_path / "res",
        "emu",
        push_files=[WORKLOAD],
        leave_timeout_s=2.0,
        gate=FAST_GATE,
    )
    said: list[str] = []
    with pytest.raises(UserError, match="still attached after 2 s.*--connection wireless"):
        run_energy(run, said.append)
    # the gauge's period first (its warm-up cannot be stretched: no {min_s}), then unplug
    assert said[0].startswith("gauge: updates every") and "does not take {min_s}" in said[0]
    assert said[1].startswith("Unplug the USB cable now")
    assert (_run_dir(tmp_path / "res") / "plan.json").exists()  # what was written is kept
    power.stop_all()


MODELS = Path(__file__).resolve().parents[1] / "as2d_cli" / "assets" / "models" / "models.json"


@pytest.mark.skipif(not MODELS.exists(), reason="bundled models not trained/committed yet")
def test_native_requests_through_the_runner_path(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    # The request is the native runner's real request path on the real bundled models,
    # run "on the phone" by the emulated phone's host-program launcher.
    import json
    import sys

    wrapper = tmp_path / "native_request.sh"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m native.energy_request "$@"\n')
    wrapper.chmod(0o755)
    s = make_emulated_phone(connection="wireless")
    # Poll at the fastest rate the config allows: a short request on small models still
    # gets several gauge readings inside its window.
    power = EmulatedPower(s.phone, BatteryModel(BatteryParams(gauge_update_ms=100))).install()
    s.phone.schedule(0.3, s.phone.unplug)
    # A window whose output runs to the cap (319 tokens): the longest request the dev split
    # offers, so the 100 ms gauge polls land several times inside each request.
    cmd = (
        "{run_dir}/native_request.sh --window dev-multilingual-000 --method {method} "
        "--result {run_dir}/result-{index}.json"
    )
    argv = [
        "energy",
        "--phone",
        s.serial,
        "--adb-port",
        str(s.adb_port),
        "--connection",
        "wireless",
        "--methods",
        "as2d,target-only",
        "--request-cmd",
        cmd,
        "--warmups",
        "0",
        "--push",
        str(wrapper),
        "--out",
        str(tmp_path / "res"),
        "--settle-s",
        "0.5",
        "--gap-s",
        "0.3",
        "--tail-s",
        "0.5",
        "--request-budget-s",
        "3",
        "--discharge-wait-s",
        "10",
        "--poll-ms",
        "100",
    ]
    code, out, err = _run(argv, capsys)
    power.stop_all()
    assert code == 0, err
    d = _run_dir(tmp_path / "res")
    doc = load_energy_result(d / "energy.json")
    for k, r in enumerate(doc["requests"]):
        res = json.loads((d / "raw" / f"result-{k}.json").read_text())
        assert res["method"] == r["method"]
        assert r["body_tokens"] == res["n_tokens"] - (1 if res["eos"] else 0)
        # The window is the request's own (stamped by the runner on the boot clock), so it
        # holds the runner's prefill + decode time and ends after target EOS.
        assert r["window_s"] * 1e3 >= res["prefill_ms"] + res["time_ms"] - 1.0
        assert r["response_s"] <= r["window_s"]
        assert r["energy_j"] > 0 and r["samples_in_window"] >= 2


def test_perfetto_failure_is_one_line_and_records_are_kept(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = make_emulated_phone(connection="wireless")
    power = _power(s)
    power.traced_enabled = False  # traced is off on this phone
    s.phone.schedule(0.3, s.phone.unplug)
    code, out, err = _run(
        _args(s, tmp_path / "res", "--connection", "wireless", "--warmups", "0"), capsys
    )
    power.stop_all()
    assert code == 3
    (line,) = [ln for ln in err.splitlines() if not ln.startswith((">>> ", "energy: "))]
    assert "perfetto failed" in line and "traced_consumer" in line and "persist.traced" in line
    raw = _run_dir(tmp_path / "res") / "raw"
    assert (raw / "perfetto.rc").read_text().strip() == "1" and (raw / "req001.out").exists()


def test_a_one_second_gauge_is_known_from_the_capture_and_the_defaults_meet_the_truth(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    # A realistic gauge: new readings once a second however often the 250 ms polls come.
    # Requests are a registered command that holds one busy worker while it sleeps, so a
    # loaded host does not change the load the gauge sees. The measuring is the default
    # (a warm-up per method, requests back to back), checked against the battery model's
    # noise-free energy over the very windows the analysis used.
    import time

    s = make_emulated_phone(connection="wireless")
    power = EmulatedPower(s.phone, BatteryModel(BatteryParams(gauge_update_ms=1000))).install()

    def req(ctx) -> int:  # type: ignore[no-untyped-def]
        with power.busy(float(ctx.argv[2])):
            time.sleep(int(ctx.argv[1]) / 1000)
        ctx.out("AS2D_REQUEST body_tokens=30\n")
        return 0

    s.phone.register_command("req", req)
    s.phone.schedule(0.3, s.phone.unplug)  # the charger comes off; adb stays connected
    argv = [
        "energy",
        "--phone",
        s.serial,
        "--adb-port",
        str(s.adb_port),
        "--connection",
        "wireless",
        "--methods",
        "as2d,target-only",
        "--method-cmd",
        "as2d=req 2500 1.3",
        "--method-cmd",
        "target-only=req 4000 1",
        "--out",
        str(tmp_path / "res"),
        "--settle-s",
        "1",
        "--tail-s",
        "1",
        "--request-budget-s",
        "6",
        "--discharge-wait-s",
        "20",
    ]
    code, out, err = _run(argv, capsys)
    power.stop_all()
    assert code == 0, err
    d = _run_dir(tmp_path / "res")
    doc = load_energy_result(d / "energy.json")
    cap = doc["capture"]
    assert cap["poll_ms"] == 250
    # The gauge's period, not the polls': 1 s (generous for polls a loaded host delays).
    assert 0.8 <= cap["gauge_period_s"] <= 1.25
    series = read_battery_series(d / "trace.perfetto-trace")
    assert cap["gauge_readings"] <= len(series) / 2  # ~4 polls per reading
    for r in doc["requests"]:
        # A window gets about one new reading per second of it, not one per poll.
        assert 1 <= r["gauge_readings_in_window"] <= r["window_s"] + 2
        assert r["samples_in_window"] >= 2 * r["gauge_readings_in_window"]
    assert "gauge:" in (d / "table.md").read_text()
    # Windows shorter than 5 gauge periods are flagged in energy.json, the table and on
    # stderr, one line each; every measured request has a ± bound, each method's the sum.
    short = [r for r in doc["requests"] if r["short_window"]]
    for r in doc["requests"]:
        assert r["short_window"] == (r["window_s"] < 5 * cap["gauge_period_s"])
        assert r["energy_bound_j"] > 0 and r["power_step_w"] > 0
    assert short  # a 2.5 s request on a ~1 s gauge
    said = [ln for ln in err.splitlines() if "shorter than 5 × the gauge period" in ln]
    assert len(said) == len(short)
    for r, ln in zip(short, said):
        assert f"at boot {r['origin_boot_ns'] / 1e9:.3f} s" in ln and ln.startswith(">>> ")
    truth = {}
    for m in doc["methods"]:
        formal = [
            r for r in doc["requests"] if r["method"] == m["method"] and r["phase"] == "formal"
        ]
        assert m["energy_bound_j"] == pytest.approx(sum(r["energy_bound_j"] for r in formal))
        truth[m["method"]] = sum(
            power.model.true_energy_j(r["origin_boot_ns"], r["end_boot_ns"]) for r in formal
        )
        # Back to back, each method's pooled energy is within 2 % of the truth, and the
        # bound covers the true error.
        assert abs(m["energy_j"] / truth[m["method"]] - 1) < 0.02, (m, truth)
        assert abs(m["energy_j"] - truth[m["method"]]) <= m["energy_bound_j"]
    # The comparison between the methods is within 1 point of the true comparison.
    (a,) = [m for m in doc["methods"] if m["method"] == "as2d"]
    true_change = (truth["as2d"] / truth["target-only"] - 1) * 100
    assert abs(a["energy_vs_baseline_percent"] - true_change) < 1.0
    assert "(short)" in (d / "table.md").read_text() and "± bound" in (d / "table.md").read_text()
