"""Hand-computed replays: publication times, concurrency by event time, drain, serial
charges, target-only anchor (paper D.2.2: 59.391 ms per step → 16.96 TPS)."""

from __future__ import annotations

import dataclasses

import pytest
from replay_helpers import EOS, hand_profile, hand_window

from as2d_cli.engine.methods import MethodSpec
from as2d_cli.errors import FormatError, UserError
from as2d_cli.replay.driver import Prepared, replay_window
from as2d_cli.replay.producer import build_timeline

MS = 1_000_000


def as2d(budget=7, source="qwen"):
    return MethodSpec("as2d", budget=budget, source=source)


def test_publication_readiness_and_idle_cost_after_producer_finish() -> None:
    # Producer (concurrent ratio 1.5 on every segment): startup 10×1.5 = 15, five steps of
    # 20×1.5 = 30, publication 1×1.5 = 1.5 → one batch at 166.5 ms.
    # Target: K1 at 0 (concurrent, 2×50) and at 100 (concurrent): nothing published yet.
    # At 200 the batch is ready and the producer done: K3 = [2, 3, EOS] at idle 70 ms.
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(p, as2d()))
    assert r.committed == [5, 1, 2, 3, EOS]
    assert r.width_histogram == {1: 2, 3: 1}
    assert r.time_ns == 270 * MS and r.target_end_ns == 270 * MS
    d = round(166.5 * MS)
    assert (r.D, r.V, r.O, r.H) == (d, 270 * MS, d, 0)
    assert r.producer_spans == [(0, d)] and r.verifier_spans == [(0, 270 * MS)]
    assert (r.proposed, r.accepted, r.rounds) == (2, 2, 3)
    assert r.tps == pytest.approx(5 / 0.270)


def test_drain_charges_the_in_flight_producer_step() -> None:
    # Target: one concurrent K1 (100 ms) commits EOS. Producer segments: startup 10×1.5
    # [0,15), steps [15,45) [45,75) [75,105): the last is in flight at 100 and ends at 105.
    p = hand_profile(qwen_startup=10.0)
    w = hand_window([5, EOS], qwen=[5, 1, 2, 3, 4, 6, 7, 8, 9])
    r = replay_window(w, Prepared(p, as2d()))
    assert r.target_end_ns == 100 * MS and r.time_ns == 105 * MS
    assert (r.D, r.V, r.O, r.H) == (105 * MS, 100 * MS, 100 * MS, 0)
    # A step ending exactly at target EOS is not in flight: no drain (ratio 2: startup
    # [0,20), steps [20,60) [60,100)).
    p2 = hand_profile(qwen_startup=10.0, qwen_ratio=2.0)
    r2 = replay_window(w, Prepared(p2, as2d()))
    assert r2.time_ns == 100 * MS and r2.D == 100 * MS


def test_align_work_is_verifier_service_and_counts_in_time() -> None:
    p = hand_profile(align_ms=0.5)
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(p, as2d()))
    # Two concurrent K1 + 2 aligns (0.5 each, none after the EOS round) then K3 idle.
    assert r.time_ns == (100 + 0.5 + 100 + 0.5 + 70) * MS
    assert r.V == r.time_ns and r.H == 0


def test_chunked_source_publishes_whole_chunks() -> None:
    # startup 10; chunk [5,1,2] service 80 + publish 1 → ready at 91; next chunk at 172.
    p = hand_profile(chunk=80.0)
    w = hand_window([5, 1, 2, 3, 4, EOS], chunks=[[5, 1, 2], [3, 4, EOS]])
    tl = build_timeline("chunky", w.sources["chunky"], p.source("chunky"), 8)
    assert [pub.at for pub in tl.publications] == [91 * MS, 172 * MS]
    assert [pub.tokens for pub in tl.publications] == [(5, 1, 2), (3, 4, EOS)]
    assert tl.publications[0].confidences is None
    r = replay_window(w, Prepared(p, as2d(source="chunky")))
    assert r.committed == [5, 1, 2, 3, 4, EOS] and r.source == "chunky"
    # K1 at 0 (concurrent 100); at 100 only [2] is usable after root 1: K2 concurrent
    # (2×60 → 220) commits 2 and bonus 3; at 220 [4, EOS] is ready, the producer done
    # since 172: K3 idle 70 → 290.
    assert r.width_histogram == {1: 1, 2: 1, 3: 1}
    assert r.time_ns == 290 * MS
    assert (r.D, r.V, r.O, r.H) == (172 * MS, 290 * MS, 172 * MS, 0)


