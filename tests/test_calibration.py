"""`as2d calibrate` on the local host: probes through the real runner, an interrupted run
resumes from its saved samples, and the fitted profile loads back with only measured widths."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from as2d_cli.calibration.fit import savings
from as2d_cli.calibration.in_loop import MIN_SAMPLES
from as2d_cli.calibration.plan import Step, make_plan
from as2d_cli.calibration.run import CalibrationSettings, _Partial, calibrate, calibration_windows
from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.launch.host import default_cores
from device_agents.gating import GateConfig
from device_agents.local import LocalHost

# The local gate without its once-per-run wait for a quiet host (tested in test_devices_gating).
NO_SETTLE = replace(GateConfig.for_device(LocalHost()), settle_s=0.0)


def mini_plan(window: str) -> list[Step]:
    """The full plan's structure at test size."""
    steps = []
    for producer in (False, True):
        steps.append(
            Step(
                f"verify-{producer}",
                "verify",
                {
                    "op": "calibrate",
                    "what": "verify",
                    "window": window,
                    "widths": [1, 2, 4],
                    "offsets": [0, 8],
                    "warmup": 1,
                    "reps": 2,
                    "producer": producer,
                },
                1,
            )
        )
    steps += [
        Step(
            "target-step",
            "target",
            {"op": "calibrate", "what": "target_step", "window": window, "reps": 6},
            1,
        ),
        Step(
            "source-drafter",
            "src",
            {
                "op": "calibrate",
                "what": "source",
                "source": "drafter",
                "window": window,
                "limit": 24,
            },
            1,
        ),
        Step(
            "source-ctc",
            "ctc",
            {"op": "calibrate", "what": "source", "source": "ctc", "window": window},
            1,
        ),
        Step(
            "drafter",
            "drafter",
            {
                "op": "calibrate",
                "what": "drafter",
                "window": window,
                "reps": 1,
                "widths": [1, 2, 3],
            },
            1,
        ),
        Step(
            "loop",
            "loop",
            {"op": "calibrate", "what": "loop", "window": window, "reps": 1, "max_tokens": 24},
            1,
        ),
        Step(
            "episodes",
            "episodes",
            {
                "op": "calibrate",
                "what": "episodes",
                "window": window,
                "reps": 1,
                "methods": [
                    {"method": "target-only", "max_tokens": 24},
                    {"method": "sd", "k": 2, "max_tokens": 24},
                    {"method": "asp", "budget": 1, "max_tokens": 24},
                    {"method": "as2d", "source": "drafter", "budget": 1, "max_tokens": 24},
                ],
            },
            1,
        ),
    ]
    return steps


def test_full_plan_shape() -> None:
    plan = make_plan("w")
    verify = [s for s in plan if s.command["what"] == "verify"]
    assert len(verify) == 6  # offsets 0, 64, 128 × idle/concurrent
    assert all(
        s.command["widths"] == list(range(1, 17))
        and s.command["reps"] == 5
        and s.command["warmup"] == 1
        for s in verify
    )


def test_plan_measures_a_second_shorter_window_for_audio_terms() -> None:
    from as2d_cli.calibration.run import short_calibration_window
    from as2d_cli.corpus.manifest import load_corpus

    main, _ = calibration_windows()
    short = short_calibration_window(main)
    corpus = load_corpus()
    assert short is not None and short.startswith("dev-")
    assert corpus.get(short).seconds < 0.6 * corpus.get(main).seconds
    plan = make_plan(main, short_window=short)
    extra = [s for s in plan if s.command.get("window") == short]
    assert [s.key for s in extra] == ["verify-idle-short", "source-drafter-short"]
    assert extra[0].command["producer"] is False and extra[0].command["offsets"] == [0, 64]


def test_a_bad_window_is_refused_before_anything_runs(tmp_path) -> None:
    """--window: an unknown id or a test window is one clear error; no run starts, nothing is written."""
    test_id = load_corpus().split("test")[0].id
    for window, says in [("nosuch", "no window 'nosuch'"), (test_id, "is a test window")]:
        with pytest.raises(UserError, match=says):
            calibrate(
                LocalHost(),
                CalibrationSettings(out_dir=tmp_path, window=window, gate=NO_SETTLE),
                open_runner=lambda *a, **k: pytest.fail("a runner was started"),
            )
    assert not list(tmp_path.iterdir())


