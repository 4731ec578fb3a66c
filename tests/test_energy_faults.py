"""`as2d energy` under faults: what cannot measure is refused before anything runs, a
charger at either end of the capture is refused, what the phone captured is never lost
(pulled before its run directory goes, kept on a phone that vanished until `--collect`),
and a trace cut mid-packet is read up to its last whole packet.

Phones are emulated (device_agents.emulator) with the battery model; requests are a
registered command that counts as one busy worker while it sleeps, so the tests do not
depend on an idle machine. Timings are short: a capture lasts about 2.5 s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from as2d_cli.cli.main import main
from as2d_cli.energy.capture_config import CaptureSpec, build_trace_config
from as2d_cli.energy.episode_script import EpisodePlan
from as2d_cli.energy.protocol import EnergyRun, PhoneAway, run_energy
from as2d_cli.energy.results import load_energy_result
from as2d_cli.energy.trace_reader import read_battery_series, whole_prefix
from as2d_cli.errors import DeviceError, UserError
from device_agents.emulator.battery import (
    BatteryModel,
    BatteryParams,
    BatteryRecorder,
    EmulatedPower,
    GaugeFaults,
    encode_trace,
    simulate_readings,
)
from device_agents.emulator.faults import apply_fault, force_battery_status, reattach
from device_agents.gating import GateConfig

# Polls every 100 ms (the gauge updates as fast): a 0.5 s request gets several readings.
# The gate before the capture, without the phone defaults' 15 s rest and 5 s between checks.
FAST_GATE = GateConfig(rest_s=0.0, interval_s=0.0)
TIMING = [
    "--rest",
    "0",
    "--interval",
    "0",
    "--settle-s",
    "0.3",
    "--gap-s",
    "0.2",
    "--tail-s",
    "0.3",
    "--poll-ms",
    "100",
    "--request-budget-s",
    "1",
    "--discharge-wait-s",
    "5",
    "--warmups",
    "0",
]
S = 1_000_000_000


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _errors(err: str) -> list[str]:
    return [
        ln for ln in err.splitlines() if not ln.startswith((">>> ", "energy: "))
    ]  # prompts and progress aside


def _phone(
    make_emulated_phone, connection: str = "wireless", power: bool = True, request_s: float = 0.5
):
    """A fresh phone with the battery model and a `req` command: one busy worker for
    `request_s` seconds, then the AS2D_REQUEST line."""
    s = make_emulated_phone(connection=connection)
    s.power = None
    if power:
        s.power = EmulatedPower(s.phone, BatteryModel(BatteryParams(gauge_update_ms=100))).install()

        def req(ctx) -> int:  # type: ignore[no-untyped-def]
            with s.power.busy():
                time.sleep(request_s)
            ctx.out("AS2D_REQUEST body_tokens=20\n")
            return 0

        s.phone.register_command("req", req)
    return s


def _args(s, out: Path, *extra: str, methods: str = "as2d") -> list[str]:
    return [
        "energy",
        "--phone",
        s.serial,
        "--adb-port",
        str(s.adb_port),
        "--methods",
        methods,
        "--request-cmd",
        "req {method}",
        "--out",
        str(out),
        *TIMING,
        *extra,
    ]


def _run_dirs(out: Path) -> list[Path]:
    return sorted(out.glob("*-energy-*")) if out.exists() else []


def _phone_runs(s) -> list[str]:
    return sorted(p.name for p in s.phone.fs.host_path("/data/local/tmp").glob("as2d-energy-*"))


# -- refused before anything runs ------------------------------------------------------------


@pytest.mark.parametrize(
    "fault,words",
    [
        ("no-perfetto", ["no perfetto", "/system/bin/perfetto"]),
        (
            "no-traced",
            ["traced does not run", "init.svc.traced=stopped", "setprop persist.traced.enable 1"],
        ),
        (None, ["no perfetto"]),  # a phone without the battery model has no perfetto at all
    ],
)
def test_phone_that_cannot_capture_is_refused_before_anything_is_pushed(
    make_emulated_phone, tmp_path: Path, capsys, fault: str | None, words: list[str]
) -> None:
    s = _phone(make_emulated_phone, power=fault is not None)
    if fault:
        apply_fault(s.phone, fault)
    code, _, err = _run(_args(s, tmp_path / "res", "--connection", "usb"), capsys)
    if s.power:
        s.power.stop_all()
    assert code == 2, err
    (line,) = err.splitlines()  # one line, and no prompt: nobody was asked to unplug
    assert line.startswith("error: ") and all(w in line for w in words), line
    assert _phone_runs(s) == [] and _run_dirs(tmp_path / "res") == []
    assert not any("mkdir" in h or "push" in h for h in s.phone.history)


def test_unknown_window_is_refused_before_the_phone_is_asked_anything(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = _phone(make_emulated_phone, power=False)
    bundle = tmp_path / "phone-bundle.tar.gz"
    bundle.write_bytes(b"not read")
    code, _, err = _run(
        [
            "energy",
            "--phone",
            s.serial,
            "--adb-port",
            str(s.adb_port),
            "--bundle",
            str(bundle),
            "--window",
            "no-such-window",
            "--out",
            str(tmp_path / "res"),
        ],
        capsys,
    )
    assert code == 2
    (line,) = err.splitlines()
    assert "--window no-such-window" in line and "as2d corpus list" in line
    assert s.phone.history == [] and _run_dirs(tmp_path / "res") == []


# -- a charger at either end of the capture ---------------------------------------------------


def test_full_battery_at_start_is_refused_though_current_is_negative(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = _phone(make_emulated_phone)
    s.phone.unplug()  # wireless adb: the charger is off, the current is negative…
    apply_fault(s.phone, "battery-status:Full@0")  # …but the battery says Full
    argv = _args(s, tmp_path / "res", "--connection", "wireless")
    argv[argv.index("--discharge-wait-s") + 1] = "1"
    code, _, err = _run(argv, capsys)
    s.power.stop_all()
    assert code == 2, err
    (line,) = _errors(err)
    assert "battery status Full at the start and at the end of the capture" in line
    assert "below full" in line and "unplug" in line and "positive" not in line
    (d,) = _run_dirs(tmp_path / "res")
    assert (d / "raw" / "battery_status_at_start").read_text().strip() == "Full"
    assert "status: 5" in (d / "raw" / "battery_dumpsys_at_start").read_text()
    assert "Full" in (d / "refused.txt").read_text() and not (d / "energy.json").exists()
    series = read_battery_series(d / "trace.perfetto-trace")
    assert (series.current_ua < 0).all()  # the current alone would have passed


def test_charger_at_the_end_only_is_refused(make_emulated_phone, tmp_path: Path, capsys) -> None:
    s = _phone(make_emulated_phone)
    s.phone.unplug()

    # The request ends by plugging in a weak charger: status Charging, current still negative.
    def req_then_charger(ctx) -> int:  # type: ignore[no-untyped-def]
        with s.power.busy():
            time.sleep(0.5)
        force_battery_status(s.phone, "Charging")
        ctx.out("AS2D_REQUEST body_tokens=20\n")
        return 0

    s.phone.register_command("req", req_then_charger)
    code, _, err = _run(_args(s, tmp_path / "res", "--connection", "wireless"), capsys)
    s.power.stop_all()
    assert code == 2, err
    (line,) = _errors(err)
    assert "battery status Charging at the end of the capture" in line
    assert "disconnect USB" in line and "at the start" not in line
    (d,) = _run_dirs(tmp_path / "res")
    ep = (d / "episode.tsv").read_text()
    assert "battery_status_at_start=Discharging" in ep and "battery_status_at_end=Charging" in ep


# -- what the phone wrote is pulled before its run directory goes -------------------------------


def test_run_failing_midway_pulls_everything_first(make_emulated_phone, tmp_path: Path) -> None:
    s = _phone(make_emulated_phone)
    s.phone.unplug()
    apply_fault(s.phone, "stall:hang")  # the request never ends
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="hang {method}",
        warmups=0,
        settle_s=0.2,
        gap_s=0,
        tail_s=0.2,
        request_budget_s=1,
        discharge_wait_s=5,
    )
    # The host gives up on the episode after the bounded trace (2.4 s) has ended.
    run = EnergyRun(
        s.device(),
        plan,
        tmp_path / "res",
        "emu",
        connection="wireless",
        episode_timeout_s=4.0,
        gate=FAST_GATE,
    )
    with pytest.raises(DeviceError) as info:
        run_energy(run, lambda _: None)
    s.power.stop_all()
    (d,) = _run_dirs(tmp_path / "res")
    msg = str(info.value)
    assert "did not finish within" in msg and str(d) in msg and "\n" not in msg
    raw = d / "raw"
    for name in (
        "episode.log",
        "episode.err",
        "state",
        "perfetto.rc",
        "t_trace_started",
        "req000.origin",
        "battery_status_at_start",
    ):
        assert (raw / name).exists(), name
    assert (raw / "state").read_text().strip() == "running"
    assert (d / "trace.perfetto-trace").stat().st_size > 0  # the partial trace too
    assert _phone_runs(s) == []  # removed only after it was pulled
    assert json.loads((d / "phone_run.json").read_text())["state"] == "collected"


def test_never_unplugged_pulls_episode_log_before_removing(
    make_emulated_phone, tmp_path: Path
) -> None:
    s = _phone(make_emulated_phone, connection="usb")
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="req {method}",
        warmups=0,
        settle_s=0,
        gap_s=0,
        tail_s=0,
        request_budget_s=1,
        discharge_wait_s=3,
    )
    run = EnergyRun(s.device(), plan, tmp_path / "res", "emu", leave_timeout_s=1.0, gate=FAST_GATE)
    with pytest.raises(UserError, match="still attached after 1 s") as info:
        run_energy(run, lambda _: None)
    s.power.stop_all()
    (d,) = _run_dirs(tmp_path / "res")
    assert f"what the phone wrote is in {d}" in str(info.value)
    assert (d / "raw" / "episode.log").exists()
    assert (d / "raw" / "state").read_text().strip() == "waiting-for-discharge"
    assert _phone_runs(s) == []


# -- a phone that vanishes keeps its run until collected ----------------------------------------


def _wait_done(s, run_dir: str, timeout_s: float = 20.0) -> None:
    state = s.phone.fs.host_path(run_dir) / "state"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if state.exists() and state.read_text().strip() == "done":
            return
        time.sleep(0.1)
    raise AssertionError(f"episode in {run_dir} not done")


def test_phone_vanishing_while_unplugged_is_collected_later(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = _phone(make_emulated_phone, connection="usb")
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="req {method}",
        warmups=0,
        settle_s=0.3,
        gap_s=0,
        tail_s=0.3,
        request_budget_s=1,
        discharge_wait_s=5,
    )
    said: list[str] = []

    def say(msg: str) -> None:  # the user pulls the cable when told to, and loses the phone
        said.append(msg)
        if msg.startswith("Unplug"):
            s.phone.schedule(0.2, s.phone.unplug)

    run = EnergyRun(
        s.device(), plan, tmp_path / "res", "emu", poll_ms=100, return_timeout_s=1.0, gate=FAST_GATE
    )
    with pytest.raises(PhoneAway) as info:
        run_energy(run, say)
    (first,) = _run_dirs(tmp_path / "res")
    msg = str(info.value)
    assert "did not come back within 1 s" in msg and "\n" not in msg
    assert f"as2d energy --collect {first}" in msg
    rec = json.loads((first / "phone_run.json").read_text())
    assert rec["state"] == "on-phone" and rec["identity"]["serial"] == "as2demu0001"
    assert _phone_runs(s) == [Path(rec["run_dir"]).name]  # the phone keeps it
    kept = sorted(p.name for p in first.rglob("*"))

    _wait_done(s, rec["run_dir"])  # the episode finished on battery
    s.phone.replug()
    # Running the same command again makes its own folder; the first one is untouched.
    again = EnergyRun(
        s.device(), plan, tmp_path / "res", "emu", leave_timeout_s=0.5, gate=FAST_GATE
    )
    with pytest.raises(UserError, match="still attached"):
        run_energy(again, lambda _: None)
    assert (
        len(_run_dirs(tmp_path / "res")) == 2 and sorted(p.name for p in first.rglob("*")) == kept
    )
    assert _phone_runs(s) == [Path(rec["run_dir"]).name]

    # --from-run cannot analyse what was never pulled; --collect can.
    code, _, err = _run(["energy", "--from-run", str(first)], capsys)
    assert code == 2 and "--collect" in err
    code, out, err = _run(
        ["energy", "--collect", str(first), "--adb-port", str(s.adb_port)], capsys
    )
    s.power.stop_all()
    assert code == 0, err
    doc = load_energy_result(first / "energy.json")
    assert [r["status"] for r in doc["requests"]] == ["ok"]
    assert doc["episode_meta"]["battery_status_at_end"] == "Discharging"
    assert doc["phone"]["identity"]["serial"] == "as2demu0001"
    assert (first / "raw" / "episode.log").exists() and _phone_runs(s) == []
    assert "results:" in out
    code, _, err = _run(["energy", "--collect", str(first)], capsys)
    assert code == 2 and "never overwritten" in err


def test_interrupted_host_leaves_the_run_on_the_phone(make_emulated_phone, tmp_path: Path) -> None:
    s = _phone(make_emulated_phone, connection="usb")
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="req {method}",
        warmups=0,
        settle_s=0,
        gap_s=0,
        tail_s=0,
        request_budget_s=1,
        discharge_wait_s=2,
    )
    said: list[str] = []

    def say(msg: str) -> None:  # Ctrl-C while the host waits for the cable
        said.append(msg)
        if msg.startswith("Unplug"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_energy(EnergyRun(s.device(), plan, tmp_path / "res", "emu", gate=FAST_GATE), say)
    (d,) = _run_dirs(tmp_path / "res")
    assert said[-1].startswith("Interrupted") and f"as2d energy --collect {d}" in said[-1]
    rec = json.loads((d / "phone_run.json").read_text())
    assert rec["state"] == "on-phone" and _phone_runs(s) == [Path(rec["run_dir"]).name]
    s.power.stop_all()


def test_wireless_phone_vanishing_midway_is_collected_after_reattach(
    make_emulated_phone, tmp_path: Path, capsys
) -> None:
    s = _phone(make_emulated_phone, connection="wireless")
    s.phone.unplug()
    plan = EpisodePlan(
        methods=("as2d",),
        request_cmd="req {method}",
        warmups=0,
        settle_s=0.3,
        gap_s=0,
        tail_s=0.3,
        request_budget_s=1,
        discharge_wait_s=5,
    )

    def say(msg: str) -> None:
        if msg.startswith("Wireless adb"):
            s.phone.schedule(0.3, s.phone.vanish)

    run = EnergyRun(
        s.device(),
        plan,
        tmp_path / "res",
        "emu",
        poll_ms=100,
        connection="wireless",
        return_timeout_s=1.0,
        gate=FAST_GATE,
    )
    with pytest.raises(PhoneAway, match="--collect"):
        run_energy(run, say)
    (d,) = _run_dirs(tmp_path / "res")
    rec = json.loads((d / "phone_run.json").read_text())
    _wait_done(s, rec["run_dir"])
    reattach(s.phone)
    s.connect(timeout=30)  # the adb server lists it again (a busy machine may take a while)
    code, _, err = _run(["energy", "--collect", str(d), "--adb-port", str(s.adb_port)], capsys)
    s.power.stop_all()
    assert code == 0, err
    assert load_energy_result(d / "energy.json")["requests"][0]["status"] == "ok"


# -- a trace cut mid-packet ------------------------------------------------------------------------


def _emulated_trace(tmp_path: Path) -> bytes:
    """A real trace written by the emulated phone's perfetto (its battery recorder)."""
    model = BatteryModel(BatteryParams(gauge_update_ms=100))
    model.set_plugged(False)
    cfg = build_trace_config(CaptureSpec(duration_ms=1200, poll_ms=100))
    path = tmp_path / "emulated.perfetto-trace"
    rec = BatteryRecorder(model, cfg, path, 100, ["CURRENT", "VOLTAGE", "CHARGE"], 1200)
    rec.start()
    rec.join(10)
    return path.read_bytes()


