"""History candidates (as2d_cli/engine/history.py): the lookup itself, and As²d with them
stays exact — every committed token the target's greedy one — for any source, budget and
alignment, on outputs full of repeats and loops (where history proposes most)."""

from __future__ import annotations

import random

from engine_scenarios import (
    EOS,
    SOURCE_MODES,
    Scenario,
    make_decide,
    publish_all,
    source_tokens,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_exactness import run_checked

from as2d_cli.engine import As2d, CandidateBuffer
from as2d_cli.engine.history import HistoryIndex
from as2d_cli.engine.methods import ALIGN_MODES, HISTORY, MethodSpec
from as2d_cli.engine.reference import greedy_reference


# ---------------------------------------------------------------------------- the lookup
def test_a_loop_is_continued_up_to_the_limit() -> None:
    h = HistoryIndex([1, 2, 3, 4, 1, 2, 3, 4, 1, 2])
    assert h.propose(7) == [3, 4, 1, 2, 3, 4, 1]
    assert h.propose(1) == [3]


def test_outside_a_loop_a_match_proposes_a_short_continuation() -> None:
    h = HistoryIndex([5, 6, 7, 8, 9, 5, 6])
    assert h.propose(7) == [7, 8]  # the default short guess: 2 tokens
    assert HistoryIndex([5, 6, 7, 8, 9, 5, 6], short=3).propose(7) == [7, 8, 9]


def test_the_longest_suffix_wins_and_one_token_is_not_enough() -> None:
    h = HistoryIndex([1, 2, 9, 3, 2, 8, 1, 2])
    assert h.propose(5) == [9, 3]  # "1 2" matched (not "2" alone, which last preceded 8)
    assert HistoryIndex([4, 7, 5, 7]).propose(5) == []  # only "7" repeats
    assert HistoryIndex([4, 7, 5, 7], min_ngram=1).propose(1) == [5]


def test_the_suffix_never_matches_itself_and_the_index_grows() -> None:
    h = HistoryIndex([3, 1, 2])
    assert h.propose(4) == []  # "1 2" occurred only as the suffix itself
    h.extend([6, 1, 2])
    assert h.propose(4) == [6, 1]  # its earlier occurrence, followed by 6 (not a loop)


def test_the_context_counts_as_history() -> None:
    h = HistoryIndex(context=[8, 1, 2, 3])
    h.extend([1, 2])
    assert h.propose(4) == [3, 1] or h.propose(4) == [3]  # what followed in the context
    assert HistoryIndex(context=[8, 1, 2, 3], short=1).propose(0) == []


def test_the_method_spec_names_and_builds_history() -> None:
    spec = MethodSpec("as2d", budget=7, source="drafter", history=True)
    assert spec.label == "as2d(drafter+history/b7)" and spec.policy().history
    alone = MethodSpec("as2d", budget=7, source=HISTORY)
    assert alone.label == "as2d(history/b7)" and alone.policy().history
    assert not MethodSpec("as2d", budget=7, source="drafter").policy().history


# ---------------------------------------------------------------------------- exactness
def _loopy_scenario(seed: int, units: int, period: int, repeats: int, cap_slack: int) -> Scenario:
    """A greedy path made of repeated units (a decoder looping, phrases said again)."""
    rng = random.Random(seed)
    path: list[int] = []
    for _ in range(units):
        unit = [rng.randrange(1, 9) for _ in range(rng.randint(1, period))]
        path += unit * rng.randint(1, repeats)
    if rng.random() < 0.5:
        path.append(EOS)
    decide = make_decide(seed, path)
    max_tokens = max(1, len(path) + 1 - cap_slack)
    ref = greedy_reference(decide, path[0], EOS, max_tokens)
    return Scenario(decide, ref, max_tokens, rng, seed)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    units=st.integers(1, 6),
    period=st.integers(1, 6),
    repeats=st.integers(1, 5),
    cap_slack=st.integers(-3, 10),
    budget=st.integers(1, 16),
    window=st.integers(0, 10),
    lookback=st.integers(0, 10),
    threshold=st.sampled_from([None, 0.4, 0.9]),
    mode=st.sampled_from((*SOURCE_MODES, "none")),
    conf=st.booleans(),
    align=st.sampled_from(ALIGN_MODES),
)
def test_as2d_with_history_is_exact(
    seed, units, period, repeats, cap_slack, budget, window, lookback, threshold, mode, conf, align
) -> None:
    sc = _loopy_scenario(seed, units, period, repeats, cap_slack)
    buf = CandidateBuffer()
    if mode == "none":  # the history alone: nothing is ever published
        buf.close()
    else:
        publish_all(
            buf, source_tokens(mode, sc.ref, random.Random(seed)), random.Random(seed), conf
        )
    policy = As2d(
        budget=budget,
        threshold=threshold,
        window=window,
        lookback=lookback,
        align=align,
        history=True,
    )
    run_checked(policy, sc, buffer=buf)
