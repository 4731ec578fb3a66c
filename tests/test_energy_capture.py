"""Capture config, episode script, records and result files (no device needed)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import (
    CaptureSpec,
    battery_counter_names,
    battery_poll_ms,
    parse_trace_config,
    serialize_trace_config,
)
from as2d_cli.energy.episode_records import (
    Episode,
    RequestRecord,
    format_episode,
    parse_episode,
)
from as2d_cli.energy.episode_script import (
    EpisodePlan,
    assemble_episode,
    parse_uptime_ns,
    render_script,
)
from as2d_cli.energy.results import load_energy_result, new_run_dir, write_results
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import FormatError, UserError
from device_agents.emulator.battery import (
    BatteryParams,
    GaugeFaults,
    encode_trace,
    simulate_readings,
)

S = 1_000_000_000


def test_trace_config_is_binary_android_power_with_bounded_duration() -> None:
    data = serialize_trace_config(CaptureSpec(duration_ms=90_000))
    cfg = parse_trace_config(data)
    assert isinstance(cfg, pb.TraceConfig)
    assert cfg.duration_ms == 90_000 and cfg.prefer_suspend_clock_for_duration
    assert battery_poll_ms(cfg) == 250
    assert battery_counter_names(cfg) == [
        "CURRENT",
        "VOLTAGE",
        "CHARGE",
        "CAPACITY_PERCENT",
        "CURRENT_AVG",
    ]
    assert [ds.config.name for ds in cfg.data_sources] == ["android.power"]
    assert cfg.buffers[0].size_kb > 0
    no_avg = parse_trace_config(
        serialize_trace_config(
            CaptureSpec(duration_ms=90_000, poll_ms=500, include_current_avg=False)
        )
    )
    assert "CURRENT_AVG" not in battery_counter_names(no_avg) and battery_poll_ms(no_avg) == 500


@pytest.mark.parametrize(
    "spec,match",
    [
        (CaptureSpec(duration_ms=0), "must be positive"),
        (CaptureSpec(duration_ms=10**10), "at most"),
        (CaptureSpec(duration_ms=60_000, poll_ms=10), "outside"),
        (CaptureSpec(duration_ms=500, poll_ms=250), "fewer than 4 polls"),
    ],
)
def test_bad_capture_specs_are_refused(spec: CaptureSpec, match: str) -> None:
    with pytest.raises(UserError, match=match):
        serialize_trace_config(spec)


PLAN = EpisodePlan(
    methods=("as2d", "target-only"),
    request_cmd="run {method} {phase} {index}",
    settle_s=1,
    gap_s=0.5,
    tail_s=1,
    request_budget_s=2,
    discharge_wait_s=3,
)


def test_episode_script_is_straight_line_and_ordered() -> None:
    text = render_script(PLAN, "/data/local/tmp/as2d-energy-x", "/c.pb", "/t.pt", "0.1")
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    # No loops, conditionals, substitutions or background jobs: mksh and the emulated shell
    # both run it, and nothing can go wrong unattended.
    for bad in ("while ", "for ", "if ", "$(", "`", " &\n"):
        assert bad not in "\n".join(body) + "\n", bad
    assert sum("grep -q Discharging" in ln for ln in body) == 3
    # Each request runs whole under its guard (sh -c: a skipped request runs nothing).
    runs = [shlex.split(ln) for ln in body if "sh -c 'run " in ln]
    assert [r[r.index("-c") + 1] for r in runs] == [
        "run as2d warmup 0",
        "run as2d formal 1",
        "run target-only warmup 2",
        "run target-only formal 3",
    ]
    assert "perfetto --background-wait -c - -o /t.pt" in text
    assert PLAN.trace_duration_ms() == int((1 + 4 * 2 + 3 * 0.5 + 1) * 1000) + 1000


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(methods=()), "no methods"),
        (dict(methods=("a b",)), "method name"),
        (dict(methods=("x", "x")), "repeat"),
        (dict(request_cmd="run {model}"), "invalid"),
        (dict(method_cmds=(("sd", "x"),)), "not among"),
    ],
)
def test_bad_plans_are_refused(kw: dict, match: str) -> None:
    base = dict(methods=("as2d",), request_cmd="run {method}")
    base.update(kw)
    with pytest.raises(UserError, match=match):
        EpisodePlan(**base).validate()


def test_assemble_episode_prefers_the_request_own_stamps() -> None:
    files = {
        "req000.origin": "100.00 1.0\n",
        "req000.end": "102.50 1.0\n",
        "req000.rc": "0\n",
        "req000.out": "noise\nAS2D_REQUEST body_tokens=173\n",
        "req001.origin": "103.00 1.0\n",
        "req001.end": "110.00 1.0\n",
        "req001.rc": "0\n",
        "req001.out": "AS2D_REQUEST body_tokens=256 origin_boot_ns=103100000000 "
        "target_eos_boot_ns=108000000000 end_boot_ns=109000000000\n",
        "req002.origin": "111.00 1.0\n",
        "req002.end": "112.00 1.0\n",
        "req002.rc": "0\n",
        "req002.out": "forgot to report\n",
        # req003 never ran (records missing)
        "t_trace_started": "99.00 1.0\n",
    }
    ep = assemble_episode(PLAN, files)
    a, b, c, d = ep.requests
    assert (a.origin_ns, a.target_eos_ns, a.end_ns, a.body_tokens) == (
        100 * S,
        102.5 * S,
        102.5 * S,
        173,
    )
    assert (b.origin_ns, b.target_eos_ns, b.end_ns, b.body_tokens) == (
        103.1 * S,
        108 * S,
        109 * S,
        256,
    )
    assert c.exit_code == 254 and d.exit_code == 255
    assert ep.meta["t_trace_started_boot_ns"] == str(99 * S)
    assert parse_uptime_ns("5.5 1", "x") == 5_500_000_000
    with pytest.raises(FormatError, match="not a /proc/uptime"):
        parse_uptime_ns("", "req000.end")


def test_episode_records_round_trip_and_version_refusal() -> None:
    ep = Episode([RequestRecord("as2d", "formal", 1, 2, 3, 4, 0)], {"k": "v"})
    assert parse_episode(format_episode(ep)).requests == ep.requests
    newer = format_episode(ep).replace("as2d.energy-episode 1", "as2d.energy-episode 2")
    with pytest.raises(FormatError, match="version 2 is newer"):
        parse_episode(newer)
    with pytest.raises(FormatError, match="origin ≤ target EOS"):
        parse_episode(format_episode(Episode([RequestRecord("a", "formal", 5, 2, 3, 4, 0)])))


def _analysis(tmp_path: Path):
    t0 = 1000 * S
    busy = lambda t: 1.0 if t0 + 2 * S <= t < t0 + 8 * S else 0.0  # noqa: E731
    rs = simulate_readings(BatteryParams(), GaugeFaults(), t0, 250, 10_000, busy)
    trace = tmp_path / "in.perfetto-trace"
    trace.write_bytes(encode_trace(rs, None, ["CURRENT", "VOLTAGE", "CHARGE"]))
    ep = Episode([RequestRecord("as2d", "formal", t0 + 2 * S, t0 + 7 * S, t0 + 8 * S, 100, 0)])
    return analyse_episode(read_battery_series(trace), ep), ep, trace


def test_results_are_versioned_and_never_overwritten(tmp_path: Path) -> None:
    analysis, ep, trace = _analysis(tmp_path)
    d1 = new_run_dir(tmp_path / "results", "k70")
    d2 = new_run_dir(tmp_path / "results", "k70")
    assert d1 != d2 and d1.parent == d2.parent  # same second: a fresh folder, not the same
    spec = CaptureSpec(duration_ms=10_000)
    path = write_results(
        d1,
        analysis,
        ep,
        trace,
        spec,
        {"serial": "x"},
        {"methods": ["as2d"]},
        ["CURRENT", "VOLTAGE", "CHARGE"],
    )
    doc = load_energy_result(path)
    assert doc["schema"] == "as2d.energy-result" and doc["version"] == 6
    assert doc["requests"][0]["energy_from"] == "readings"
    assert doc["capture"]["gauge_noise_percent"] is not None
    assert doc["status"] == "complete" and doc["conditions"] is None  # none were passed
    # The gauge behind the trace updates once a second (polled every 250 ms).
    assert doc["capture"]["gauge_period_s"] == pytest.approx(1.0, rel=0.01)
    assert "poll_s_observed" not in doc["capture"]
    assert doc["requests"][0]["gauge_readings_in_window"] == 6  # updates at 3, 4, …, 8 s
    assert doc["requests"][0]["energy_j"] == pytest.approx(analysis.requests[0].energy_j)
    assert (d1 / "trace.perfetto-trace").read_bytes() == trace.read_bytes()
    assert "| as2d |" in (d1 / "table.md").read_text()
    with pytest.raises(UserError, match="never overwritten"):
        write_results(d1, analysis, ep, trace, spec, {}, {}, [])
    future = json.loads(path.read_text())
    future["version"] = 7
    (tmp_path / "future.json").write_text(json.dumps(future))
    with pytest.raises(FormatError, match="version 7 is newer"):
        load_energy_result(tmp_path / "future.json")
    broken = json.loads(path.read_text())
    del broken["cross_check"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(FormatError, match="cross_check"):
        load_energy_result(tmp_path / "broken.json")


_V3_REQUEST = ("short_window", "power_step_w", "energy_bound_j", "noise_bound_j")
_V3_METHOD = ("energy_bound_j", "energy_bound_percent", "short_windows")


def _drop_v4(doc: dict) -> None:
    for r in doc["requests"]:  # version 5's
        del r["energy_from"]
    for k in ("gauge_noise_percent", "gauge_placement_s", "gauge_on_grid"):
        doc["capture"].pop(k, None)


def _drop_v3(doc: dict) -> None:
    _drop_v4(doc)
    del doc["status"], doc["conditions"]  # version 4's
    for r in doc["requests"]:
        for k in _V3_REQUEST:
            del r[k]
    for m in doc["methods"]:
        for k in _V3_METHOD:
            del m[k]


def _written_as_version(tmp_path: Path, version: int) -> tuple[Any, Path, dict]:
    """A current energy.json written from the example capture, and its document relabelled
    as ``version`` (files before version 6 kept the number under ``schema_version``); the
    caller removes what that version did not record."""
    analysis, ep, trace = _analysis(tmp_path)
    d = new_run_dir(tmp_path / "results", "k70")
    path = write_results(
        d, analysis, ep, trace, CaptureSpec(duration_ms=10_000), {}, {}, ["CURRENT"]
    )
    old = json.loads(path.read_text())
    del old["version"]
    old["schema_version"] = version
    return analysis, path, old


def test_version_5_results_keep_everything_under_the_new_version_key(tmp_path: Path) -> None:
    analysis, path, old = _written_as_version(tmp_path, 5)
    (tmp_path / "v5.json").write_text(json.dumps(old))
    doc = load_energy_result(tmp_path / "v5.json")
    assert doc["version"] == 6 and "schema_version" not in doc
    assert doc == json.loads(path.read_text())  # nothing else changed


def test_version_4_results_are_read_as_the_current_version(tmp_path: Path) -> None:
    """A version-4 run integrated the polled curve: energy_from reads null."""
    analysis, path, old = _written_as_version(tmp_path, 4)
    _drop_v4(old)
    (tmp_path / "v4.json").write_text(json.dumps(old))
    doc = load_energy_result(tmp_path / "v4.json")
    assert doc["version"] == 6 and doc["requests"][0]["energy_from"] is None
    assert doc["requests"][0]["energy_j"] == pytest.approx(analysis.requests[0].energy_j)


def test_version_3_results_are_read_as_the_current_version(tmp_path: Path) -> None:
    """A version-3 run was neither gated nor monitored: it reads as complete, conditions null."""
    analysis, path, old = _written_as_version(tmp_path, 3)
    _drop_v4(old)
    del old["status"], old["conditions"]
    (tmp_path / "v3.json").write_text(json.dumps(old))
    doc = load_energy_result(tmp_path / "v3.json")
    assert doc["version"] == 6 and doc["status"] == "complete"
    assert doc["conditions"] is None


def test_version_2_results_are_read_as_the_current_version(tmp_path: Path) -> None:
    analysis, path, old = _written_as_version(tmp_path, 2)
    new = json.loads(path.read_text())
    assert new["requests"][0]["energy_bound_j"] > 0 and new["methods"][0]["energy_bound_j"] > 0
    _drop_v3(old)
    (tmp_path / "v2.json").write_text(json.dumps(old))
    doc = load_energy_result(tmp_path / "v2.json")
    assert doc["version"] == 6 and doc["status"] == "complete"
    assert all(doc["requests"][0][k] is None for k in _V3_REQUEST)
    assert all(doc["methods"][0][k] is None for k in _V3_METHOD)
    assert doc["requests"][0]["energy_j"] == pytest.approx(analysis.requests[0].energy_j)


def test_version_1_results_are_read_as_the_current_version(tmp_path: Path) -> None:
    analysis, path, old = _written_as_version(tmp_path, 1)
    old["capture"]["poll_s_observed"] = 0.25
    for k in ("gauge_period_s", "gauge_readings", "current_sign_corrected", "current_sign_note"):
        del old["capture"][k]
    del old["cross_check"]["excluded_charging_samples"]
    del old["window_includes"]
    for r in old["requests"] + old["methods"]:  # version 1: mean power was energy / window
        r["mean_power_w"] = r.pop("window_power_w")
    for m in old["methods"]:
        for k in ("measured_requests", "failed_requests", "status"):
            del m[k]
    for r in old["requests"]:
        del r["gauge_readings_in_window"]
    _drop_v3(old)
    (tmp_path / "v1.json").write_text(json.dumps(old))
    doc = load_energy_result(tmp_path / "v1.json")
    assert doc["version"] == 6 and "poll_s_observed" not in doc["capture"]
    assert doc["requests"][0]["energy_bound_j"] is None
    assert doc["capture"]["gauge_period_s"] is None and doc["capture"]["gauge_readings"] is None
    assert doc["requests"][0]["gauge_readings_in_window"] is None
    assert doc["capture"]["current_sign_corrected"] is False
    assert doc["cross_check"]["excluded_charging_samples"] is None
    r, m = doc["requests"][0], doc["methods"][0]
    assert r["window_power_w"] == pytest.approx(analysis.requests[0].window_power_w)
    assert r["mean_power_w"] == pytest.approx(r["energy_j"] / r["response_s"])
    assert r["mean_power_w"] > r["window_power_w"]  # response 5 s of a 6 s window
    assert m["mean_power_w"] == pytest.approx(m["energy_j"] / m["response_s"])
    assert m["status"] == "ok" and m["measured_requests"] == 1
    assert doc["window_includes"] is None
    assert doc["requests"][0]["energy_j"] == pytest.approx(analysis.requests[0].energy_j)


def test_table_golden() -> None:
    from as2d_cli.energy.analysis import CrossCheck, EnergyAnalysis, RequestEnergy, pool_methods
    from as2d_cli.energy.table import NATIVE_WINDOW, render_table

    # The paper's Table 15 figures (one formal request per method), rendered as the user
    # sees them: mean power is energy / response time (341.6 J / 32.64 s = 10.47 W).
    def req(method: str, energy: float, response: float, window: float, tokens: int):
        return RequestEnergy(
            method,
            "formal",
            0,
            0,
            0,
            tokens,
            0,
            "ok",
            energy,
            energy / response,
            response,
            window,
            energy / tokens,
            100,
            None,
            energy / window,
        )

    reqs = [
        req("as2d", 239.4, 21.13, 21.5, 248),
        req("target-only", 341.6, 32.64, 33.0, 256),
    ]
    a = EnergyAnalysis(
        requests=reqs,
        methods=pool_methods(reqs, ["as2d", "target-only"], "target-only"),
        cross_check=CrossCheck(120.0, 145.9, 159.0, abs(145.9 - 159.0) / 159.0 * 100, ""),
        poll_s=0.25,
        baseline="target-only",
    )
    md, csv_text = render_table(a, {"as2d": NATIVE_WINDOW, "target-only": NATIVE_WINDOW})
    assert md == (
        "| Method | Request | Energy (J) | Mean power (W) | Response (s) | Body tokens | "
        "J/token |\n"
        "|---|---|---|---|---|---|---|\n"
        "| as2d | 1 | 239.4 | 11.33 | 21.13 | 248 | 0.965 |\n"
        "| target-only | 1 | 341.6 | 10.47 | 32.64 | 256 | 1.334 |\n"
        "\n"
        "- as2d vs target-only: energy -29.9 %, J/token -27.7 %\n"
        "- mean power = energy / response time (to target EOS), as in the paper; energy "
        "covers the window, which ends when both workers have finished\n"
        f"- as2d, target-only: {NATIVE_WINDOW}\n"
        "- cross-check over 120.0 s: current integrates to 145.90 mAh vs charge-counter drop "
        "159.00 mAh (8.2 % discrepancy)\n"
    )
    lines = csv_text.splitlines()
    assert lines[0] == (
        "method,request,status,energy_j,mean_power_w,response_s,window_s,body_tokens,j_per_token,"
        "energy_bound_j,short_window"
    )
    assert lines[1].startswith("as2d,1,ok,239.4,11.3")
    assert len(lines) == 3  # one formal request each: no pooled rows


def test_table_rows_per_request_pooled_and_a_method_that_failed() -> None:
    from as2d_cli.energy.analysis import CrossCheck, EnergyAnalysis, RequestEnergy, pool_methods
    from as2d_cli.energy.table import render_table

    def req(method: str, energy: float, response: float, status: str = "ok"):
        if status != "ok":
            return RequestEnergy(method, "formal", 0, 0, 0, 0, 137, status)
        return RequestEnergy(
            method,
            "formal",
            0,
            0,
            0,
            100,
            0,
            "ok",
            energy,
            energy / response,
            response,
            response + 1,
            energy / 100,
            50,
            None,
            energy / (response + 1),
        )

    reqs = [
        req("as2d", 60.0, 10.0),
        req("as2d", 0, 0, "failed: request exited with 137"),
        req("as2d", 90.0, 20.0),
        req("sd", 0, 0, "failed: request exited with 137"),
        req("sd", 0, 0, "failed: request exited with 137"),
    ]
    methods = pool_methods(reqs, ["as2d", "sd"], "sd")
    a = EnergyAnalysis(reqs, methods, CrossCheck(1.0, 1.0, None, None, "none"), 0.25, None)
    as2d, sd = methods
    assert (as2d.formal_requests, as2d.measured_requests, as2d.failed_requests) == (3, 2, 1)
    assert as2d.energy_j == 150.0 and as2d.mean_power_w == pytest.approx(150.0 / 30.0)
    assert as2d.window_power_w == pytest.approx(150.0 / 32.0)
    assert as2d.energy_vs_baseline_percent is None  # the baseline measured nothing
    assert sd.status.startswith("failed: all 2 formal request(s) failed (request exited")
    assert sd.energy_j is None and sd.mean_power_w is None
    md, csv_text = render_table(a)
    rows = [ln for ln in md.splitlines() if ln.startswith("| as2d") or ln.startswith("| sd")]
    assert rows == [
        "| as2d | 1 | 60.0 | 6.00 | 10.00 | 100 | 0.600 |",
        "| as2d | 2 | failed | — | — | — | — |",
        "| as2d | 3 | 90.0 | 4.50 | 20.00 | 100 | 0.900 |",
        "| as2d | pooled (2 of 3) | 150.0 | 5.00 | 30.00 | 200 | 0.750 |",
        "| sd | 1 | failed | — | — | — | — |",
        "| sd | 2 | failed | — | — | — | — |",
    ]
    assert "- sd: failed: all 2 formal request(s) failed" in md
    assert [ln.split(",")[:3] for ln in csv_text.splitlines()[1:]] == [
        ["as2d", "1", "ok"],
        ["as2d", "2", "failed: request exited with 137"],
        ["as2d", "3", "ok"],
        ["as2d", "pooled", "ok"],
        ["sd", "1", "failed: request exited with 137"],
        ["sd", "2", "failed: request exited with 137"],
        ["sd", "pooled", "failed: all 2 formal request(s) failed (request exited with 137)"],
    ]


def test_bundle_request_template_keeps_only_the_episode_placeholders() -> None:
    import shlex

    from as2d_cli.bundle.deploy import DeployedBundle
    from as2d_cli.bundle.launch import Preflight
    from as2d_cli.energy.bundle_request import bundle_request_template

    manifest = {
        "launch": {
            "pythonhome": "py",
            "pythonpath": ["site", "proj"],
            "loader": "lib/ld-linux-aarch64.so.1",
            "library_path": "lib",
            "python": "bin/python3.11",
        }
    }
    deployed = DeployedBundle(
        "s",
        "/data/local/tmp/as2d-bundle/ab{c}",
        manifest,
        "h",
        False,
        0.0,
        Preflight(8, 8, "aarch64"),
        False,
    )
    spec = '{"task":"answer","language":null,"question":"Which {word}?","text":null}'
    tpl = bundle_request_template(
        deployed, "dev-sung-004", ["--budget", "3", "--prompt-spec", spec]
    )
    plan = EpisodePlan(methods=("as2d",), request_cmd=tpl)
    plan.validate()
    line = tpl.format(
        method="as2d", phase="formal", index=7, run_dir="/data/local/tmp/as2d-e-1", min_s="2.26"
    )
    argv = shlex.split(line)
    assert argv[:4] == [
        "mkdir",
        "-p",
        "/data/local/tmp/as2d-e-1/home",
        "/data/local/tmp/as2d-e-1/tmp",
    ]
    assert "/data/local/tmp/as2d-bundle/ab{c}" in argv  # braces in real values survive
    tail = argv[argv.index("native.energy_request") + 1 :]
    assert tail == [
        "--window",
        "dev-sung-004",
        "--method",
        "as2d",
        "--result",
        "/data/local/tmp/as2d-e-1/result-7.json",
        "--min-s",
        "2.26",
        "--budget",
        "3",
        "--prompt-spec",
        spec,  # JSON's braces and quotes survive the template and the shell
    ]
    assert "HOME=/data/local/tmp/as2d-e-1/home" in argv


def test_window_includes_follows_the_command_that_ran_each_method() -> None:
    from as2d_cli.energy.table import NATIVE_WINDOW, OTHER_WINDOW, window_includes

    plan = EpisodePlan(
        methods=("as2d", "target-only"),
        request_cmd="cd {run_dir} && python -m native.energy_request --method {method}",
        method_cmds=(("target-only", "{run_dir}/energy_workload.sh 900 40"),),
    )
    from dataclasses import asdict

    got = window_includes(json.loads(json.dumps(asdict(plan))))  # as plan.json holds it
    assert got == {"as2d": NATIVE_WINDOW, "target-only": OTHER_WINDOW}
    assert "audio encoding" in NATIVE_WINDOW and "audio encoding" not in OTHER_WINDOW


ALM_PAIR = Path(__file__).resolve().parents[1] / "as2d_cli" / "assets" / "pairs" / "audio-llm"


@pytest.mark.skipif(not ALM_PAIR.exists(), reason="the audio-LLM pair is not shipped")
def test_a_native_energy_request_runs_the_task_it_is_given(tmp_path: Path) -> None:
    """`energy --task answer` reaches the phone's request as --prompt-spec: the request
    asks the window's own question; without it the pair's own task runs."""
    import subprocess
    import sys

    from as2d_cli.corpus.manifest import load_corpus

    def request(*extra: str) -> dict:
        out = tmp_path / f"r{len(extra)}.json"
        argv = ["--window", "dev-qa-000", "--method", "as2d", "--models", str(ALM_PAIR)]
        r = subprocess.run(
            [sys.executable, "-m", "native.energy_request", *argv, "--result", str(out), *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("AS2D_REQUEST body_tokens="), r.stdout
        return json.loads(out.read_text())

    asked = request("--prompt-spec", json.dumps({"task": "answer"}))
    assert asked["task"] == "answer"
    assert asked["question"] == load_corpus().get("dev-qa-000").question
    own = request()
    assert own["task"] != "answer" and own["prompt_sha256"] != asked["prompt_sha256"]