def test_interrupted_calibration_resumes_and_writes_profile(tmp_path) -> None:
    window, _ = calibration_windows()
    assert window.startswith("dev-")  # calibration audio is kept apart from the test split
    plan = mini_plan(window)
    device = LocalHost()
    seen: list[str] = []

    def stop_at_third(label: str, done: float, total: float) -> None:
        seen.append(label)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(
            device,
            CalibrationSettings(out_dir=tmp_path, plan=plan, cores=default_cores(), gate=NO_SETTLE),
            progress=stop_at_third,
        )
    partial = next((tmp_path / ".partial").iterdir())
    kept = _Partial(partial).samples()  # the committed steps' samples
    assert {s["step"] for s in kept} == {"verify-False", "verify-True"}
    assert _Partial(partial).done() == ["verify-False", "verify-True"]

    res = calibrate(
        device,
        CalibrationSettings(out_dir=tmp_path, plan=plan, cores=default_cores(), gate=NO_SETTLE),
    )
    assert res.resumed_steps == 2 and res.steps == len(plan)
    assert not (tmp_path / ".partial" / partial.name).exists()
    prof = load_profile(res.profile_path)
    assert prof.widths == (1, 2, 4)
    assert all(prof.verify_concurrent_ratio[k] > 0 for k in prof.widths)
    assert (
        prof.target_step_ms > 0
        and prof.drafter is not None
        and set(prof.sources) == {"drafter", "ctc"}
    )
    with pytest.raises(FormatError, match="K8"):
        prof.verify_ms(8)
    samples = [json.loads(x) for x in res.samples_path.read_text().splitlines()]
    assert (
        sum(1 for s in samples if s["figure"] == "verify.K4" and not s["concurrent"]) == 4
    )  # 2 offsets × 2 reps
    # Native episodes: every charged op of each method, with the cache length it started from.
    figs = {s["figure"] for s in samples if s["figure"].startswith("loop.")}
    assert {
        "loop.target-only.target_step",
        "loop.sd.verify",
        "loop.sd.draft",
        "loop.asp.verify",
        "loop.as2d:drafter.verify",
        "loop.as2d:drafter.source_step",
        "loop.as2d:drafter.episode",
    } <= figs
    steps = [s for s in samples if s["figure"] == "loop.target-only.target_step"]
    assert [s["position"] for s in steps] == list(range(len(steps))) and 10 <= len(steps) <= 23
    # (Their size depends on the machine's load; the fit itself is checked on known costs in
    # test_calibration_in_loop.py.)
    assert (
        prof.in_loop
        and {"sd", "asp"} <= set(prof.in_loop)
        and all(math.isfinite(r) and r > 0 for fam in prof.in_loop.values() for r in fam.values())
    )
    # The drafter's own verify ratio needs MIN_SAMPLES priceable verifies that ran beside it;
    # how many there are depends on the machine's load, so check the rule both ways.
    beside = [
        s
        for s in samples
        if s["figure"] == "loop.as2d:drafter.verify"
        and s.get("concurrent")
        and int(s["width"]) in prof.widths
    ]
    assert bool(prof.source("drafter").verify_concurrent_ratio) == (len(beside) >= MIN_SAMPLES)
    assert res.plot_path.stat().st_size > 1000 and res.plot_path.read_bytes()[:4] == b"\x89PNG"
    assert set(savings(prof)) == {1, 2, 4} and savings(prof)[1] == pytest.approx(0.0)
    # A second calibration never overwrites the first profile.
    res2 = calibrate(
        device,
        CalibrationSettings(
            out_dir=tmp_path, plan=plan[:1] + plan[2:], cores=default_cores(), gate=NO_SETTLE
        ),
    )
    assert res2.profile_path != res.profile_path and res.profile_path.exists()


def _synthetic_samples(
    t_tok=0.004, t_aud=0.05, d_tok=0.001, d_aud=0.01, main=12.0, short=5.0
) -> list[dict]:
    """Samples a device with linear context costs would produce (deterministic jitter)."""
    out: list[dict] = []
    jit = [0.0, 0.01, -0.01, 0.005, -0.005]
    for audio in (main, short):
        for off in (0, 64, 128) if audio == main else (0, 64):
            for k in (1, 2, 4, 8):
                for r, j in enumerate(jit):
                    ms = 0.5 + 0.05 * k + t_tok * off + t_aud * audio + j
                    out.append(
                        {
                            "figure": f"verify.K{k}",
                            "width": k,
                            "offset": off,
                            "ms": ms,
                            "audio_s": audio,
                            "concurrent": False,
                            "rep": r,
                        }
                    )
                    if audio == main:
                        out.append(
                            {
                                "figure": f"verify.K{k}",
                                "width": k,
                                "offset": off,
                                "ms": 1.2 * ms,
                                "audio_s": audio,
                                "concurrent": True,
                                "rep": r,
                            }
                        )
        for i in range(100):
            out.append(
                {
                    "figure": "sources.drafter.step",
                    "ms": 0.1 + d_tok * i + d_aud * audio,
                    "position": i,
                    "rep": i,
                    "audio_s": audio,
                }
            )
        out.append(
            {"figure": "sources.drafter.startup", "ms": 2.0 * audio, "audio_s": audio, "rep": 0}
        )
    for p in range(0, 200, 10):
        out.append(
            {
                "figure": "target_step",
                "ms": 0.5 + 0.05 + t_tok * p + t_aud * main,
                "position": p,
                "audio_s": main,
            }
        )
    for fig in ("drafter.step", "drafter.catch_up", "drafter.paired", "drafter.row"):
        out.append({"figure": fig, "ms": 0.2, "audio_s": main, "rep": 0})
    return out