def test_ineligible_source_falls_back_to_the_default_source() -> None:
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, EOS], chunks=[[5, 1, 2, 3, EOS]], eligible=False)
    r = replay_window(w, Prepared(p, as2d(source="chunky")))
    assert r.source == "qwen" and r.time_ns == 270 * MS


def test_autoregressive_batches_of_eight_and_final_partial_batch() -> None:
    p = hand_profile()
    toks = list(range(1, 20))
    w = hand_window([5, EOS], qwen=toks)
    tl = build_timeline("qwen", w.sources["qwen"], p.source("qwen"), 8)
    # startup 15, steps of 30, publication 1.5 after every 8 tokens and after the last 3
    # (all at the concurrent ratio 1.5).
    assert [pub.at for pub in tl.publications] == [
        round((15 + 240 + 1.5) * MS),
        round((15 + 480 + 3) * MS),
        round((15 + 570 + 4.5) * MS),
    ]
    assert [len(pub.tokens) for pub in tl.publications] == [8, 8, 3]
    assert tl.finish == round(589.5 * MS)


def test_standard_sd_charges_drafts_catch_up_verification_and_loop() -> None:
    # K3, perfect drafter: round 1 drafts 2 (20) + K3 (70) + loop (5) commits 1 2 3;
    # round 2 drafts 2 plus one catch-up (30) + K3 (70) + loop (5), EOS accepted.
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(p, MethodSpec("sd", k=3)))
    assert r.committed == [5, 1, 2, 3, EOS]
    assert r.time_ns == 200 * MS
    assert (r.D, r.V, r.O, r.H) == (50 * MS, 140 * MS, 0, 10 * MS)


def test_target_only_is_n_minus_one_steps() -> None:
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(p, MethodSpec("target-only")))
    assert r.time_ns == 4 * 45 * MS and (r.D, r.V, r.O, r.H) == (0, 180 * MS, 0, 0)


def test_missing_width_is_refused_before_any_window() -> None:
    p = hand_profile(widths=range(1, 9))
    with pytest.raises(FormatError, match="K9"):
        Prepared(p, MethodSpec("sd", k=9))
    with pytest.raises(FormatError, match="K9"):
        Prepared(p, as2d(budget=8)).table("qwen")


def test_drafter_cap_too_small_is_refused() -> None:
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, EOS], cap=4)
    with pytest.raises(FormatError, match="window w0: drafter continuations hold 4"):
        replay_window(w, Prepared(p, MethodSpec("sd", k=6)))


def test_reference_and_cap_disagreeing_is_one_clear_error() -> None:
    p = hand_profile()
    w = hand_window([5, 1, 2, 3, 4], max_tokens=64)  # no EOS, yet shorter than the cap
    with pytest.raises(FormatError, match="window w0"):
        replay_window(w, Prepared(p, MethodSpec("target-only")))


def test_unknown_source_is_a_user_error() -> None:
    p = hand_profile()
    w = hand_window([5, 1, EOS])
    with pytest.raises(UserError, match="no source 'nope'"):
        replay_window(w, Prepared(p, as2d(source="nope")))


def test_anchor_target_only_paper_table8() -> None:
    from as2d_cli.replay.run import run_method
    from as2d_cli.synthetic import synthetic_profile, synthetic_traces

    ts = synthetic_traces(drafter=False)
    assert len(ts) == 688 and ts.n_tokens == 94_511
    prof = synthetic_profile()
    assert prof.target_step_ms == 59.391
    run = run_method(ts.windows, prof, "target-only", detail=False)
    total = sum(r.time_ns for r in run.windows)
    assert total == (94_511 - 688) * 59_391_000  # the first token of each window is free
    assert round(run.pooled_tps(), 2) == 16.96


