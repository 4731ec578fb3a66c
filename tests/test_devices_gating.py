"""Gating (D.2.3) and the 1 Hz monitor against the emulated phone, with injected sleeps
and short intervals so the protocol's 15 s / 5 s / 1 s run in milliseconds."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

import device_agents
from device_agents.gating import GateConfig, GateFailed, require_gate, run_gate, show_gate
from device_agents.local import LocalHost
from device_agents.monitor import BatchStopped, CoreMonitor, run_batch

FAST = GateConfig(rest_s=0.0, interval_s=0.0)
GATE_SCHEMA = json.loads((Path(device_agents.__file__).parent / "gate.schema.json").read_text())


def test_default_gate_is_the_papers_protocol(emulated_phone) -> None:
    slept: list[float] = []
    result = run_gate(emulated_phone.device(), sleep=slept.append)
    assert result.passed, result.failure
    assert slept == [15.0, 5.0]  # rest, then the gap between the two checks
    assert [o.check for o in result.observations] == [
        "rest",
        "temperature",
        "cores_online",
        "ceiling",
        "cores_online",
        "ceiling",
    ]
    temp = result.observations[1]
    assert temp.ok and temp.detail == {"sensor": "battery", "temp_c": 31.0, "max_c": 40.0}
    ceilings = [o for o in result.observations if o.check == "ceiling"]
    assert [o.detail["core"] for o in ceilings] == [4, 4]
    assert all(
        o.detail["min_khz"] == 1881600 and o.detail["ceiling_khz"] == 3148800 for o in ceilings
    )
    record = json.loads(json.dumps(result.to_dict()))  # JSON-serialisable as stored
    assert record["passed"] and len(record["observations"]) == 6
    jsonschema.validate(record, GATE_SCHEMA)


def test_gate_fails_when_a_core_is_offline(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.set_core_online(5, False)
    with pytest.raises(GateFailed, match=r"CPU5 offline .*\(7/8 online\)") as err:
        require_gate(session.device(), FAST, sleep=lambda s: None)
    obs = err.value.result.observations
    assert [o.check for o in obs] == ["rest", "temperature", "cores_online"]
    jsonschema.validate(json.loads(json.dumps(err.value.result.to_dict())), GATE_SCHEMA)
    assert obs[-1].ok is False and obs[-1].detail["offline"] == [5]


def test_gate_fails_on_a_low_ceiling_at_the_first_check(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.set_ceiling(4, 1_497_600)
    result = run_gate(session.device(), FAST, sleep=lambda s: None)
    assert not result.passed
    assert "1.4976 GHz is below 1.8816 GHz" in (result.failure or "")
    assert [o.check for o in result.observations][-1] == "ceiling"
    assert result.observations[-1].detail["check"] == 1


def test_gate_fails_when_the_ceiling_drops_between_the_two_checks(make_emulated_phone) -> None:
    session = make_emulated_phone()
    config = replace(FAST, interval_s=5.0)

    def sleep(seconds: float) -> None:
        if seconds == 5.0:  # the interval: the phone throttles meanwhile
            session.phone.set_ceiling(4, 1_000_000)

    result = run_gate(session.device(), config, sleep=sleep)
    ceilings = [o for o in result.observations if o.check == "ceiling"]
    assert [o.ok for o in ceilings] == [True, False]
    assert ceilings[1].detail == {
        "core": 4,
        "ceiling_khz": 1_000_000,
        "min_khz": 1881600,
        "online": True,
        "check": 2,
    }
    assert not result.passed


def test_gate_threshold_exactly_met_passes(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.set_ceiling(4, 1_881_600)
    assert run_gate(session.device(), FAST, sleep=lambda s: None).passed


def test_show_gate_observes_without_waiting(emulated_phone) -> None:
    rows = show_gate(emulated_phone.device())
    assert [(name, avail) for name, avail, _ in rows] == [
        ("rest", True),
        ("temperature", True),
        ("cores_online", True),
        ("ceiling", True),
    ]
    assert rows[3][2] is not None and rows[3][2].ok


def test_local_host_gate_checks_cores_only() -> None:
    result = run_gate(LocalHost(), sleep=lambda s: pytest.fail("local gate must not wait"))
    assert result.passed
    assert [o.check for o in result.observations] == ["rest", "cores_online"]


def test_monitor_samples_about_once_per_interval(emulated_phone) -> None:
    mon = CoreMonitor(emulated_phone.device(), interval_s=0.1).start()
    time.sleep(0.55)
    samples = mon.stop()
    assert 3 <= len(samples) <= 8  # 1 at start + ~5 periodic; slack for a loaded 2-core machine
    assert all(s.online == tuple(range(8)) for s in samples)
    assert all(s.ceiling_khz[4] == 3148800 for s in samples)
    assert samples == sorted(samples, key=lambda s: s.t_s) and mon.failure is None


def test_monitor_records_a_ceiling_change_without_stopping(make_emulated_phone) -> None:
    session = make_emulated_phone()
    mon = CoreMonitor(session.device(), interval_s=0.05).start()
    time.sleep(0.15)
    session.phone.set_ceiling(7, 2_000_000)
    time.sleep(0.2)
    samples = mon.stop()
    assert mon.failure is None
    seen = [s.ceiling_khz[7] for s in samples]
    assert seen[0] == 3302400 and seen[-1] == 2_000_000


def test_core_offline_mid_episode_stops_the_batch_and_keeps_results(make_emulated_phone) -> None:
    session = make_emulated_phone()
    dev = session.device()

    def good(mon: CoreMonitor) -> str:
        deadline = time.monotonic() + 5
        while len(mon.samples) < 2 and time.monotonic() < deadline:  # at least one periodic sample
            time.sleep(0.01)
        return "episode ok"

    def throttled(mon: CoreMonitor) -> str:
        session.phone.set_core_online(6, False)
        assert mon.tripped.wait(2.0), "monitor never noticed the offline core"
        return "partial"

    with pytest.raises(BatchStopped, match=r"episode 2/3 stopped: CPU6 went offline") as err:
        run_batch(dev, [good, throttled, good], FAST, monitor_interval_s=0.05, sleep=lambda s: None)
    stopped = err.value
    assert [r.result for r in stopped.completed] == ["episode ok"]
    assert stopped.completed[0].gate is not None and stopped.completed[0].gate.passed
    assert len(stopped.completed[0].samples) >= 2
    assert stopped.failure is not None and stopped.failure.kind == "core_offline"
    assert stopped.failure.detail["offline"] == [6]
    assert stopped.interrupted is not None and stopped.interrupted.result == "partial"
    assert stopped.interrupted.samples[-1].online == (0, 1, 2, 3, 4, 5, 7)


def test_gate_failure_before_an_episode_keeps_finished_ones(make_emulated_phone) -> None:
    session = make_emulated_phone()

    def heats_up(mon: CoreMonitor) -> int:
        session.phone.set_ceiling(4, 800_000)  # after this episode the gate must refuse
        return 1

    with pytest.raises(BatchStopped, match="episode 2/2 not started: gate failed") as err:
        run_batch(
            session.device(),
            [heats_up, heats_up],
            FAST,
            monitor_interval_s=0.05,
            sleep=lambda s: None,
        )
    assert [r.result for r in err.value.completed] == [1]
    assert err.value.gate is not None and not err.value.gate.passed


def test_device_lost_mid_episode_stops_the_batch(make_emulated_phone) -> None:
    session = make_emulated_phone()

    def vanishes(mon: CoreMonitor) -> None:
        session.phone.vanish()
        assert mon.tripped.wait(5.0)

    with pytest.raises(BatchStopped) as err:
        run_batch(session.device(), [vanishes], FAST, monitor_interval_s=0.05, sleep=lambda s: None)
    assert err.value.failure is not None and err.value.failure.kind == "device_lost"
    assert err.value.completed == []


def test_an_episode_error_stops_the_batch_with_its_message(emulated_phone) -> None:
    from as2d_cli.errors import DeviceError

    def fails(mon: CoreMonitor) -> None:
        raise DeviceError("runner lost its model file")

    with pytest.raises(
        BatchStopped, match="episode 1/1 stopped: runner lost its model file"
    ) as err:
        run_batch(
            emulated_phone.device(), [fails], FAST, monitor_interval_s=0.05, sleep=lambda s: None
        )
    assert err.value.failure is not None and err.value.failure.kind == "episode_error"
    assert err.value.interrupted is not None and err.value.interrupted.samples


def test_ceiling_check_on_an_offline_core_says_so(make_emulated_phone) -> None:
    from device_agents.gating import CeilingAtLeast

    session = make_emulated_phone()
    session.phone.set_core_online(4, False)
    obs = CeilingAtLeast(4, 1881600, 1, 0).show(session.device())
    assert obs.ok is False and obs.message.startswith("CPU4 is offline")


def test_cores_must_be_online_at_both_checks(make_emulated_phone) -> None:
    """A core that goes offline between the two checks fails the second one."""
    session = make_emulated_phone()
    dev = session.device()

    def gap(seconds: float) -> None:
        if seconds == 0.5:  # the interval between the checks
            session.phone.set_core_online(2, False)

    result = run_gate(dev, replace(FAST, interval_s=0.5), sleep=gap)
    assert not result.passed and "CPU2 offline" in (result.failure or "")
    checks = [o for o in result.observations if o.check == "cores_online"]
    assert [o.ok for o in checks] == [True, False] and checks[-1].detail["check"] == 2


def test_a_hot_phone_waits_until_it_has_cooled_down(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.battery.temperature_dc = 440  # 44.0 °C
    polls: list[float] = []

    def cool_a_little(seconds: float) -> None:
        polls.append(seconds)
        session.phone.battery.temperature_dc -= 25  # 2.5 °C per poll

    result = run_gate(session.device(), FAST, sleep=cool_a_little)
    assert result.passed, result.failure
    temps = [o for o in result.observations if o.check == "temperature"]
    assert temps[0].ok is None and temps[0].detail["temp_c"] == 44.0
    assert temps[1].ok and temps[1].detail["first_c"] == 44.0 and temps[1].detail["temp_c"] == 39.0
    assert polls[:2] == [10.0, 10.0] and "cooled down" in temps[1].message
    jsonschema.validate(json.loads(json.dumps(result.to_dict())), GATE_SCHEMA)


def test_a_phone_that_stays_hot_fails_the_gate_in_one_line(make_emulated_phone) -> None:
    session = make_emulated_phone()
    session.phone.battery.temperature_dc = 455
    cfg = replace(FAST, cool_wait_s=0.3)
    with pytest.raises(
        GateFailed, match=r"battery 45\.5 °C is above 40 °C .*after waiting .* raise --max-temp"
    ) as err:
        require_gate(session.device(), cfg, sleep=lambda s: time.sleep(min(s, 0.05)))
    assert "\n" not in str(err.value)
    # A zone chosen by type, with a threshold it meets, passes.
    skin = replace(FAST, temp_sensor="skin", max_temp_c=45.0)
    res = run_gate(session.device(), skin, sleep=lambda s: None)
    assert res.passed and res.observations[1].detail["sensor"] == "skin-msm-therm"


def test_settle_waits_for_a_busy_then_a_stolen_device_to_be_quiet(make_emulated_phone) -> None:
    """Once before measuring: busy cores, and a hypervisor's steal that the load average
    never shows, keep the settle waiting; once quiet for the asked seconds it goes on, and
    its observation fits the gate record's schema. The emulated phone's /proc/stat follows
    the load the test sets, so nothing else on this machine affects it."""
    from device_agents.gating import settle

    session = make_emulated_phone()
    dev = session.device()
    assert settle(dev, 0).message == "settle skipped"
    for busy, steal in ((0.9, 0.0), (0.06, 0.5)):
        session.phone.set_load(busy=busy, steal=steal, load1=0.1)
        session.phone.schedule(2.2, lambda: session.phone.set_load(busy=0.02, steal=0.0))
        t0 = time.monotonic()
        obs = settle(dev, quiet_s=1, max_wait_s=30, sleep=time.sleep)
        waited = time.monotonic() - t0
        assert obs.check == "settle" and obs.ok is True, obs.message
        assert waited >= 2.0 and obs.detail["waited_s"] >= 2.0  # not while busy or stolen
    assert "most steal 50%" in obs.message or "most steal 5" in obs.message
    session.phone.set_load(busy=0.02, steal=0.4)
    stuck = settle(dev, quiet_s=1, max_wait_s=2.5, sleep=time.sleep)
    assert (
        stuck.ok is None
        and "hypervisor steals CPU time" in stuck.message
        and stuck.detail["steal"] >= 0.35
    )
    record = run_gate(dev, replace(FAST, settle_s=1.0), sleep=lambda s: None).to_dict()
    record["observations"].insert(0, json.loads(json.dumps(obs.__dict__)))
    jsonschema.validate(record, GATE_SCHEMA)
