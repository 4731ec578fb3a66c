"""Unit checks of the engine's parts: alignment rules, buffer snapshots, SD/ASP accounting."""

from __future__ import annotations

import threading

import pytest

from as2d_cli.engine import (
    ASP,
    As2d,
    CandidateBuffer,
    Episode,
    Limits,
    Op,
    StandardSD,
    TargetOnly,
    VirtualClock,
    WallClock,
)
from as2d_cli.engine.alignment import Aligner
from as2d_cli.engine.reference import SequenceDrafter, SequenceTarget
from as2d_cli.errors import EngineError

EOS = 0


def zero(op: Op, now: int) -> int:
    return 1


def test_alignment_insertion_keeps_mismatch_position_eligible() -> None:
    # Source: R A C D; target: R A X C D (the target inserts X before C).
    src = [9, 1, 3, 4]
    al = Aligner(window=8)
    assert al.usable_start(src, 4, 9) == 1
    al.after_call(src, 4, offered=3, accepted=1, root=7, anchor_round=False)  # A ok, C != X
    assert al.last_action == "reject" and al.awaiting_anchor
    assert al.usable_start(src, 4, 7) is None  # the anchor round is K1
    al.after_call(src, 4, offered=0, accepted=0, root=3, anchor_round=True)  # y = C
    assert (al.last_action, al.pos, al.cursor) == ("insert", 2, 3)


def test_alignment_retires_and_searches_again() -> None:
    src = [9, 1, 2, 3, 4, 5, 6, 7, 8]
    al = Aligner(window=2)
    al.after_call(src, 9, offered=2, accepted=0, root=50, anchor_round=False)
    al.after_call(src, 9, offered=0, accepted=0, root=51, anchor_round=True)
    assert al.last_action == "retire" and al.awaiting_anchor and al.pos == 2
    # 51 never appears; the next target token 4 lies within the window after pos 2.
    al.after_call(src, 9, offered=0, accepted=0, root=4, anchor_round=True)
    assert (al.last_action, al.pos, al.last_offset) == ("search", 4, 2)


def test_alignment_window_bounds_the_search() -> None:
    src = [9, 1, 2, 3, 4, 5, 6, 7, 8]
    al = Aligner(window=1)
    al.after_call(src, 9, offered=2, accepted=0, root=50, anchor_round=False)
    al.after_call(src, 9, offered=0, accepted=0, root=8, anchor_round=True)  # 8 is 7 away
    assert al.last_action == "retire"


def _source_deletion(lookback: int) -> Aligner:
    # Source: R A D E F G; target: R A B C D E F G (the source missed B C, so the target
    # says two tokens the source lacks before their continuation D at position 2).
    src = [9, 1, 4, 5, 6, 7]
    al = Aligner(window=8, lookback=lookback)
    assert al.usable_start(src, 6, 9) == 1
    al.after_call(src, 6, offered=3, accepted=1, root=2, anchor_round=False)  # A ok, D != B
    al.after_call(src, 6, offered=0, accepted=0, root=3, anchor_round=True)  # y = C: nowhere
    assert (al.last_action, al.pos) == ("retire", 3)  # position 2 (D) retired
    al.after_call(src, 6, offered=0, accepted=0, root=4, anchor_round=True)  # y = D
    return al


def test_alignment_looks_back_over_positions_the_mismatch_retired() -> None:
    al = _source_deletion(lookback=8)
    assert (al.last_action, al.pos, al.last_offset, al.cursor) == ("back", 2, -1, 3)
    assert not al.awaiting_anchor  # E F G are offered next


def test_alignment_strict_reading_loses_a_multi_token_insertion() -> None:
    al = _source_deletion(lookback=0)  # C.3 read strictly: D stays retired
    assert al.last_action == "retire" and al.awaiting_anchor and al.pos == 4


def test_alignment_never_looks_back_before_the_mismatch() -> None:
    # Source: R A B C X; target: R A B C Y A ...: A (position 1) was accepted before the
    # mismatch at 4, so the target's later A is not matched there.
    src = [9, 1, 2, 3, 8]
    al = Aligner(window=8, lookback=8)
    al.after_call(src, 5, offered=4, accepted=3, root=7, anchor_round=False)  # X != Y at 4
    al.after_call(src, 5, offered=0, accepted=0, root=1, anchor_round=True)  # y = A
    assert al.last_action == "retire" and al.pos == 5


