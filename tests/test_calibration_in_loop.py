"""In-loop costs: the fit recovers what calls cost inside each method's loop from native
episode samples, and the replay charges those ratios (hand-computed checks)."""

from __future__ import annotations

import dataclasses

import pytest
from replay_helpers import EOS, hand_profile, hand_window
from test_calibration import _synthetic_samples

from as2d_cli.calibration.fit import fit_profile
from as2d_cli.calibration.in_loop import _Pricer, apply_in_loop
from as2d_cli.engine.methods import MethodSpec
from as2d_cli.replay.driver import Prepared, replay_window

AUDIO = (5.0, 8.0, 12.0)


def _target_only_samples() -> list[dict]:
    """A device whose in-loop K1 step is 0.4 + 0.003·(cache − 64) + 0.02·(audio − 12) ms,
    with 0.05 ms of loop bookkeeping per round outside the calls."""
    out = []
    for a in AUDIO:
        for p in range(0, 100, 3):
            out.append(
                {
                    "figure": "loop.target-only.target_step",
                    "ms": 0.4 + 0.003 * (p - 64) + 0.02 * (a - 12),
                    "position": p,
                    "audio_s": a,
                    "width": 0,
                }
            )
        out.append(
            {
                "figure": "loop.target-only.episode",
                "ms": 10.0,
                "rounds": 34,
                "unaccounted_ms": 34 * 0.05,
                "audio_s": a,
            }
        )
    return out


def _method_samples(pricer: _Pricer) -> list[dict]:
    """SD, ASP and As²d ops costing known multiples of what the profile prices them at."""
    out = []
    for a in AUDIO:
        for p in range(0, 60, 6):
            base = {"position": p, "audio_s": a}
            v = {**base, "width": 4}
            out.append({**v, "figure": "loop.sd.verify", "ms": 1.3 * pricer.op(v, "verify")})
            d = {**base, "count": 3, "catch_up": 1, "rows": 0}
            out.append({**d, "figure": "loop.sd.draft", "ms": 1.1 * pricer.op(d, "draft")})
            out.append({**base, "figure": "loop.sd.loop", "ms": 0.02, "width": 0})
            out.append({**v, "figure": "loop.asp.verify", "ms": 1.05 * pricer.op(v, "verify")})
            out.append(
                {
                    **v,
                    "figure": "loop.as2d:drafter.verify",
                    "ms": 1.25 * pricer.op(v, "verify"),
                    "concurrent": True,
                }
            )
            out.append(
                {
                    **v,
                    "figure": "loop.as2d:drafter.verify",
                    "ms": 0.9 * pricer.op(v, "verify"),
                    "concurrent": False,
                }
            )
            out.append({**base, "figure": "loop.as2d:drafter.align", "ms": 0.01, "width": 0})
        out.append(
            {
                "figure": "loop.sd.episode",
                "ms": 50.0,
                "rounds": 10,
                "unaccounted_ms": 0.3,
                "audio_s": a,
            }
        )
        out.append(
            {
                "figure": "loop.as2d:drafter.episode",
                "ms": 50.0,
                "rounds": 10,
                "unaccounted_ms": 0.1,
                "audio_s": a,
            }
        )
        out.append(
            {
                "figure": "loop.as2d:drafter.source_step",
                "ms": 3.0 * a,
                "index": 0,
                "tokens": 0,
                "concurrent": True,
                "audio_s": a,
            }
        )
        src = pricer.p.source("drafter")
        for i in range(1, 30):
            pred = src.step_ms_idle + pricer.ctx.drafter_ms(i - 1, a)
            out.append(
                {
                    "figure": "loop.as2d:drafter.source_step",
                    "ms": 1.5 * pred,
                    "index": i,
                    "tokens": 1,
                    "concurrent": True,
                    "audio_s": a,
                }
            )
        out.append(
            {
                "figure": "loop.as2d:drafter.source_step",
                "ms": 99.0,
                "index": 30,
                "tokens": 1,
                "concurrent": False,
                "audio_s": a,
            }
        )  # after the target's end: not a concurrent step
    return out