def test_fit_recovers_context_terms_and_quotes_figures_at_the_reference() -> None:
    from as2d_cli.calibration.fit import fit_profile

    p = fit_profile(_synthetic_samples(), {"name": "synthetic"}, ref_audio_s=12.0)
    c = p.context
    assert c is not None and c.ref_tokens == 64 and c.ref_audio_s == 12.0
    assert c.target_ms_per_token == pytest.approx(0.004, rel=1e-3)
    assert c.target_ms_per_audio_s == pytest.approx(0.05, rel=1e-3)
    assert c.drafter_ms_per_token == pytest.approx(0.001, rel=1e-6)
    assert c.drafter_ms_per_audio_s == pytest.approx(0.01, rel=1e-6)
    # K4 at cache 64 on the 12 s window: 0.5 + 0.2 + 0.256 + 0.6.
    assert p.verify_idle_ms[4] == pytest.approx(1.556, abs=1e-3)
    assert p.target_step_ms == pytest.approx(0.5 + 0.05 + 0.256 + 0.6, abs=1e-6)
    assert p.verify_concurrent_ratio[4] == pytest.approx(1.2, rel=1e-3)
    src = p.source("drafter")
    assert src.step_ms_idle == pytest.approx(0.1 + 0.064 + 0.12, abs=1e-6)
    assert src.startup_ms == pytest.approx(24.0) and src.startup_ms_per_audio_s == pytest.approx(
        2.0
    )
    # The serial drafter probe ran at cache 17: its step is moved to the reference cache.
    assert p.drafter is not None and p.drafter.step_ms == pytest.approx(0.2 + 0.001 * (64 - 17))


def test_fit_prices_the_lookahead_source_per_forward_at_the_reference_cache() -> None:
    """Its steps emit one or two tokens; ``position`` is the tokens before each step, so its
    step is quoted at the reference cache like the drafter's, and it pays the drafter's
    concurrent ratio."""
    from as2d_cli.calibration.fit import fit_profile

    samples = _synthetic_samples()
    pos = 0
    for i in range(60):
        samples.append(
            {
                "figure": "sources.lookahead.step",
                "ms": 0.13 + 0.001 * pos + 0.01 * 12.0,
                "position": pos,
                "tokens": 1 + i % 2,
                "rep": i,
                "audio_s": 12.0,
            }
        )
        pos += 1 + i % 2
    samples.append({"figure": "sources.lookahead.startup", "ms": 3.0, "audio_s": 12.0, "rep": 0})
    p = fit_profile(samples, {"name": "synthetic"}, ref_audio_s=12.0)
    la, dr = p.source("lookahead"), p.source("drafter")
    assert la.kind == "autoregressive" and la.startup_ms == pytest.approx(3.0)
    assert la.step_ms_idle == pytest.approx(0.13 + 0.064 + 0.12, abs=1e-6)
    assert la.concurrent_ratio == dr.concurrent_ratio
    assert (
        "lookahead"
        not in fit_profile(_synthetic_samples(), {"name": "s"}, ref_audio_s=12.0).sources
    )


def test_fit_recovers_slopes_that_grow_with_the_width() -> None:
    from as2d_cli.calibration.fit import fit_profile

    samples = _synthetic_samples(t_aud=0.0)
    for s in samples:  # the audio slope grows by 0.01 ms/s per extra query token
        if s["figure"].startswith("verify.K"):
            s["ms"] += (
                (0.02 + 0.01 * (s["width"] - 1)) * s["audio_s"] * (1.2 if s["concurrent"] else 1.0)
            )
    c = fit_profile(samples, {"name": "w"}, ref_audio_s=12.0).context
    assert c is not None
    assert c.target_ms_per_audio_s == pytest.approx(0.02, abs=1e-3)
    assert c.target_ms_per_audio_s_per_width == pytest.approx(0.01, abs=1e-4)
    assert c.target_ms(64, 5.0, 8) == pytest.approx(-(0.02 + 0.07) * 7, rel=1e-2)


def test_fit_without_a_span_stays_flat() -> None:
    from as2d_cli.calibration.fit import fit_profile

    samples = [
        s for s in _synthetic_samples() if s.get("audio_s") == 12.0 and s.get("offset", 0) == 0
    ]
    assert fit_profile(samples, {"name": "flat"}, ref_audio_s=12.0).context is None
    assert fit_profile(_synthetic_samples(), {"name": "no ref"}).context is None