def test_alignment_look_back_is_bounded() -> None:
    # The continuation lies three retired positions back; a look-back of 2 does not reach it.
    src = [9, 1, 4, 5, 6, 7, 8, 20, 21]
    for lookback, found in ((2, False), (3, True)):
        al = Aligner(window=1, lookback=lookback)
        al.after_call(src, 9, offered=1, accepted=1, root=30, anchor_round=False)  # pos 2: 4 != 30
        for y in (31, 32, 33):
            al.after_call(src, 9, offered=0, accepted=0, root=y, anchor_round=True)
        assert al.pos == 5 and al.last_action == "retire"
        al.after_call(src, 9, offered=0, accepted=0, root=4, anchor_round=True)
        assert (al.last_action == "back") is found and (al.pos == 2) is found


def test_buffer_snapshot_by_time_and_threaded_publication() -> None:
    buf = CandidateBuffer("s", "p")
    buf.publish([1, 2], 10, [0.9, 0.8])
    buf.publish([], 12)
    buf.publish([3], 20)
    assert [buf.ready_count(t) for t in (0, 10, 15, 20, 99)] == [0, 2, 2, 3, 3]
    assert buf.batches[2].offset == 2 and buf.batches[0].confidences == (0.9, 0.8)
    with pytest.raises(EngineError, match="time order"):
        buf.publish([4], 5)
    # A producer thread appends while the reader takes snapshots: counts never go back.
    big = CandidateBuffer()
    seen: list[int] = []

    def produce() -> None:
        for i in range(2000):
            big.publish([i], i)

    th = threading.Thread(target=produce)
    th.start()
    while th.is_alive():
        seen.append(big.ready_count(10**9))
    th.join()
    assert seen == sorted(seen) and big.ready_count(10**9) == 2000
    assert big.tokens == list(range(2000))


def test_a_buffer_brings_in_waiting_publications_before_every_read() -> None:
    """A worker process's publications wait in a pipe until the buffer is read: its pump
    runs first, so a read sees every batch that had arrived, at its own publication time."""
    buf = CandidateBuffer("s", "p")
    waiting = [([5, 6], 30), ([7], 40)]  # stamped by the producer, not yet taken in
    pumps: list[int] = []

    def pump() -> None:
        pumps.append(len(waiting))
        while waiting:
            buf.publish(*waiting.pop(0))

    buf.pump = pump
    assert buf.ready_count(35) == 2  # taken in at the read; the later batch not yet ready
    assert buf.tokens == [5, 6, 7] and buf.ready_count(40) == 3
    assert pumps == [2, 0]


def test_sd_charges_catch_up_after_full_acceptance() -> None:
    ref = [5, 1, 2, 3, 4, 6, 7, 8, 1, 2, EOS]
    conts = [ref[n + 1 :] + [3] * 20 for n in range(len(ref))]  # a perfect drafter
    ep = Episode(
        StandardSD(4),
        SequenceTarget(ref),
        ref[0],
        limits=Limits(EOS, 100),
        clock=VirtualClock(zero),
        drafter=SequenceDrafter(ref, conts),
    )
    res = ep.run()
    assert res.tokens == ref
    # The last round accepts 2 and EOS among its drafts ends the output there.
    assert [r.accepted for r in res.rounds] == [3, 3, 2]
    assert [r.catch_up for r in res.rounds] == [0, 1, 1]
    assert all(r.drafted == 3 for r in res.rounds)  # K−1 forwards, even past drafter EOS
    assert res.drafted == 3 * 3 + 2  # plus two catch-up forwards
    assert res.rounds[-1].committed == 2 and res.eos