def test_fit_recovers_in_loop_costs() -> None:
    sweeps = _synthetic_samples()
    only_step = fit_profile(sweeps + _target_only_samples(), {"name": "s"}, ref_audio_s=12.0)
    c = only_step.context
    assert only_step.target_step_ms == pytest.approx(0.4 + 0.05, abs=1e-9)
    assert c.target_ms_per_token == pytest.approx(
        0.003
    ) and c.target_ms_per_audio_s == pytest.approx(0.02)
    # The sweeps' per-width growth stays: K4's slope is the new K1 slope plus 3 increments.
    sweep_ctx = fit_profile(sweeps, {"name": "s"}, ref_audio_s=12.0).context
    assert c.target_ms_per_token_per_width == pytest.approx(sweep_ctx.target_ms_per_token_per_width)

    p = fit_profile(
        sweeps + _target_only_samples() + _method_samples(_Pricer(only_step)),
        {"name": "s"},
        ref_audio_s=12.0,
    )
    # The in-loop slopes move the prices a little, so the ratios come out near (not at) the
    # generating multiples; what they must do exactly is reproduce the measured time.
    expect = {
        ("sd", "verify"): 1.3,
        ("sd", "draft"): 1.1,
        ("asp", "verify"): 1.05,
        ("as2d", "verify"): 0.9,
    }
    assert {(f, k) for f, d in p.in_loop.items() for k in d} == set(expect)
    final = _Pricer(p)
    samples = _method_samples(_Pricer(only_step))
    for (fam, kind), mult in expect.items():
        fig = f"loop.{'as2d:drafter' if fam == 'as2d' else fam}.{kind}"
        ops = [s for s in samples if s["figure"] == fig and (fam != "as2d" or not s["concurrent"])]
        r = p.in_loop_ratio(fam, kind)
        assert r == pytest.approx(mult, rel=0.1)
        assert r * sum(final.op(s, kind) for s in ops) == pytest.approx(
            sum(s["ms"] for s in ops), rel=1e-9
        )
    assert p.loop_ms == pytest.approx((3 * 0.3 + 30 * 0.02) / 30)
    assert p.align_ms == pytest.approx((30 * 0.01 + 3 * 0.1) / 30)
    src = p.source("drafter")
    conc = [s for s in samples if s["figure"] == "loop.as2d:drafter.verify" and s["concurrent"]]
    r = src.verify_concurrent_ratio[4]
    assert set(src.verify_concurrent_ratio.values()) == {r} and set(
        src.verify_concurrent_ratio
    ) == set(p.widths)
    assert r == pytest.approx(1.25, rel=0.1)
    assert r * sum(final.op(s, "verify") for s in conc) == pytest.approx(
        sum(s["ms"] for s in conc), rel=1e-9
    )
    assert src.concurrent_ratio == pytest.approx(1.5, rel=0.1)
    # The profile keeps the idle figure; the replay's concurrent ratio gives the observed back.
    r_src = src.concurrent_ratio
    assert src.startup_ms * r_src == pytest.approx(36.0)
    assert src.startup_ms_per_audio_s * r_src == pytest.approx(3.0)


def test_no_episodes_leaves_the_sweep_profile() -> None:
    p = fit_profile(_synthetic_samples(), {"name": "s"}, ref_audio_s=12.0)
    assert p.in_loop is None and apply_in_loop(p, []) is p


def test_replay_scales_each_op_by_its_family_ratio() -> None:
    w = hand_window([5, 1, 2, 3, EOS], chunks=[[1, 2], [3]])
    flat = hand_profile()
    scaled = dataclasses.replace(flat, in_loop={"sd": {"verify": 2.0, "draft": 1.5}})
    a = replay_window(w, Prepared(flat, MethodSpec("sd", k=3)))
    b = replay_window(w, Prepared(scaled, MethodSpec("sd", k=3)))
    assert b.V == 2 * a.V and b.D == int(1.5 * a.D) and b.H == a.H
    for spec in (
        MethodSpec("target-only"),
        MethodSpec("asp", budget=3),
    ):  # other families: unchanged
        assert (
            replay_window(w, Prepared(scaled, spec)).time_ns
            == replay_window(w, Prepared(flat, spec)).time_ns
        )


