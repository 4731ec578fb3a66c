"""Device measurements stop when their conditions break (issue 45, item 4).

- `as2d energy` runs under the gate and the 1 Hz monitor, records both in energy.json, and
  a core going offline mid-run stops it in one line with the finished requests kept — seen
  by the host's monitor (wireless) or by the episode's own checks (USB, unplugged).
- A stream whose monitor trips stops (a local runner at once, a phone's before its next
  block); blocks that ran after the trip are marked degraded and "keeps pace" is never
  judged over them.
- Calibrate's resume cannot measure a step twice: a step's samples and its done mark are
  one file put in place atomically; a process killed anywhere (SIGKILL, SIGINT) resumes
  without double samples.
- A phone that comes back under another adb serial is found by its hardware serial (the
  profile lookup of `eval --phone NEW_SERIAL`), and printed resume commands name it by
  what it is.

Faults are set by the tests (emulated phones, a host whose cores the test takes offline),
and every wait is on an event, never on the machine being quick.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from as2d_cli.errors import DeviceError
from device_agents.base import CpuState
from device_agents.gating import GateConfig
from device_agents.local import LocalHost
from device_agents.monitor import CoreMonitor

ROOT = Path(__file__).resolve().parents[1]
FAST_GATE = GateConfig(rest_s=0.0, interval_s=0.0)  # the phone gate without its waits


class _FlakyHost(LocalHost):
    """This host, with a core the test takes offline (``drop.set()``) or the whole device
    unreachable (``away.set()``): what the monitor sees, not what the host does."""

    def __init__(self, core: int = 1) -> None:
        super().__init__()
        self.core = core
        self.drop = threading.Event()
        self.away = threading.Event()

    def cpu_state(self) -> CpuState:
        if self.away.is_set():
            raise DeviceError("the test took the device away")
        state = super().cpu_state()
        if not self.drop.is_set():
            return state
        cores = tuple(
            dataclasses.replace(c, online=False) if c.cpu == self.core else c for c in state.cores
        )
        return dataclasses.replace(state, cores=cores)


def _wait(cond: Any, timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# -- the monitor ------------------------------------------------------------------------------


def test_the_monitor_names_its_last_good_sample_and_tolerates_a_device_away() -> None:
    host = _FlakyHost()
    if len(host.cpu_state().cores) < 2:
        pytest.skip("needs a host with two cores")
    mon = CoreMonitor(host, 0.02, away_ok=True).start()
    _wait(lambda: len(mon.samples) >= 2, what="two samples")
    host.away.set()  # unplugged: recorded as a gap, not a failure
    _wait(lambda: bool(mon.gaps), what="a gap")
    assert not mon.tripped.is_set()
    host.away.clear()
    seen = len(mon.samples)
    _wait(lambda: len(mon.samples) > seen, what="sampling again")
    good = mon.samples[-1].wall_time
    host.drop.set()
    assert mon.tripped.wait(30)
    mon.stop()
    f = mon.failure
    assert f is not None and f.kind == "core_offline" and f.detail["offline"] == [1]
    assert good <= f.detail["last_good_wall_time"] < f.wall_time
    rec = mon.record()
    assert rec["gaps"] and rec["gaps"][0]["from_s"] <= rec["gaps"][0]["to_s"]


# -- calibrate: a step's samples and its done mark are one commit -------------------------------

_CALIBRATE = r"""
import json, os, signal, sys, time
from pathlib import Path
from as2d_cli.calibration.plan import Step
from as2d_cli.calibration.run import _Partial, _run_steps, _StepRun
from device_agents.gating import GateConfig
from device_agents.local import LocalHost

folder, log, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
STEPS, PER_STEP, DELAY = 12, 5, 0.02
steps = [Step(f"s{i}", f"step {i}", {"op": "fake", "i": i}, 1.0) for i in range(STEPS)]
me = str(os.getpid())


def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


class Runner:
    def call(self, cmd, on_event=None):
        note(f"start s{cmd['i']} {me}")
        for r in range(PER_STEP):
            time.sleep(DELAY)
            on_event({"event": "sample", "figure": "fake", "rep": r, "attempt": me})
        return {"event": "calibrated"}

    def close(self):
        pass


