"""A source ends at its own end: the engine never offers a candidate published after the
source's EOS (a width it would pay for nothing), and still commits the target's tokens."""

from __future__ import annotations

from engine_scenarios import EOS, make_decide, price

from as2d_cli.engine import As2d, CandidateBuffer, Episode, Limits, VirtualClock
from as2d_cli.engine.reference import FunctionTarget, greedy_reference


def test_candidates_after_the_sources_eos_are_never_offered() -> None:
    path = [3, 4, 5, 6, 7, 8, 2, 2, 2, 2, 2, EOS]  # the target goes on after the source's end
    decide = make_decide(1, path)
    ref = greedy_reference(decide, path[0], EOS, 40)
    buf = CandidateBuffer()
    # the source says 3 4 5 EOS and then, wrongly, more tokens after its own end
    buf.publish([3, 4, 5, EOS, 7, 8, 2, 2], 0)
    buf.close()
    ep = Episode(
        As2d(budget=8, threshold=None),
        FunctionTarget(decide),
        ref[0],
        limits=Limits(EOS, 40),
        clock=VirtualClock(price),
        buffer=buf,
    )
    ep.run()
    assert ep.tokens == ref
    first = ep.result.rounds[0]
    assert first.offered == 3  # 4, 5 and the source's EOS: nothing published after it