def test_as2d_ratio_applies_only_after_the_producer_finished() -> None:
    w = hand_window([5, 1, 2, 3, 4, 6, 8, 9, EOS], qwen=[5, 1, 2])  # the producer ends early
    flat = hand_profile()
    spec = MethodSpec("as2d", budget=2, source="qwen")
    t = [
        replay_window(
            w, Prepared(dataclasses.replace(flat, in_loop={"as2d": {"verify": r}}), spec)
        ).time_ns
        for r in (1.0, 2.0, 3.0)
    ]
    assert t[0] == replay_window(w, Prepared(flat, spec)).time_ns
    after = t[1] - t[0]  # the idle calls after the producer's end, each charged once more
    assert after > 0 and t[2] - t[1] == after
    assert after % (10 * 1_000_000) == 0  # a sum of idle figures (50 + 10·(K − 1) ms)
    assert after < t[0] - 101 * 1_000_000  # the calls during the producer's 101 ms are not scaled


def test_in_loop_drafting_gives_the_drafter_slopes() -> None:
    """Serial drafting ops whose forwards cost 0.2 + 0.001·(cache − 64) + 0.01·(audio − 12)
    ms each (every forward at its own cache length) give exactly those slopes."""
    base = fit_profile(_synthetic_samples(), {"name": "s"}, ref_audio_s=12.0)
    ops = []
    for a in AUDIO:
        for p in range(0, 90, 7):
            for n in (1, 3, 7):
                ms = sum(0.2 + 0.001 * (p + i - 64) + 0.01 * (a - 12) for i in range(n))
                ops.append(
                    {
                        "figure": "loop.sd.draft",
                        "ms": ms,
                        "count": n,
                        "catch_up": 0,
                        "rows": 0,
                        "position": p,
                        "audio_s": a,
                    }
                )
    c = apply_in_loop(base, ops).context
    assert c.drafter_ms_per_token == pytest.approx(
        0.001
    ) and c.drafter_ms_per_audio_s == pytest.approx(0.01)


def test_a_preempted_repetition_does_not_move_the_fitted_step() -> None:
    """Three repetitions per window, one of them run by a host that was twice as slow
    throughout: the fitted step is the typical repetition's (evaluation compares the replay
    with the median native run), where a plain mean would raise it by a third."""
    rows = []
    for a in AUDIO:
        w = f"w{a}"
        for rep, slow in enumerate((1.0, 2.0, 1.0)):
            for s in _target_only_samples():
                if s.get("audio_s") == a and s["figure"].endswith("target_step"):
                    rows.append({**s, "ms": s["ms"] * slow, "window": w, "rep": rep})
            rows.append(
                {
                    "figure": "loop.target-only.episode",
                    "ms": 10.0,
                    "rounds": 34,
                    "unaccounted_ms": 34 * 0.05,
                    "audio_s": a,
                    "window": w,
                    "rep": rep,
                }
            )
    p = fit_profile(_synthetic_samples() + rows, {"name": "s"}, ref_audio_s=12.0)
    assert p.target_step_ms == pytest.approx(0.4 + 0.05, rel=0.02)
    plain = fit_profile(
        _synthetic_samples() + [{k: v for k, v in r.items() if k != "rep"} for r in rows],
        {"name": "s"},
        ref_audio_s=12.0,
    )
    assert plain.target_step_ms > 0.4 + 0.05 + 0.1


