"""The paper's Figure 4, replayed: accept A B, correct C to X, realign on D, verify E F."""

from __future__ import annotations

from as2d_cli.engine import As2d, CandidateBuffer, Episode, Limits, Op, VirtualClock
from as2d_cli.engine.reference import FunctionTarget

R, A, B, C, D, E, F, X, EOS = 10, 1, 2, 3, 4, 5, 6, 7, 0
TARGET = [R, A, B, X, D, E, F, EOS]
MS = 1_000_000


def decide(prefix: tuple[int, ...]) -> int:
    n = len(prefix)
    return TARGET[n] if prefix == tuple(TARGET[:n]) and n < len(TARGET) else 99


def price(op: Op, now: int) -> int:
    return 10 * MS if op.kind == "verify" else 0


def test_figure4_accept_correct_realign_verify() -> None:
    buf = CandidateBuffer()
    buf.publish([R, A, B, C, D], 0)  # (a) only published candidates enter verification
    buf.publish([E, F], 5 * MS)  # the producer keeps generating while the target checks
    target = FunctionTarget(decide)
    ep = Episode(
        As2d(budget=4), target, R, limits=Limits(EOS, 64), clock=VirtualClock(price), buffer=buf
    )
    res = ep.run()
    assert res.tokens == TARGET
    r1, r2, r3 = res.rounds
    # (b) root R + A B C D: accept A B, correct C to X.
    assert (r1.width, r1.offered, r1.accepted, r1.new_root, r1.corrected) == (5, 4, 2, X, True)
    assert r1.align_action == "reject"
    # (c) X is processed alone; the target's next token D is found one past the mismatch.
    assert (r2.width, r2.root, r2.new_root) == (1, X, D)
    assert (r2.align_action, r2.align_offset) == ("search", 1)
    # D supplies the root for verifying the ready E F; the bonus is EOS.
    assert (r3.width, r3.root, r3.offered, r3.accepted, r3.new_root) == (3, D, 2, 2, EOS)
    assert res.eos and not res.capped
    assert target.calls == [5, 1, 3]
    assert (res.proposed, res.accepted) == (6, 4)
    assert res.end == 30 * MS