def test_asp_confidence_stop_includes_low_token_and_recycles() -> None:
    ref = [5, 1, 2, 3, 4, 6, 7, EOS]
    # At the root (n=0) the drafter substitutes 9 for 2 but is right afterwards.
    conts = {0: [1, 9, 3, 4, 6], 2: [3, 4, 6, 7, EOS], 6: [EOS]}
    confs = {0: [0.9, 0.9, 0.9, 0.9, 0.3], 2: [0.9] * 5, 6: [0.9]}
    ep = Episode(
        ASP(threshold=0.4, cap=24),
        SequenceTarget(ref),
        ref[0],
        limits=Limits(EOS, 100),
        clock=VirtualClock(zero),
        drafter=SequenceDrafter(ref, conts, confs, eos_id=EOS),
    )
    res = ep.run()
    assert res.tokens == ref
    r1, r2, r3 = res.rounds
    assert (r1.offered, r1.accepted, r1.new_root) == (5, 1, 2)  # 5 drafts: low-conf 6 included
    # The paired forward at n=2 proposes 3 = old draft at the same position: reuse 3 4 6.
    assert (r2.recycled, r2.offered, r2.accepted, r2.new_root) == (3, 3, 3, 7)
    assert ep.clock.intervals and any(
        i.op.kind == "refresh" and i.op.width == 3 for i in ep.clock.intervals
    )
    assert (r3.offered, r3.accepted, r3.recycled) == (1, 1, 0) and res.eos


def test_asp_refresh_reaches_a_stateful_drafter_with_the_reused_suffix() -> None:
    ref = [5, 1, 2, 3, 4, 6, 7, EOS]
    conts = {0: [1, 9, 3, 4, 6], 2: [3, 4, 6, 7, EOS], 6: [EOS]}
    confs = {0: [0.9, 0.9, 0.9, 0.9, 0.3], 2: [0.9] * 5, 6: [0.9]}
    calls: list[tuple[list[int], list[int]]] = []

    class Refreshing(SequenceDrafter):
        def refresh(self, prefix, reused) -> None:  # a runtime drafter recomputes its cache here
            calls.append((list(prefix), list(reused)))

    ep = Episode(
        ASP(threshold=0.4, cap=24),
        SequenceTarget(ref),
        ref[0],
        limits=Limits(EOS, 100),
        clock=VirtualClock(zero),
        drafter=Refreshing(ref, conts, confs, eos_id=EOS),
    )
    assert ep.run().tokens == ref
    assert calls == [([5, 1, 2], [3, 4, 6])]  # after the corrected root, the old suffix


def test_as2d_falls_back_to_k1_when_nothing_is_ready_and_respects_budget() -> None:
    ref = [5, 1, 2, 3, 4, 6, 7, 8, EOS]
    buf = CandidateBuffer()
    buf.publish(ref[:8], 25)  # arrives after two target-alone rounds
    clock = VirtualClock(lambda op, now: 10 if op.kind == "verify" else 0)
    ep = Episode(
        As2d(budget=3, threshold=None),
        SequenceTarget(ref),
        ref[0],
        limits=Limits(EOS, 100),
        clock=clock,
        buffer=buf,
    )
    res = ep.run()
    assert res.tokens == ref
    widths = [r.width for r in res.rounds]
    assert widths[:2] == [1, 1] and max(widths) == 4
    assert all(r.width <= 4 for r in res.rounds)


def test_cap_ends_output_where_target_alone_would() -> None:
    ref = list(range(1, 30))
    for policy in (TargetOnly(), As2d(budget=8)):
        buf = CandidateBuffer()
        buf.publish(ref, 0)
        ep = Episode(
            policy,
            SequenceTarget(ref),
            ref[0],
            limits=Limits(EOS, 10),
            clock=VirtualClock(zero),
            buffer=buf,
        )
        res = ep.run()
        assert res.tokens == ref[:10] and res.capped and not res.eos


def test_engine_refuses_misuse() -> None:
    with pytest.raises(EngineError):
        Episode(
            As2d(budget=2), SequenceTarget([1, EOS]), 1, limits=Limits(EOS, 5), clock=WallClock()
        )
    ep = Episode(
        TargetOnly(), SequenceTarget([1, EOS]), 1, limits=Limits(EOS, 5), clock=WallClock()
    )
    ep.run()
    with pytest.raises(EngineError):
        ep.step()


def test_accounting_identity_on_overlapping_intervals() -> None:
    from as2d_cli.engine.accounting import decompose

    prod = [(0, 10), (5, 20), (40, 50)]  # merged: [0,20] + [40,50] = 30
    ver = [(15, 30), (45, 60), (59, 70)]  # merged: [15,30] + [45,70] = 40
    d = decompose(prod, ver, T=80)
    assert (d.D, d.V, d.O, d.H) == (30, 40, 10, 20)
    assert d.T == d.D + d.V - d.O + d.H
    # Work outside [0, T] is clipped, not charged.
    assert decompose([(70, 100)], [], T=80).D == 10