def _boundaries(data: bytes) -> list[int]:
    """End offset of every whole top-level packet."""
    out, pos = [], 0
    while pos < len(data):
        assert data[pos] == 0x0A  # field 1, length-delimited
        length, shift, k = 0, 0, pos + 1
        while True:
            b = data[k]
            length |= (b & 0x7F) << shift
            k += 1
            if not b & 0x80:
                break
            shift += 7
        pos = k + length
        out.append(pos)
    return out


def test_trace_cut_mid_packet_is_read_to_its_last_whole_packet(tmp_path: Path) -> None:
    data = _emulated_trace(tmp_path)
    ends = _boundaries(data)
    assert ends[-1] == len(data) and len(ends) >= 8
    full_path = tmp_path / "full.perfetto-trace"
    full_path.write_bytes(data)
    full = read_battery_series(full_path)
    assert full.lost_bytes == 0 and full.packets == len(ends)
    # Cut one byte into a packet's header, inside its length, mid-payload, one byte short
    # of its end, and exactly on a boundary (nothing lost).
    for k in (len(ends) - 1, len(ends) - 3, 4):
        start, end = ends[k - 1], ends[k]
        for cut in {start + 1, start + 2, (start + end) // 2, end - 1, start}:
            p = tmp_path / f"cut-{cut}.perfetto-trace"
            p.write_bytes(data[:cut])
            assert whole_prefix(data[:cut]) == start
            s = read_battery_series(p)
            assert s.lost_bytes == cut - start and s.trace_bytes == cut
            assert s.packets == k
            n = len(s)  # battery samples among the whole packets: a prefix of the full series
            assert n >= 1
            assert (s.t_ns == full.t_ns[:n]).all() and (s.current_ua == full.current_ua[:n]).all()


def _salvage_folder(
    tmp_path: Path, faults: GaugeFaults = GaugeFaults(), cut_bytes: int = 7
) -> Path:
    """A pulled run folder (one request 2–6 s into a 10 s capture) whose trace was cut in
    its last packet (`cut_bytes` before its end)."""
    t0 = 2000 * S
    rs = simulate_readings(
        BatteryParams(),
        faults,
        t0,
        250,
        10_000,
        lambda t: 1.0 if t0 + 2 * S <= t < t0 + 6 * S else 0.0,
    )
    data = encode_trace(
        rs,
        build_trace_config(CaptureSpec(duration_ms=10_000)),
        ["CURRENT", "VOLTAGE", "CHARGE", "CAPACITY_PERCENT"],
    )
    cut = len(data) - cut_bytes
    d = tmp_path / "run"
    (d / "raw").mkdir(parents=True)
    (d / "trace.perfetto-trace").write_bytes(data[:cut])
    plan = EpisodePlan(methods=("as2d",), request_cmd="req", warmups=0)
    from dataclasses import asdict

    (d / "plan.json").write_text(
        json.dumps(
            {"plan": asdict(plan), "poll_ms": 250, "duration_ms": 10_000, "connection": "usb"}
        )
    )
    files = {
        "req000.origin": "2002.00 1\n",
        "req000.end": "2006.00 1\n",
        "req000.rc": "0\n",
        "req000.out": "AS2D_REQUEST body_tokens=40\n",
        "battery_status_at_start": "Discharging\n",
        "battery_status_at_end": "Discharging\n",
    }
    for name, text in files.items():
        (d / "raw" / name).write_text(text)
    return d


def test_cut_trace_is_analysed_and_the_loss_is_said(tmp_path: Path, capsys) -> None:
    d = _salvage_folder(tmp_path)
    lost = read_battery_series(d / "trace.perfetto-trace").lost_bytes
    assert lost > 0
    code, out, err = _run(["energy", "--from-run", str(d)], capsys)
    assert code == 0, err
    assert (
        f"cut mid-packet: {lost} of" in err and "bytes after its last whole packet were lost" in err
    )
    doc = load_energy_result(d / "energy.json")
    assert doc["capture"]["trace_lost_bytes"] == lost
    assert doc["requests"][0]["status"] == "ok" and doc["requests"][0]["energy_j"] > 0
    assert f"the last {lost} of" in (d / "table.md").read_text()


def test_flipped_sign_gauge_is_corrected_and_said(tmp_path: Path, capsys) -> None:
    # The gauge reports discharge current positive; the status said Discharging and the
    # charge counter fell: the run is measured, and the correction is said and stored.
    d = _salvage_folder(tmp_path, GaugeFaults(current_sign=-1), cut_bytes=0)
    assert (read_battery_series(d / "trace.perfetto-trace").current_ua > 0).all()
    code, out, err = _run(["energy", "--from-run", str(d)], capsys)
    assert code == 0, err
    said = [ln for ln in err.splitlines() if "sign convention, not a charger" in ln]
    assert len(said) == 1 and "Discharging" in said[0]
    doc = load_energy_result(d / "energy.json")
    assert doc["capture"]["current_sign_corrected"] is True
    assert "sign convention" in doc["capture"]["current_sign_note"]
    r = doc["requests"][0]
    assert r["status"] == "ok" and 5.0 < r["mean_power_w"] < 7.5  # one worker ≈ 6 W
    assert "sign convention" in (d / "table.md").read_text()


# -- fault specs ------------------------------------------------------------------------------------


def test_energy_fault_specs(make_emulated_phone) -> None:
    s = make_emulated_phone(connection="wireless")
    dev = s.device()
    assert (
        apply_fault(s.phone, "battery-status:Not-charging@0")
        == "the battery reports Not charging from 0 s"
    )
    assert (
        dev.shell(["cat", "/sys/class/power_supply/battery/status"]).stdout.strip()
        == "Not charging"
    )
    assert "status: 4" in dev.shell(["dumpsys", "battery"]).stdout
    apply_fault(s.phone, "no-traced")
    assert dev.shell(["getprop", "persist.traced.enable"]).stdout.strip() == "0"
    apply_fault(s.phone, "no-perfetto")
    EmulatedPower(s.phone).install()  # the model installed after the fault keeps it
    assert dev.shell(["perfetto", "--version"]).exit_code == 127
    assert dev.shell(["getprop", "init.svc.traced"]).stdout.strip() == "stopped"
    with pytest.raises(UserError, match="bad --fault.*battery-status:STATUS@T"):
        apply_fault(s.phone, "battery-status:Weird@0")
    with pytest.raises(UserError, match="forms:.*unplug@T.*no-perfetto"):
        apply_fault(s.phone, "explode")
    s.phone.as2d_power.stop_all()