def test_prices_agree_with_the_profiles_own_op_pricing() -> None:
    from as2d_cli.engine.clock import Op
    from as2d_cli.formats.profile import ms_to_ns
    from as2d_cli.replay.driver import decoupled_price
    from as2d_cli.replay.pricing import serial_price
    from as2d_cli.synthetic import synthetic_profile

    prof = synthetic_profile()
    price = serial_price(prof, 25)
    ops = (
        [Op("verify", width=k) for k in range(1, 26)]
        + [
            Op("draft", count=c, catch_up=u, rows=r)
            for c in (0, 1, 7, 24)
            for u in (0, 1)
            for r in (0, 3)
        ]
        + [Op("paired", rows=1), Op("loop")]
        + [Op("refresh", width=w) for w in range(1, 25)]
    )
    for op in ops:
        assert price(op, 0) == ms_to_ns(prof.op_ms(op)), op
    prep = Prepared(prof, as2d(budget=24, source="parakeet"))
    dp = decoupled_price(prep.table("parakeet"), prep.align_ns, finish=10)
    for k in range(1, 26):
        assert dp(Op("verify", width=k), 9) == ms_to_ns(
            prof.op_ms(Op("verify", width=k), True, "parakeet")
        )
        assert dp(Op("verify", width=k), 10) == ms_to_ns(prof.op_ms(Op("verify", width=k)))
    assert dp(Op("align"), 0) == ms_to_ns(prof.align_ms)


def test_missing_drafter_and_source_kind_mismatch_are_clear_errors() -> None:
    import dataclasses

    from as2d_cli.formats.profile import SourceCosts

    p = hand_profile()
    w = dataclasses.replace(hand_window([5, 1, 2, 3, EOS]), drafter=None)
    with pytest.raises(FormatError, match="window w0: no drafter continuations"):
        replay_window(w, Prepared(p, MethodSpec("asp", budget=4)))
    chunked_qwen = dataclasses.replace(
        p, sources={**p.sources, "qwen": SourceCosts("qwen", "chunked", chunk_ms_idle=5.0)}
    )
    with pytest.raises(FormatError, match="autoregressive in the trace but chunked in the profile"):
        replay_window(hand_window([5, 1, EOS]), Prepared(chunked_qwen, as2d()))


def test_a_self_speculating_source_pays_per_step_not_per_token() -> None:
    # 19 tokens in 12 steps of 30 ms (seven of them emit two tokens) after a startup of 15;
    # with batch 8 a publication (1.5 ms) follows the step that brings the pending tokens to
    # 8 or more: 1+2+2+2+1 = 8 after step 5, 2+2+2+1+2 = 9 after step 10, the last 2 at
    # the end.
    p = hand_profile()
    toks = list(range(1, 20))
    steps = (1, 2, 2, 2, 1, 2, 2, 2, 1, 2, 1, 1)
    w = hand_window([5, EOS], qwen=toks)
    src = dataclasses.replace(w.sources["qwen"], steps=steps)
    tl = build_timeline("qwen", src, p.source("qwen"), 8)
    assert [len(pub.tokens) for pub in tl.publications] == [8, 9, 2]
    assert [pub.at for pub in tl.publications] == [
        round((15 + 5 * 30 + 1.5) * MS),
        round((15 + 10 * 30 + 3) * MS),
        round((15 + 12 * 30 + 4.5) * MS),
    ]
    assert sum((pub.tokens for pub in tl.publications), ()) == tuple(toks)
    assert [k for k in tl.kinds if k == "step"] == ["step"] * len(steps)
    # Batch 1: every step publishes what it emitted, at once.
    tl1 = build_timeline("qwen", src, p.source("qwen"), 1)
    assert [len(pub.tokens) for pub in tl1.publications] == list(steps)
    # Steps that do not account for the tokens are refused.
    bad = dataclasses.replace(src, steps=steps[:-1])
    with pytest.raises(FormatError, match="steps"):
        build_timeline("qwen", bad, p.source("qwen"), 8)
