"""Each impossible figure is refused with one clear line (issue #6 item 4).

Traces come from the emulated phone's battery model on a virtual boot clock, written as
real Perfetto protobufs and read back through the same reader the CLI uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import CaptureSpec, build_trace_config
from as2d_cli.energy.episode_records import Episode, RequestRecord
from as2d_cli.energy.refusals import MeasurementRefused
from as2d_cli.energy.trace_reader import read_battery_series
from device_agents.battery_model import (
    BatteryParams,
    GaugeFaults,
    encode_trace,
    simulate_readings,
)

S = 1_000_000_000
T0 = 5_000 * S
COUNTERS = ["CURRENT", "VOLTAGE", "CHARGE", "CAPACITY_PERCENT", "CURRENT_AVG"]
# Two requests: target-only busy 4–14 s, as2d busy 16–22 s (one worker each).
EPISODE = Episode([
    RequestRecord("target-only", "formal", T0 + 4 * S, T0 + 14 * S, T0 + 14 * S, 256, 0),
    RequestRecord("as2d", "formal", T0 + 16 * S, T0 + 21 * S, T0 + 22 * S, 248, 0),
])


def _busy(t: int) -> float:
    return 1.0 if (T0 + 4 * S <= t < T0 + 14 * S) or (T0 + 16 * S <= t < T0 + 22 * S) else 0.0


def _series(tmp_path: Path, faults: GaugeFaults = GaugeFaults(), poll_ms: int = 250,
            plugged=lambda t: False, counters=COUNTERS, duration_ms: int = 26_000):
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
    s = _series(tmp_path, poll_ms=10000, plugged=lambda t: True, duration_ms=40_000)  # ≤ 1 poll per window
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


def test_refuses_window_outside_capture(tmp_path: Path) -> None:
    s = _series(tmp_path, duration_ms=18_000)  # trace ended before the as2d request did
    with pytest.raises(MeasurementRefused, match="as2d/formal.*too few samples.*raise the request budget"):
        analyse_episode(s, EPISODE)


def test_refuses_zero_tokens(tmp_path: Path) -> None:
    ep = Episode([RequestRecord("as2d", "formal", T0 + 16 * S, T0 + 21 * S, T0 + 22 * S, 0, 0)])
    with pytest.raises(MeasurementRefused, match="J/token is undefined"):
        analyse_episode(_series(tmp_path), ep)


def test_failed_request_is_kept_not_measured(tmp_path: Path) -> None:
    ep = Episode(EPISODE.requests + [
        RequestRecord("sd", "formal", T0 + 23 * S, T0 + 23 * S, T0 + 23 * S, 0, 137)])
    a = analyse_episode(_series(tmp_path), ep)
    assert a.requests[-1].status == "failed: request exited with 137"
    assert a.requests[-1].energy_j is None
    assert {m.method for m in a.methods} == {"target-only", "as2d"}


def test_refuses_charge_counter_off_by_1000(tmp_path: Path) -> None:
    # Current is fine, but the charge counter is in mAh: the cross-check exposes it.
    s = _series(tmp_path, faults=GaugeFaults(charge_scale=1e-3), duration_ms=60_000)
    with pytest.raises(MeasurementRefused, match="factor of .* units off by 1000"):
        analyse_episode(s, EPISODE)


def test_steady_load_is_not_mistaken_for_a_stale_gauge(tmp_path: Path) -> None:
    # A noiseless gauge under a constant load repeats the same current for the whole
    # window; the charge counter still falls, so this is a measurement, not a frozen gauge.
    rs = simulate_readings(BatteryParams(current_noise=0.0), GaugeFaults(), T0, 250, 26_000,
                           lambda t: 1.0)
    path = tmp_path / "steady.perfetto-trace"
    path.write_bytes(encode_trace(rs, None, COUNTERS))
    s = read_battery_series(path)
    assert len(set(s.current_ua.tolist())) == 1  # the case in question
    a = analyse_episode(s, EPISODE)
    assert all(r.status == "ok" for r in a.requests)
    assert a.requests[0].mean_power_w == pytest.approx(
        1.570 * float(s.voltage_uv[16:57].mean()) * 1e-6, rel=0.01)
