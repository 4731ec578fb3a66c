"""Proposition 1, checked: every policy commits exactly the target's greedy tokens, and
the target state equals the committed prefix (minus the pending root) after every call,
for adversarial proposals, budgets and alignment decisions."""

from __future__ import annotations

import random

from engine_scenarios import (
    DRAFT_MODES,
    EOS,
    SOURCE_MODES,
    AdversarialDrafter,
    make_scenario,
    new_target,
    price,
    publish_all,
    source_tokens,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_cli.engine import (
    ASP,
    As2d,
    CandidateBuffer,
    Episode,
    Limits,
    StandardSD,
    TargetOnly,
    VirtualClock,
    physical_width_limit,
    without_bc,
    without_td,
)
from as2d_cli.engine.methods import ALIGN_MODES

EXAMPLES = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

common = dict(
    seed=st.integers(0, 2**32 - 1),
    length=st.integers(1, 70),
    cap_slack=st.integers(-3, 20),
    eos_end=st.booleans(),
)


def run_checked(policy, sc, *, buffer=None, drafter=None) -> None:
    target = new_target(sc)
    ep = Episode(
        policy,
        target,
        sc.ref[0],
        limits=Limits(EOS, sc.max_tokens),
        clock=VirtualClock(price),
        buffer=buffer,
        drafter=drafter,
    )
    limit = physical_width_limit(policy)
    rounds = 0
    while not ep.done:
        before = len(ep.tokens)
        rec = ep.step()
        rounds += 1
        # The target state is exactly the committed prefix, the root held back.
        assert target.state == ep.tokens[:-1]
        # Committed so far is a prefix of the greedy reference.
        assert ep.tokens == sc.ref[: len(ep.tokens)]
        assert rec.width <= limit
        assert rec.width <= sc.max_tokens - before  # the output budget bounds the width
        assert rec.width == target.calls[-1] == rec.offered + 1
        assert 1 <= rec.committed == len(ep.tokens) - before
        if buffer is not None and not rec.from_history:
            # only candidates published by the boundary are offered (history candidates,
            # engine/history.py, come from the committed output, not the buffer)
            assert rec.offered <= rec.ready <= buffer.ready_count(rec.start)
        if rec.from_history:  # history fills only a round the buffer left empty
            assert rec.ready == 0
        assert rounds <= len(sc.ref)  # every round makes progress
    assert ep.tokens == sc.ref
    res = ep.result
    assert res.tokens == sc.ref
    assert res.eos == (sc.ref[-1] == EOS)
    assert res.capped == (not res.eos)
    assert res.n_rounds == sum(res.width_histogram.values())
    assert res.accepted <= res.proposed
    assert 0 <= res.coverage <= 1


@EXAMPLES
@given(**common)
def test_target_only_exact(seed, length, cap_slack, eos_end):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(TargetOnly(), sc)


@EXAMPLES
@given(**common, k=st.integers(1, 12), mode=st.sampled_from(DRAFT_MODES), conf=st.booleans())
def test_standard_sd_exact(seed, length, cap_slack, eos_end, k, mode, conf):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(StandardSD(k), sc, drafter=AdversarialDrafter(mode, sc.ref, seed, conf))


@EXAMPLES
@given(
    **common,
    cap=st.integers(1, 24),
    threshold=st.sampled_from([0.0, 0.4, 0.9, 1.1]),
    mode=st.sampled_from(DRAFT_MODES),
    conf=st.booleans(),
    recycle=st.booleans(),
)
def test_asp_exact(seed, length, cap_slack, eos_end, cap, threshold, mode, conf, recycle):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(
        ASP(threshold=threshold, cap=cap, recycle=recycle),
        sc,
        drafter=AdversarialDrafter(mode, sc.ref, seed, conf),
    )


def _buffer(sc, mode, conf) -> CandidateBuffer:
    rng = random.Random(sc.seed ^ 0x5EED)
    buf = CandidateBuffer()
    publish_all(buf, source_tokens(mode, sc.ref, rng), rng, conf)
    return buf


@EXAMPLES
@given(
    **common,
    budget=st.integers(1, 16),
    window=st.integers(0, 10),
    lookback=st.integers(0, 10),
    threshold=st.sampled_from([None, 0.4, 0.9]),
    mode=st.sampled_from(SOURCE_MODES),
    conf=st.booleans(),
    align=st.sampled_from(ALIGN_MODES),
)
def test_as2d_exact(
    seed, length, cap_slack, eos_end, budget, window, lookback, threshold, mode, conf, align
):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(
        As2d(budget=budget, threshold=threshold, window=window, lookback=lookback, align=align),
        sc,
        buffer=_buffer(sc, mode, conf),
    )


@EXAMPLES
@given(**common, budget=st.integers(1, 16), mode=st.sampled_from(DRAFT_MODES), conf=st.booleans())
def test_without_td_exact(seed, length, cap_slack, eos_end, budget, mode, conf):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(without_td(budget), sc, drafter=AdversarialDrafter(mode, sc.ref, seed, conf))


@EXAMPLES
@given(
    **common,
    mode=st.sampled_from(SOURCE_MODES),
    conf=st.booleans(),
    align=st.sampled_from(ALIGN_MODES),
)
def test_without_bc_exact(seed, length, cap_slack, eos_end, mode, conf, align):
    sc = make_scenario(seed, length, cap_slack, eos_end)
    run_checked(without_bc(align=align), sc, buffer=_buffer(sc, mode, conf))