if mode in ("before-link", "after-link"):  # SIGKILL at step s2's commit
    real_link = os.link

    def link(src, dst, *a, **k):
        if str(dst).endswith("-s2.json"):
            if mode == "before-link":  # its samples written whole, not yet in place
                os.kill(os.getpid(), signal.SIGKILL)
            real_link(src, dst, *a, **k)
            os.kill(os.getpid(), signal.SIGKILL)  # in place: before anything else runs
        return real_link(src, dst, *a, **k)

    os.link = link

partial = _Partial(folder)
folder.mkdir(parents=True, exist_ok=True)
gate = GateConfig(rest_s=0.0, interval_s=0.0, checks=1, core=0, min_ceiling_khz=None,
                  max_temp_c=None)
_run_steps(_StepRun(LocalHost(), partial, gate, lambda d, **kw: Runner(), {}, {}, None, 1.0),
           steps, partial.done())
note("finished")
"""


def _calibrate(tmp_path: Path, mode: str = "run") -> subprocess.Popen:
    script = tmp_path / "calibrate_steps.py"
    script.write_text(_CALIBRATE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "partial"), str(tmp_path / "log"), mode],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _starts(tmp_path: Path) -> list[tuple[str, str]]:
    log = tmp_path / "log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [tuple(x.split()[1:3]) for x in lines if x.startswith("start ")]  # type: ignore[misc]


def _check_committed_once(tmp_path: Path) -> dict[str, str]:
    """Every step committed once, with all its samples from one measurement, and no step
    measured again after its commit. Returns step → the attempt that was committed."""
    from as2d_cli.calibration.run import _Partial

    partial = _Partial(tmp_path / "partial")
    done = partial.done()
    assert done == [f"s{i}" for i in range(12)]
    committed: dict[str, str] = {}
    for key in done:
        rows = [s for s in partial.samples() if s["step"] == key]
        assert [s["rep"] for s in rows] == list(range(5)), key  # once, whole
        assert len({s["attempt"] for s in rows}) == 1, key
        committed[key] = rows[0]["attempt"]
    starts = _starts(tmp_path)
    for key, attempt in committed.items():
        # the committed measurement was the step's last: nothing measured it again
        assert [a for k, a in starts if k == key][-1] == attempt, key
    return committed


@pytest.mark.parametrize("mode", ["before-link", "after-link"])
def test_calibrate_killed_at_a_step_commit_never_measures_it_twice(
    tmp_path: Path, mode: str
) -> None:
    """SIGKILL between a step's samples (written whole to a temporary file) and its done
    mark (the file linked into place), and right after the mark: the resume measures the
    step again only in the first case, and keeps its samples once either way."""
    first = _calibrate(tmp_path, mode)
    assert first.wait(120) == -signal.SIGKILL
    steps_dir = tmp_path / "partial" / "steps"
    committed = sorted(p.name for p in steps_dir.glob("[0-9]*.json"))
    if mode == "before-link":
        assert committed == ["0000-s0.json", "0001-s1.json"]
        assert any(p.name.endswith(".tmp") for p in steps_dir.iterdir())  # the killed write
    else:
        assert committed == ["0000-s0.json", "0001-s1.json", "0002-s2.json"]
    resumed = _calibrate(tmp_path)
    assert resumed.wait(120) == 0
    got = _check_committed_once(tmp_path)
    s2 = [a for k, a in _starts(tmp_path) if k == "s2"]
    assert len(s2) == (2 if mode == "before-link" else 1)
    assert got["s2"] == (str(resumed.pid) if mode == "before-link" else str(first.pid))


@pytest.mark.slow  # how many kills land mid-run depends on the machine's load; benchmarks/kill_anywhere.py runs it
def test_calibrate_killed_at_random_points_never_measures_a_step_twice(tmp_path: Path) -> None:
    """SIGKILL and SIGINT at random moments — inside a step, at its commit, between steps —
    then the same command again, until it finishes: every step's samples are committed
    once, from its last measurement. Each kill waits for the run to have started a random
    step (not for a time), so it lands mid-run however fast the machine is."""
    rng = random.Random(45)
    killed = 0
    for attempt in range(40):
        proc = _calibrate(tmp_path)
        if attempt < 12:
            want = len(_starts(tmp_path)) + rng.randint(1, 2)
            deadline = time.monotonic() + 120
            while proc.poll() is None and len(_starts(tmp_path)) < want:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.15))  # a step takes about 0.1 s
            proc.send_signal(rng.choice([signal.SIGKILL, signal.SIGINT]))
        code = proc.wait(120)
        killed += code != 0
        if (tmp_path / "log").exists() and "finished" in (tmp_path / "log").read_text():
            break
    else:
        raise AssertionError("the calibration never finished")
    assert killed >= 4  # kills landed mid-run (the last ones may find it finished)
    _check_committed_once(tmp_path)


def test_a_folder_an_older_version_left_resumes_without_the_uncommitted_step(
    tmp_path: Path,
) -> None:
    """samples.jsonl + done.json (the old layout), killed between a step's samples and its
    mark: the done steps become committed files; the unmarked step's samples are dropped
    (with a line the kill tore), so the resume measures it once."""
    from as2d_cli.calibration.run import _Partial

    folder = tmp_path / "partial"
    folder.mkdir()
    rows = [
        *({"step": "a", "rep": r} for r in range(2)),
        *({"step": "b", "rep": r} for r in range(2)),  # killed before b's mark
    ]
    (folder / "samples.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"step": "b", "re'
    )
    (folder / "done.json").write_text(json.dumps(["a"]))
    p = _Partial(folder)
    assert p.done() == ["a"] and [s["step"] for s in p.samples()] == ["a", "a"]
    assert not (folder / "done.json").exists() and not (folder / "samples.jsonl").exists()
    p.commit("b", [{"step": "b", "rep": 0}, {"step": "b", "rep": 1}])
    assert _Partial(folder).done() == ["a", "b"]
    assert [s["step"] for s in _Partial(folder).samples()] == ["a", "a", "b", "b"]


def test_a_resume_command_names_the_phone_by_what_it_is() -> None:
    from as2d_cli.calibration.run import resume_command
    from as2d_cli.models.prompting import PromptSpec
    from device_agents.identity import DeviceIdentity

    wireless = DeviceIdentity("k70", "adb", "23117RK66C", "as2demu0001", "192.168.1.20:41235")
    line = resume_command(
        wireless, quick=True, window=None, models=None, prompt=None, cores=([7], [2, 3, 4])
    )
    assert "`as2d calibrate --phone k70 --quick --verifier-cores 7 --producer-cores 2,3,4`" in line
    other = DeviceIdentity("SM-X", "adb", "SM-X", "R58M123ABC", "10.0.0.5:5555")
    line = resume_command(
        other,
        quick=False,
        window="dev-read-001",
        models=Path("pairs/x y"),
        prompt=PromptSpec(task="translate", language="de"),
    )
    assert "--phone R58M123ABC " in line and "10.0.0.5" not in line  # the hardware serial
    assert "--models 'pairs/x y'" in line and "--task translate --language de" in line
    assert "--os-placement" in line  # no cores: the OS placed the work


# -- energy under the gate and the monitor ------------------------------------------------------


def _energy_phone(make_emulated_phone: Any, connection: str) -> Any:
    from device_agents.emulator.battery import BatteryModel, BatteryParams, EmulatedPower

    s = make_emulated_phone(connection=connection)
    s.power = EmulatedPower(s.phone, BatteryModel(BatteryParams(gauge_update_ms=100))).install()
    return s


def _plan(**kw: Any) -> Any:
    from as2d_cli.energy.episode_script import EpisodePlan

    base: dict[str, Any] = dict(
        methods=("as2d", "target-only"),
        request_cmd="req {method} {index} {run_dir}",
        formal_repeats=2,
        warmups=0,
        settle_s=0.3,
        gap_s=0.0,
        tail_s=0.3,
        request_budget_s=2.5,
        discharge_wait_s=5,
    )
    base.update(kw)
    return EpisodePlan(**base)


def _request(s: Any, fault_at: int, fault: Any, seconds: float = 0.6) -> None:
    """`req METHOD INDEX RUN_DIR`: one busy worker for `seconds`, then its AS2D_REQUEST
    line; request `fault_at` calls ``fault(run_dir)`` first."""

    def req(ctx: Any) -> int:
        index, run_dir = int(ctx.argv[2]), ctx.argv[3]
        with s.power.busy():
            if index == fault_at:
                fault(run_dir)
            time.sleep(seconds)
        ctx.out("AS2D_REQUEST body_tokens=20\n")
        return 0

    s.phone.register_command("req", req)


def _one_run_dir(out: Path) -> Path:
    (d,) = sorted(out.glob("*-energy-*"))
    return d


def test_energy_stops_when_the_monitor_sees_a_core_go_offline(
    make_emulated_phone: Any, tmp_path: Path
) -> None:
    """Wireless: the host's 1 Hz monitor (here every 0.1 s) sees CPU5 go offline during
    the second request and come back before it ends (so the episode's own checks see
    nothing): the episode skips the rest, the command stops in one line, and the first
    request's figures are kept in energy.json with the gate and the monitor's record."""
    from as2d_cli.energy.protocol import EnergyRun, run_energy
    from as2d_cli.energy.results import load_energy_result

    s = _energy_phone(make_emulated_phone, "wireless")
    s.phone.unplug()  # wireless adb: the charger is off, the phone stays reachable

    def blip(run_dir: str) -> None:  # offline until the host has told the episode to stop
        s.phone.set_core_online(5, False)
        stop = s.phone.fs.host_path(run_dir) / "stop.host"
        _wait(stop.exists, what="the host's stop file")
        s.phone.set_core_online(5, True)

    _request(s, 1, blip)
    run = EnergyRun(
        s.device(),
        _plan(),
        tmp_path / "res",
        "k70",
        poll_ms=100,
        connection="wireless",
        gate=FAST_GATE,
        monitor_interval_s=0.1,
    )
    said: list[str] = []
    with pytest.raises(DeviceError) as info:
        run_energy(run, said.append)
    s.power.stop_all()
    d = _one_run_dir(tmp_path / "res")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("energy stopped: CPU5 went offline on "), msg
    assert "during request 2/4 (as2d formal)" in msg and str(d / "energy.json") in msg
    assert "the 1 request(s) measured before it are kept" in msg
    doc = load_energy_result(d / "energy.json")
    assert doc["status"] == "stopped"
    statuses = [r["status"].split(":")[0] for r in doc["requests"]]
    assert statuses == ["ok", "stopped", "not run", "not run"]
    first = doc["requests"][0]
    assert first["energy_j"] > 0 and first["body_tokens"] == 20
    m = {x["method"]: x for x in doc["methods"]}
    assert m["as2d"]["status"] == "ok" and m["as2d"]["measured_requests"] == 1
    assert m["target-only"]["status"].startswith("stopped: none of its 2 formal")
    cond = doc["conditions"]
    assert cond["gate"]["passed"] and cond["gate"]["config"]["rest_s"] == 0.0
    assert cond["cores_online"] == "0-7"
    assert cond["monitor"]["failure"]["kind"] == "core_offline"
    assert cond["monitor"]["failure"]["detail"]["offline"] == [5]
    assert len(cond["monitor"]["samples"]) >= 2
    stop = cond["stopped"]
    assert stop["by"] == "host" and stop["at_request"] == 1
    assert stop["boundary_boot_ns"] is not None
    assert first["end_boot_ns"] <= stop["boundary_boot_ns"] < doc["requests"][1]["end_boot_ns"]
    assert doc["files"]["gate"] == "gate.json" and doc["files"]["monitor"] == "monitor.json"
    table = (d / "table.md").read_text()
    assert "| as2d | 2 | stopped |" in table and "| target-only | 1 | not run |" in table


def test_energy_on_usb_stops_on_the_episodes_own_check(
    make_emulated_phone: Any, tmp_path: Path
) -> None:
    """USB: while the cable is out the host cannot see the phone; CPU6 going offline during
    the third request is caught by the episode's check after it: the third is not a
    measurement, the fourth does not run, the first two are kept."""
    from as2d_cli.energy.protocol import EnergyRun, run_energy
    from as2d_cli.energy.results import load_energy_result

    s = _energy_phone(make_emulated_phone, "usb")
    _request(s, 2, lambda _rd: s.phone.set_core_online(6, False))

    def user(msg: str) -> None:  # pulls the cable when told, plugs it back when it is done
        if msg.startswith("Unplug"):
            s.phone.schedule(0.2, s.phone.unplug)
        if msg.startswith("Unplugged"):

            def back() -> None:
                (rd,) = s.phone.fs.host_path("/data/local/tmp").glob("as2d-energy-*")
                _wait(lambda: (rd / "state").read_text().strip() == "done", 120, "done")
                s.phone.set_core_online(6, True)
                s.phone.replug()

            threading.Thread(target=back, daemon=True).start()

    run = EnergyRun(s.device(), _plan(), tmp_path / "res", "k70", poll_ms=100, gate=FAST_GATE)
    with pytest.raises(DeviceError) as info:
        run_energy(run, user)
    s.power.stop_all()
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith("energy stopped: CPU6 went offline (online 0-5,7, the gate saw 0-7)")
    assert "during request 3/4 (target-only formal)" in msg
    assert "the 2 request(s) measured before it are kept" in msg
    doc = load_energy_result(_one_run_dir(tmp_path / "res") / "energy.json")
    statuses = [r["status"].split(":")[0] for r in doc["requests"]]
    assert statuses == ["ok", "ok", "stopped", "not run"]
    assert doc["conditions"]["stopped"]["by"] == "phone"
    assert doc["conditions"]["monitor"]["gaps"]  # the phone was away from the host


def test_energy_is_refused_in_one_line_when_the_gate_fails(
    make_emulated_phone: Any, tmp_path: Path
) -> None:
    from as2d_cli.energy.protocol import EnergyRun, run_energy

    s = _energy_phone(make_emulated_phone, "wireless")
    s.phone.set_core_online(3, False)
    run = EnergyRun(s.device(), _plan(), tmp_path / "res", "k70", gate=FAST_GATE)
    with pytest.raises(DeviceError, match=r"^gate failed: .*CPU3 offline.*nothing was measured"):
        run_energy(run, lambda _m: None)
    s.power.stop_all()
    assert not (tmp_path / "res").exists()  # nothing made: no run folder, nothing pushed
    assert not list(s.phone.fs.host_path("/data/local/tmp").glob("as2d-energy-*"))


# -- streams ---------------------------------------------------------------------------------


def _stream_outcome(n: int, degraded_from: int | None, tripped: bool) -> Any:
    """A stream of ``n`` fast blocks (each done in 0.5 s of its 4 s interval)."""
    from as2d_cli.stream.run import StreamOutcome

    blocks = [
        {
            "block": i,
            "epoch": i // 3,
            "audio_start_s": 4.0 * i,
            "audio_end_s": 4.0 * (i + 1),
            "arrival_s": 4.0 * (i + 1),
            "start_s": 4.0 * (i + 1),
            "encoder_s": 0.1,
            "prefill_s": 0.1,
            "decode_s": 0.3,
            "finish_s": 4.0 * (i + 1) + 0.5 + (2.0 if degraded_from and i >= degraded_from else 0),
            "tokens": [5, 5, 2],
            "eos": True,
            "capped": False,
            "summary": {},
            "text": "x",
        }
        for i in range(n)
    ]
    failure = {"kind": "core_offline", "message": "CPU5 went offline"} if tripped else None
    return StreamOutcome(
        start={"wall_time": 100.0, "warmup_s": 1.0, "blocks": n},
        blocks=blocks,
        streamed=None if tripped else {"drained_s": 4.0 * n + 1},
        monitor={"samples": [], "failure": failure},
        stopped="CPU5 went offline" if tripped else None,
        degraded_from=degraded_from,
    )


def _write(folder: Path, outcome: Any) -> dict:
    from as2d_cli.stream.results import write_stream

    return write_stream(
        folder,
        outcome,
        settings={"block_s": 4.0, "context_s": 12.0, "source_lifetime": "arrival"},
        recording={},
        measurement={"device": {"name": "k70"}},
        command="as2d stream",
        label="As²d",
    )


def test_keeping_pace_is_never_judged_over_degraded_blocks(tmp_path: Path) -> None:
    clean = _write(tmp_path / "a", _stream_outcome(9, None, False))
    assert clean["metrics"]["keeps_pace"] is True  # the same blocks, conditions held
    assert "| Keeps pace" in (tmp_path / "a" / "table.md").read_text()
    doc = _write(tmp_path / "b", _stream_outcome(9, 6, True))
    m = doc["metrics"]
    assert m["blocks"] == 6 and m["degraded_blocks"] == 3 and m["keeps_pace"] is None
    assert m["conditions_held"] is False and m["resource_rtf"] is None
    assert [b["degraded"] for b in doc["blocks"]] == [False] * 6 + [True] * 3
    assert m["mean_processing_s"] == pytest.approx(0.5)  # the degraded blocks are left out
    table = (tmp_path / "b" / "table.md").read_text()
    row = next(ln for ln in table.splitlines() if ln.startswith("| Keeps pace"))
    assert "yes" not in row and "not judged" in row and "3 later block(s)" in row
    csv = (tmp_path / "b" / "blocks.csv").read_text().splitlines()
    assert csv[0].split(",").count("degraded") == 1
    # The monitor tripped with no block degraded (it stopped between blocks): not judged.
    doc = _write(tmp_path / "c", _stream_outcome(9, None, True))
    assert doc["metrics"]["keeps_pace"] is None and doc["metrics"]["degraded_blocks"] == 0


def test_a_local_stream_stops_at_once_when_a_core_goes_offline(tmp_path: Path) -> None:
    from as2d_cli.launch.host import open_runner
    from as2d_cli.stream.recording import corpus_recording
    from as2d_cli.stream.run import StreamHooks, run_stream, settings_for
    from device_agents.measurement import prepare

    host = _FlakyHost()
    if len(host.cpu_state().cores) < 2:
        pytest.skip("needs a host with two cores")
    m = dataclasses.replace(prepare("local"), device=host)
    settings = settings_for(
        "target-only",
        budget=7,
        block_s=1.0,
        context_s=2.0,
        lifetime="arrival",
        source="drafter",
        check=False,
        clock="virtual",
    )

    def on_block(b: dict) -> None:
        if b["block"] == 1:
            host.drop.set()

    rec = corpus_recording(0.5)  # 30 s: 30 blocks, far more than run before the stop
    out = run_stream(
        m,
        rec,
        settings,
        tmp_path,
        open_runner=open_runner,
        hooks=StreamHooks(on_block=on_block),
        monitor_interval_s=0.05,
    )
    assert out.stopped is not None and out.stopped.startswith("CPU1 went offline")
    assert out.start is not None and len(out.blocks) < out.start["blocks"]
    # every block that reached the host after the core was dropped is degraded
    assert out.degraded_from is not None and out.degraded_from <= 2
    doc = _write(tmp_path, out)
    assert all(b["degraded"] for b in doc["blocks"][out.degraded_from :])
    assert doc["status"] == "stopped"
    assert doc["metrics"] is None or doc["metrics"]["keeps_pace"] is None


@pytest.fixture
def py_phone(make_emulated_phone: Any) -> Any:
    from device_agents.emulator.python import enable_python

    s = make_emulated_phone()
    enable_python(s.phone)
    return s


def test_a_phone_stream_stops_before_its_next_block_when_a_core_goes_offline(
    py_phone: Any, tmp_path: Path
) -> None:
    """The phone's runner runs in file mode (the host cannot kill it): the monitor's trip
    writes the stop file beside its run directory and the runner ends before its next
    block. Blocks that reached the host after the trip are degraded; no verdict on pace."""
    from as2d_cli.launch.host import open_runner
    from as2d_cli.launch.payload import choose_launcher
    from as2d_cli.stream.recording import corpus_recording
    from as2d_cli.stream.run import StreamHooks, run_stream, settings_for
    from device_agents.measurement import prepare

    m = prepare(py_phone.serial, adb_port=py_phone.adb_port)
    m = dataclasses.replace(m, gate=dataclasses.replace(m.gate, rest_s=0.0, interval_s=0.05))
    launcher = choose_launcher(m.device)

    def on_phone(device: Any, models: Any, **kw: Any) -> Any:
        return open_runner(device, models, launcher=launcher, **kw)

    settings = settings_for(
        "target-only",
        budget=7,
        block_s=1.0,
        context_s=2.0,
        lifetime="arrival",
        source="drafter",
        check=False,
        clock="real",  # paced: the stream cannot end before the host has seen a block
    )
    tripped_at: list[int] = []

    def on_block(b: dict) -> None:  # the host has seen a block: take a core away
        if not tripped_at:
            tripped_at.append(b["block"])
            py_phone.phone.set_core_online(7, False)

    out = run_stream(
        m,
        corpus_recording(20 / 60),
        settings,
        tmp_path,
        open_runner=on_phone,
        hooks=StreamHooks(on_block=on_block),
        monitor_interval_s=0.2,
    )
    assert out.stopped is not None and out.stopped.startswith("CPU7 went offline"), out.stopped
    assert out.start is not None and len(out.blocks) < out.start["blocks"]  # it stopped
    doc = _write(tmp_path, out)
    assert doc["status"] == "stopped" and doc["monitor"]["failure"]["kind"] == "core_offline"
    if out.degraded_from is not None:
        assert all(b["degraded"] for b in doc["blocks"][out.degraded_from :])
    assert doc["metrics"] is None or doc["metrics"]["keeps_pace"] is None
    row = next(
        (ln for ln in (tmp_path / "table.md").read_text().splitlines() if "Keeps pace" in ln), ""
    )
    assert "yes" not in row
    # The stop file's folder is gone with the run.
    assert not list(py_phone.phone.fs.host_path("/data/local/tmp").glob("as2d-streamstop-*"))


# -- a phone that comes back under another adb serial ------------------------------------------


def _profile(folder: Path, name: str, created: str, **device: str) -> Path:
    doc = yaml.safe_load((ROOT / "tests" / "data" / "example-profile.yaml").read_text())
    doc["synthetic"] = False
    doc["created"] = created
    doc["device"] = {"name": name, **device}
    path = folder / f"{name}-{created.replace(':', '')}.profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_phone_back_under_another_adb_serial_is_found_by_its_hardware_serial(
    make_emulated_phone: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calibrated as 127.0.0.1:OLD, the phone returns as another adb serial with the same
    ro.serialno: `eval --phone NEW_SERIAL` finds its profile, never that of another phone
    that once had NEW_SERIAL, and the name a resume command prints still finds it."""
    from as2d_cli.evaluate.inputs import find_profile
    from device_agents.identity import attached_identity, find_attached
    from device_agents.registry import resolve_phone

    old = make_emulated_phone()  # hardware serial as2demu0001
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(old.adb_port))
    cal = tmp_path / "calibrations"
    cal.mkdir()
    mine = _profile(cal, "k70", "2026-12-01T10:00:00Z", serial="as2demu0001", connection=old.serial)
    old.stop()
    new = make_emulated_phone()  # the same phone under a new adb serial
    assert new.serial != old.serial
    # Another phone was once reachable as the new serial (an adb port reused), measured later.
    _profile(cal, "mi14", "2026-12-02T10:00:00Z", serial="other0002", connection=new.serial)
    assert find_profile(new.serial, cal) == mine
    ident = attached_identity(new.serial)
    assert ident is not None and ident.serial == "as2demu0001" and ident.connection == new.serial
    assert ident.phone_option == "k70"
    assert resolve_phone(ident.phone_option).serial == new.serial
    found = find_attached("as2demu0001", new.adb_port, prefer=old.serial)
    assert found is not None and found.serial == new.serial
    assert attached_identity(old.serial) is None  # gone: no lookup by a stale serial