def test_startup_is_what_the_first_publication_waits_for() -> None:
    """With decode-clock end times, the startup is the first step's end (a chunked source:
    the first chunk's end less the steady chunk), so the hand-over's wake-up and a cold
    first chunk are charged; older samples keep the first step's own duration."""
    from as2d_cli.calibration.in_loop import _startup

    ctc = [
        {"index": 0, "ms": 0.006, "end_ms": 1.5, "tokens": 0},
        {"index": 1, "ms": 9.0, "end_ms": 12.0, "tokens": 5},
        {"index": 2, "ms": 8.0, "end_ms": 20.0, "tokens": 4},
    ] * 2
    assert _startup(ctc, None, chunk_ms=8.0) == pytest.approx((4.0, 0.0))
    old = [{k: v for k, v in s.items() if k != "end_ms"} for s in ctc]
    assert _startup(old, None, chunk_ms=8.0) == pytest.approx((0.006, 0.0))
    drafter = [
        {"index": 0, "ms": 20.0, "end_ms": 23.0, "tokens": 0},
        {"index": 1, "ms": 0.6, "end_ms": 23.6, "tokens": 1},
    ]
    assert _startup(drafter, None) == pytest.approx((23.0, 0.0))
    assert _startup([], None) is None


def test_a_cold_first_chunk_is_charged_once() -> None:
    """A chunked source whose first chunk costs 20 ms and every later one 8 ms: on the
    decode clock the first chunk's excess is startup, and the steady ratio sees only the
    later chunks (8 ms against the profile's idle chunk); older samples keep it in both."""
    from as2d_cli.formats.profile import SourceCosts

    fitted = fit_profile(_synthetic_samples(), {"name": "s"}, ref_audio_s=12.0)
    idle = 6.0
    chunked = SourceCosts(
        name="parakeet",
        kind="chunked",
        step_ms_idle=0.0,
        chunk_ms_idle=idle,
        publish_ms=0.0,
        startup_ms=1.0,
        concurrent_ratio=1.0,
    )
    base = dataclasses.replace(fitted, sources={**fitted.sources, "parakeet": chunked})
    steps = []
    for _rep in range(3):
        end = 0.5
        steps.append(
            {
                "figure": "loop.as2d:parakeet.source_step",
                "ms": 0.01,
                "index": 0,
                "tokens": 0,
                "concurrent": True,
                "end_ms": end,
            }
        )
        for i in range(1, 7):
            ms = 20.0 if i == 1 else 8.0
            end += ms
            steps.append(
                {
                    "figure": "loop.as2d:parakeet.source_step",
                    "ms": ms,
                    "index": i,
                    "tokens": 4,
                    "concurrent": True,
                    "end_ms": end,
                }
            )
    src = apply_in_loop(base, steps).source("parakeet")
    assert src.concurrent_ratio == pytest.approx(8.0 / idle)
    assert src.startup_ms * src.concurrent_ratio == pytest.approx(20.5 - 8.0)
    old = apply_in_loop(
        base, [{k: v for k, v in s.items() if k != "end_ms"} for s in steps]
    ).source("parakeet")
    assert old.concurrent_ratio == pytest.approx((20.0 + 5 * 8.0) / (6 * idle))


def test_episode_source_steps_carry_the_sources_cache_length() -> None:
    """A lookahead step emits one or two tokens: each step's ``position`` is the tokens the
    source emitted before it (its start emits none), which prices its context terms."""
    from native.calibration import episode_samples

    ms = 1_000_000
    steps = [0, 1, 2, 2, 1]
    events = [
        {
            "op": "source_step",
            "stage": "producer",
            "t_ns": i * ms,
            "end_ns": (i + 1) * ms,
            "tokens": n,
        }
        for i, n in enumerate(steps)
    ]
    res = {"rounds": [], "events": events, "n_tokens": 6, "producer_finished_ms": 5.0}
    got = [
        s for s in episode_samples("as2d:lookahead", res, 0) if s["figure"].endswith("source_step")
    ]
    assert [s["position"] for s in got] == [0, 0, 1, 3, 5]
    assert [s["tokens"] for s in got] == steps
