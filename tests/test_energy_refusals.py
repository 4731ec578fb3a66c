"""Each impossible figure is refused with one clear line (issue #6 item 4).

Traces come from the emulated phone's battery model on a virtual boot clock, written as
real Perfetto protobufs and read back through the same reader the CLI uses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import CaptureSpec, build_trace_config
from as2d_cli.energy.episode_records import Episode, RequestRecord
from as2d_cli.energy.refusals import MeasurementRefused
from as2d_cli.energy.trace_reader import read_battery_series
from device_agents.emulator.battery import (
    BatteryParams,
    GaugeFaults,
    encode_trace,
    simulate_readings,
)

S = 1_000_000_000
T0 = 5_000 * S
COUNTERS = ["CURRENT", "VOLTAGE", "CHARGE", "CAPACITY_PERCENT", "CURRENT_AVG"]
# Two requests: target-only busy 4–14 s, as2d busy 16–22 s (one worker each).
EPISODE = Episode(
    [
        RequestRecord("target-only", "formal", T0 + 4 * S, T0 + 14 * S, T0 + 14 * S, 256, 0),
        RequestRecord("as2d", "formal", T0 + 16 * S, T0 + 21 * S, T0 + 22 * S, 248, 0),
    ]
)


def _busy(t: int) -> float:
    return 1.0 if (T0 + 4 * S <= t < T0 + 14 * S) or (T0 + 16 * S <= t < T0 + 22 * S) else 0.0


def _series(
    tmp_path: Path,
    faults: GaugeFaults = GaugeFaults(),
    poll_ms: int = 250,
    plugged=lambda t: False,
    counters=COUNTERS,
    duration_ms: int = 26_000,
):
    rs = simulate_readings(BatteryParams(), faults, T0, poll_ms, duration_ms, _busy, plugged)
    cfg = build_trace_config(CaptureSpec(duration_ms=duration_ms, poll_ms=poll_ms))
    path = tmp_path / "trace.perfetto-trace"
    path.write_bytes(encode_trace(rs, cfg, counters))
    return read_battery_series(path)


def test_clean_trace_gives_plausible_figures(tmp_path: Path) -> None:
    a = analyse_episode(_series(tmp_path), EPISODE)
    t, x = a.requests
    # 1 worker: (420 + 1150) mA at ~3.8–4.2 V ≈ 6 W; 10 s ≈ 60 J.
    assert 5.0 < t.mean_power_w < 7.5 and 50 < t.energy_j < 75
    assert t.samples_in_window >= 40
    assert x.energy_j < t.energy_j
    c = a.cross_check
    assert c.discrepancy_percent is not None and c.discrepancy_percent < 5.0


def test_refuses_charging(tmp_path: Path) -> None:
    s = _series(tmp_path, plugged=lambda t: t < T0 + 6 * S)  # USB still in at the start
    with pytest.raises(MeasurementRefused, match=r"positive .*charging.*disconnect USB"):
        analyse_episode(s, EPISODE)


def test_charging_is_named_even_when_polls_are_sparse(tmp_path: Path) -> None:
    # A loaded phone can miss polls; if it was also charging, charging is the cause to fix.
    s = _series(
        tmp_path, poll_ms=10000, plugged=lambda t: True, duration_ms=40_000
    )  # ≤ 1 poll per window
    with pytest.raises(MeasurementRefused, match=r"positive .*charging"):
        analyse_episode(s, EPISODE)


def test_refuses_missing_voltage(tmp_path: Path) -> None:
    s = _series(tmp_path, faults=GaugeFaults(report_voltage=False))
    with pytest.raises(MeasurementRefused, match="no battery voltage"):
        analyse_episode(s, EPISODE)


def test_refuses_voltage_counter_not_requested(tmp_path: Path) -> None:
    s = _series(tmp_path, counters=["CURRENT", "CHARGE"])
    with pytest.raises(MeasurementRefused, match="no battery voltage"):
        analyse_episode(s, EPISODE)


def test_refuses_stale_gauge(tmp_path: Path) -> None:
    s = _series(tmp_path, faults=GaugeFaults(stale=True))
    with pytest.raises(MeasurementRefused, match="stale gauge"):
        analyse_episode(s, EPISODE)


@pytest.mark.parametrize("scale,word", [(1e-3, "mA in the µA field"), (1e3, "nA")])
def test_refuses_units_off_by_1000(tmp_path: Path, scale: float, word: str) -> None:
    s = _series(tmp_path, faults=GaugeFaults(current_scale=scale))
    with pytest.raises(MeasurementRefused, match=f"units off by 1000.*{word}"):
        analyse_episode(s, EPISODE)


def test_refuses_too_few_samples_sparse_polls(tmp_path: Path) -> None:
    s = _series(tmp_path, poll_ms=5000)  # ~2 polls in a 10 s window
    with pytest.raises(MeasurementRefused, match="too few samples"):
        analyse_episode(s, EPISODE)


def test_a_trace_that_ends_before_a_window_keeps_the_windows_it_covers(tmp_path: Path) -> None:
    # The trace ended while the as2d request ran: target-only is measured, as2d is kept and
    # marked with why, and the run is not refused.
    s = _series(tmp_path, duration_ms=18_000)
    a = analyse_episode(s, EPISODE)
    t, x = a.requests
    assert t.status == "ok" and t.energy_j is not None and t.energy_j > 0
    assert x.status.startswith("not covered:") and x.energy_j is None
    assert "outlasted the bounded trace" in x.status and "--request-budget-s" in x.status
    (m,) = [m for m in a.methods if m.method == "as2d"]
    assert m.status.startswith("not covered:") and m.energy_j is None
    # nothing at all covered: one line, nothing to measure
    early = Episode([RequestRecord("as2d", "formal", T0 + 30 * S, T0 + 31 * S, T0 + 32 * S, 5, 0)])
    with pytest.raises(MeasurementRefused, match="not covered.*covers no request window"):
        analyse_episode(s, early)


def test_refuses_zero_tokens(tmp_path: Path) -> None:
    ep = Episode([RequestRecord("as2d", "formal", T0 + 16 * S, T0 + 21 * S, T0 + 22 * S, 0, 0)])
    with pytest.raises(MeasurementRefused, match="J/token is undefined"):
        analyse_episode(_series(tmp_path), ep)


def test_failed_request_is_kept_not_measured(tmp_path: Path) -> None:
    ep = Episode(
        EPISODE.requests
        + [RequestRecord("sd", "formal", T0 + 23 * S, T0 + 23 * S, T0 + 23 * S, 0, 137)]
    )
    a = analyse_episode(_series(tmp_path), ep)
    assert a.requests[-1].status == "failed: request exited with 137"
    assert a.requests[-1].energy_j is None
    # The method whose only formal request failed stays, with its failure and no figures.
    sd = {m.method: m for m in a.methods}["sd"]
    assert [m.method for m in a.methods] == ["target-only", "as2d", "sd"]
    assert sd.status.startswith("failed: all 1 formal request(s) failed") and sd.energy_j is None
    assert (sd.formal_requests, sd.measured_requests, sd.failed_requests) == (1, 0, 1)


def test_refuses_charge_counter_off_by_1000(tmp_path: Path) -> None:
    # Current is fine, but the charge counter is in mAh: the cross-check exposes it.
    s = _series(tmp_path, faults=GaugeFaults(charge_scale=1e-3), duration_ms=60_000)
    with pytest.raises(MeasurementRefused, match="factor of .* units off by 1000"):
        analyse_episode(s, EPISODE)


def test_steady_load_is_not_mistaken_for_a_stale_gauge(tmp_path: Path) -> None:
    # A noiseless gauge under a constant load repeats the same current for the whole
    # window; the charge counter still falls, so this is a measurement, not a frozen gauge.
    rs = simulate_readings(
        BatteryParams(current_noise=0.0), GaugeFaults(), T0, 250, 26_000, lambda t: 1.0
    )
    path = tmp_path / "steady.perfetto-trace"
    path.write_bytes(encode_trace(rs, None, COUNTERS))
    s = read_battery_series(path)
    assert len(set(s.current_ua.tolist())) == 1  # the case in question
    a = analyse_episode(s, EPISODE)
    assert all(r.status == "ok" for r in a.requests)
    assert a.requests[0].mean_power_w == pytest.approx(
        1.570 * float(s.voltage_uv[16:57].mean()) * 1e-6, rel=0.01
    )


# -- a charger at either end of the capture (battery status, not only positive current) ----


@pytest.mark.parametrize(
    "meta,words",
    [
        (
            {"battery_status_at_start": "Full", "battery_status_at_end": "Discharging"},
            ["status Full at the start of the capture", "below full", "unplug"],
        ),
        (
            {"battery_status_at_start": "Discharging", "battery_status_at_end": "Charging"},
            ["status Charging at the end of the capture", "disconnect USB"],
        ),
        (
            {"battery_status_at_start": "Not charging", "battery_status_at_end": "Full"},
            ["Not charging at the start, Full at the end", "disconnect USB", "below full"],
        ),
        (
            {"battery_status_at_start": "Charging", "battery_status_at_end": "Charging"},
            ["Charging at the start and at the end"],
        ),
    ],
)
def test_refuses_a_charger_status_at_either_end(tmp_path: Path, meta: dict, words: list) -> None:
    # The gauge shows a discharging phone throughout: only the status tells.
    s = _series(tmp_path)
    assert (s.current_ua < 0).all()
    with pytest.raises(MeasurementRefused) as info:
        analyse_episode(s, Episode(EPISODE.requests, dict(meta)))
    msg = str(info.value)
    assert all(w in msg for w in words), msg
    assert "positive" not in msg and "\n" not in msg


def test_charger_status_names_positive_current_when_there_is_some(tmp_path: Path) -> None:
    s = _series(tmp_path, plugged=lambda t: t < T0 + 2 * S)
    with pytest.raises(MeasurementRefused, match=r"Charging at the start .*positive, \d+ µA"):
        analyse_episode(s, Episode(EPISODE.requests, {"battery_status_at_start": "Charging"}))


def test_discharging_or_unrecorded_status_is_measured(tmp_path: Path) -> None:
    s = _series(tmp_path)
    for meta in (
        {},
        {"battery_status_at_start": "Discharging", "battery_status_at_end": "Discharging"},
    ):
        a = analyse_episode(s, Episode(EPISODE.requests, meta))
        assert all(r.status == "ok" for r in a.requests)


def test_status_is_read_from_dumpsys_when_power_supply_is_unreadable() -> None:
    from as2d_cli.energy.episode_script import EpisodePlan, assemble_episode

    plan = EpisodePlan(methods=("as2d",), request_cmd="x", warmups=0)
    files = {
        "battery_status_at_start": "",
        "battery_dumpsys_at_start": "Current Battery Service state:\n  status: 5\n  level: 100\n",
        "battery_status_at_end": "Discharging\n",
    }
    meta = assemble_episode(plan, files).meta
    assert meta["battery_status_at_start"] == "Full"
    assert meta["battery_status_at_end"] == "Discharging"


# -- option combinations that cannot measure are refused before anything runs ----------------


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    from as2d_cli.cli.main import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,words",
    [
        (
            ["--phone", "local", "--connection", "wireless", "--request-cmd", "x"],
            ["--phone local with --connection wireless", "no battery counters Perfetto can read"],
        ),
        (
            ["--phone", "local", "--request-cmd", "x"],
            ["--phone local cannot measure", "no battery counters Perfetto can read"],
        ),
        (
            ["--phone", "local", "--connection", "bluetooth", "--request-cmd", "x"],
            ["--connection 'bluetooth' must be usb", "or wireless"],
        ),
        (
            ["--phone", "k70", "--request-cmd", "x", "--window", "dev-sung-004"],
            ["--window names the corpus window the bundle", "drop --window or pass --bundle"],
        ),
        (
            ["--from-run", "{tmp}", "--phone", "k70", "--poll-ms", "100"],
            ["--from-run analyses a folder that was already measured", "--phone, --poll-ms"],
        ),
        (["--from-run", "{tmp}", "--connection", "wireless"], ["--connection cannot apply"]),
        (
            ["--collect", "{tmp}", "--methods", "as2d"],
            ["--collect fetches", "--methods cannot apply"],
        ),
        (
            ["--collect", "{tmp}", "--from-run", "{tmp}"],
            ["--from-run DIR", "--collect DIR", "not both"],
        ),
        (["--collect", "{tmp}/nothing-here"], ["--collect", "no such folder"]),
    ],
)
def test_unmeasurable_combinations_are_one_line_before_anything_runs(
    tmp_path: Path, capsys, monkeypatch, argv: list, words: list
) -> None:
    import device_agents.registry as registry

    def no_device(*a, **k):  # nothing may reach for a device
        raise AssertionError("a device was resolved")

    monkeypatch.setattr(registry, "resolve_phone", no_device)
    measuring = "--from-run" not in argv and "--collect" not in argv
    argv = [
        "energy",
        *[a.replace("{tmp}", str(tmp_path)) for a in argv],
        *(["--out", str(tmp_path / "res")] if measuring else []),
    ]
    code, err = _cli(argv, capsys)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line
    assert not (tmp_path / "res").exists()


# -- a gauge that reports discharge current positive; charging polls in the cross-check -----

DISCHARGING = {"battery_status_at_start": "Discharging", "battery_status_at_end": "Discharging"}


def test_flipped_sign_gauge_is_corrected_not_refused_as_charging(tmp_path: Path) -> None:
    normal = analyse_episode(_series(tmp_path), Episode(EPISODE.requests, dict(DISCHARGING)))
    s = _series(tmp_path, faults=GaugeFaults(current_sign=-1))
    assert (s.current_ua > 0).all() and s.charge_uah[-1] < s.charge_uah[0]  # the case
    a = analyse_episode(s, Episode(EPISODE.requests, dict(DISCHARGING)))
    assert a.sign_note is not None and "sign convention, not a charger" in a.sign_note
    assert "Discharging" in a.sign_note and "\n" not in a.sign_note
    # Same gauge, same jitter, opposite sign: the same figures to the last digit.
    for x, y in zip(a.requests, normal.requests):
        assert x.status == "ok" and x.energy_j == pytest.approx(y.energy_j, rel=1e-12)
    assert a.cross_check.discrepancy_percent == pytest.approx(
        normal.cross_check.discrepancy_percent
    )
    assert a.cross_check.excluded_charging_samples == 0 and normal.sign_note is None


@pytest.mark.parametrize(
    "meta,plugged,why",
    [
        ({}, lambda t: False, "no battery status recorded: nothing says it discharged"),
        (DISCHARGING, lambda t: True, "the charge counter rose: it did charge"),
    ],
)
def test_positive_current_without_the_evidence_stays_charging(
    tmp_path: Path, meta: dict, plugged, why: str
) -> None:
    sign = 1 if meta == DISCHARGING else -1  # plugged in: current positive with Android's sign
    s = _series(tmp_path, faults=GaugeFaults(current_sign=sign), plugged=plugged)
    assert (s.current_ua > 0).all(), why
    with pytest.raises(MeasurementRefused, match=r"positive .*charging"):
        analyse_episode(s, Episode(EPISODE.requests, dict(meta)))


def test_cross_check_leaves_out_polls_taken_while_charging(tmp_path: Path) -> None:
    # The cable goes back in during the tail (23 s on): the requests are measured, and the
    # cross-check compares current and charge counter over the discharging polls only.
    s = _series(tmp_path, plugged=lambda t: t >= T0 + 23 * S)
    a = analyse_episode(s, Episode(EPISODE.requests, dict(DISCHARGING)))
    c = a.cross_check
    charging = s.current_ua > 0
    assert charging.sum() >= 8 and not charging[: int(22.9 * 4)].any()  # the tail only
    assert c.excluded_charging_samples == int(charging.sum())
    assert f"{int(charging.sum())} poll(s) taken while charging" in c.note
    k = int(np.flatnonzero(charging)[0])  # the first charging poll: both stop before it
    i, t = -s.current_ua[:k], s.t_ns[:k].astype(float)
    assert c.integrated_mah == pytest.approx(np.sum((i[1:] + i[:-1]) * np.diff(t)) / 2 / 3.6e15)
    assert c.charge_drop_mah == pytest.approx((s.charge_uah[0] - s.charge_uah[k - 1]) / 1000)
    assert c.discrepancy_percent is not None and c.discrepancy_percent < 5.0
    # Counting the charging tail would have compared against a counter that rose again.
    assert (s.charge_uah[0] - s.charge_uah[-1]) / 1000 < 0.9 * c.charge_drop_mah
