"""The per-cause reading of an episode's calls (as2d_cli/engine/causes.py)."""

from __future__ import annotations

import pytest

from as2d_cli.engine.causes import CallCauses, call_causes
from as2d_cli.engine.methods import MethodSpec
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for
from as2d_cli.synthetic import synthetic_profile, synthetic_traces


def test_hand_worked_calls_are_counted_by_cause() -> None:
    publications = [(10, 2), (20, 5)]  # 2 tokens out at t=10, 5 in all at t=20
    rounds = [
        (1, 5, 0, 0, 0),  # nothing published yet: pace
        (1, 12, 1, 0, 0),  # 2 published past cursor 0: candidates out, none usable
        (3, 15, 4, 2, 2),  # a wide call, both accepted
        (1, 25, 5, 0, 0),  # 5 published, cursor 4: not past its first candidate
        (2, 30, 6, 1, 0),  # one offered, rejected
    ]
    c = call_causes(rounds, publications)
    assert (c.calls, c.k1_nothing_ready, c.k1_ready_unaligned, c.offered, c.accepted) == (
        5,
        2,
        1,
        3,
        2,
    )
    assert c.shares() == pytest.approx(
        {"k1_nothing_ready": 0.4, "k1_ready_unaligned": 0.2, "rejected": 1 / 3}
    )
    total = CallCauses()
    total.add(c)
    total.add(c)
    assert (total.calls, total.k1_ready_unaligned, total.accepted) == (10, 2, 4)
    assert CallCauses().shares() == {
        "k1_nothing_ready": 0.0,
        "k1_ready_unaligned": 0.0,
        "rejected": 0.0,
    }


def test_a_replayed_episode_splits_every_k1_call_between_pace_and_aligner() -> None:
    traces = synthetic_traces(seed=3, scale=0.02, drafter=False, split="test")
    prep = Prepared(synthetic_profile(), MethodSpec("as2d", budget=6, source="qwen"))
    seen = CallCauses()
    for w in traces.windows:
        timeline = timeline_for(w, prep, "qwen")
        pubs, n = [], 0
        for p in timeline[1].publications:
            n += len(p.tokens)
            pubs.append((p.at, n))
        r = replay_window(w, prep, detail=False, keep_rounds=True, timeline=timeline)
        rounds = r.round_records
        c = call_causes(((x.width, x.start, x.cursor, x.offered, x.accepted) for x in rounds), pubs)
        assert c.calls == r.rounds
        assert c.k1_nothing_ready + c.k1_ready_unaligned == sum(x.width == 1 for x in rounds)
        assert (c.offered, c.accepted) == (r.proposed, r.accepted)
        seen.add(c)
    assert seen.k1_nothing_ready > 0 and seen.k1_ready_unaligned > 0  # both causes occur
