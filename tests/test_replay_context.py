"""Context terms (profile v2): calls priced at the window's audio length and the cache
length they start from, checked against hand-computed times."""

from __future__ import annotations

import dataclasses

import pytest
from replay_helpers import EOS, hand_profile, hand_window

from as2d_cli.engine.methods import MethodSpec
from as2d_cli.formats.profile import ContextCosts
from as2d_cli.replay.driver import Prepared, replay_window
from as2d_cli.replay.producer import build_timeline

MS = 1_000_000
# At the hand window's 10 s: a target call at cache c costs +(c + 2) ms; a drafter forward
# at cache c costs +0.5·(c − 2) ms.
CTX = ContextCosts(
    ref_tokens=2,
    ref_audio_s=8.0,
    target_ms_per_token=1.0,
    target_ms_per_audio_s=2.0,
    drafter_ms_per_token=0.5,
    drafter_ms_per_audio_s=0.0,
)


def ctx_profile(**kw):
    p = hand_profile(**kw)
    src = dict(p.sources)
    src["qwen"] = dataclasses.replace(src["qwen"], startup_ms_per_audio_s=1.0)
    return dataclasses.replace(p, context=CTX, sources=src)


def test_target_only_steps_grow_with_the_cache() -> None:
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(ctx_profile(), MethodSpec("target-only")))
    assert r.time_ns == (4 * 45 + 2 + 3 + 4 + 5) * MS
    flat = replay_window(w, Prepared(hand_profile(), MethodSpec("target-only")))
    assert flat.time_ns == 4 * 45 * MS


def test_audio_length_moves_every_target_call() -> None:
    w = hand_window([5, 1, 2, 3, EOS])
    longer = dataclasses.replace(w, audio_seconds=13.0)
    a = replay_window(w, Prepared(ctx_profile(), MethodSpec("target-only")))
    b = replay_window(longer, Prepared(ctx_profile(), MethodSpec("target-only")))
    assert b.time_ns - a.time_ns == 4 * 2.0 * 3 * MS


def test_standard_sd_prices_drafts_at_their_own_cache_lengths() -> None:
    # Round 1 (cache 0): 2 forwards at caches 0, 1 → 20 − 1 − 0.5 = 18.5; K3 70 + 2; loop 5.
    # Round 2 (cache 3): 3 forwards (catch-up included) at 3, 4, 5 → 30 + 0.5 + 1 + 1.5; K3 70 + 5; loop 5.
    w = hand_window([5, 1, 2, 3, EOS])
    r = replay_window(w, Prepared(ctx_profile(), MethodSpec("sd", k=3)))
    assert r.committed == [5, 1, 2, 3, EOS]
    assert r.time_ns == int((18.5 + 72 + 5 + 33 + 75 + 5) * MS)
    assert r.time_ns == r.D + r.V - r.O + r.H


def test_producer_startup_and_steps_follow_the_context() -> None:
    # Startup 1.5 × (10 + 1·(10 − 8)) = 18; steps i = 0..4 at 1.5 × (20 + 0.5·(i − 2));
    # publication 1.5 × 1 (every producer segment at the concurrent ratio 1.5).
    p = ctx_profile()
    w = hand_window([5, 1, 2, 3, EOS])
    tl = build_timeline(
        "qwen", w.sources["qwen"], p.source("qwen"), 8, context=p.context, audio_s=w.audio_seconds
    )
    steps = sum(1.5 * (20 + 0.5 * (i - 2)) for i in range(5))
    assert tl.publications[0].at == pytest.approx((18 + steps + 1.5) * MS, abs=5)
    # As²d: two concurrent K1 (cache 0, 1: 2 × (50 + 2), 2 × (50 + 3)) then K3 idle at cache 2 (70 + 4).
    r = replay_window(w, Prepared(p, MethodSpec("as2d", budget=7, source="qwen")))
    assert r.width_histogram == {1: 2, 3: 1}
    assert r.time_ns == (104 + 106 + 74) * MS
    assert r.time_ns == r.D + r.V - r.O + r.H
