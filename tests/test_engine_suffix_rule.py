"""Suffix anchoring's guess, pinned (docs/engine.md, "Suffix anchoring: the rule exactly").

Each test changes one thing around the rule's edges — how far behind and ahead of the
mismatch a guess may reach, how ties break, how distance is counted, where the cursor lands
after an accepted guess — so a change to any of them fails here."""

from __future__ import annotations

import pytest

from as2d_cli.engine.alignment import MISMATCH, SUFFIX_NGRAM, Aligner

W, LB = 8, 8  # the defaults: window and look-back
P = 40  # the mismatch position in every test
ROOT = 7
FILL = 1000  # filler tokens: FILL + i at position i, never equal to anything else


def _aligner(window: int = W, lookback: int = LB) -> Aligner:
    a = Aligner(window, lookback, suffix=True)
    a.pos, a.status, a.origin, a.correction = P, MISMATCH, P, ROOT
    return a


def _buffer(n: int = 120) -> list[int]:
    return [FILL + i for i in range(n)]


def _place(buf: list[int], j: int, matched: int, committed: list[int]) -> None:
    """Put the root at ``j`` with the ``matched - 1`` committed tokens before it in front."""
    for k in range(matched):
        buf[j - k] = committed[-1 - k]


COMMITTED = [11, 12, 13, 14, 15, 16, ROOT]  # the committed output; its last token is the root


def _guess(buf: list[int], ready: int | None = None, **kw) -> int | None:  # type: ignore[no-untyped-def]
    return _aligner(**kw).guess(buf, len(buf) if ready is None else ready, COMMITTED)


# ---------------------------------------------------------------------------- reach
@pytest.mark.parametrize(
    "j, found",
    [
        (P + W - 1, True),  # a one-token match: up to window − 1 ahead of the mismatch…
        (P + W, False),  # …not window ahead
        (P - LB, True),  # and up to look-back behind it…
        (P - LB - 1, False),  # …not further
    ],
)
def test_a_one_token_match_stays_within_the_rules_bounds(j: int, found: bool) -> None:
    buf = _buffer()
    _place(buf, j, 1, COMMITTED)
    assert _guess(buf) == (j + 1 if found else None)


@pytest.mark.parametrize(
    "j, found",
    [
        (P + W + 2 * W - 1, True),  # a ≥2-token match reaches 2 windows further…
        (P + W + 2 * W, False),
        (P - LB - 2 * W, True),  # …on both sides
        (P - LB - 2 * W - 1, False),
    ],
)
def test_a_longer_match_reaches_two_windows_further(j: int, found: bool) -> None:
    buf = _buffer()
    _place(buf, j, 2, COMMITTED)
    assert _guess(buf) == (j + 1 if found else None)


def test_a_guess_needs_a_published_candidate_after_it() -> None:
    buf = _buffer()
    _place(buf, P + 3, 2, COMMITTED)
    assert _guess(buf, ready=P + 5) == P + 4  # the candidate at P + 4 is published
    assert _guess(buf, ready=P + 4) is None  # the root is the last published token


def test_the_reach_scales_with_the_window_and_look_back() -> None:
    buf = _buffer()
    _place(buf, P + 3, 1, COMMITTED)
    assert _guess(buf, window=4) == P + 4 and _guess(buf, window=3) is None
    buf = _buffer()
    _place(buf, P - 2, 1, COMMITTED)
    assert _guess(buf, lookback=2) == P - 1 and _guess(buf, lookback=1) is None


# ---------------------------------------------------------------------------- ranking
def test_a_longer_match_beats_a_nearer_one() -> None:
    buf = _buffer()
    _place(buf, P, 1, COMMITTED)  # one token, distance 1
    _place(buf, P + 6, 3, COMMITTED)  # three tokens, distance 7
    assert _guess(buf) == P + 7


def test_matches_longer_than_the_ngram_rank_alike() -> None:
    assert SUFFIX_NGRAM == 4
    buf = _buffer()
    _place(buf, P + 20, 6, COMMITTED)  # six tokens match, far
    _place(buf, P + 2, 4, COMMITTED)  # four tokens match, near: the same rank, nearer
    assert _guess(buf) == P + 3


def test_distance_counts_from_the_guessed_candidate_to_the_mismatch() -> None:
    # the candidate after j starts at j + 1: j = P − 1 is at distance 0, j = P at distance 1
    buf = _buffer()
    _place(buf, P, 2, COMMITTED)
    _place(buf, P - 3, 2, COMMITTED)  # candidate at P − 2: distance 2
    assert _guess(buf) == P + 1
    buf = _buffer()
    _place(buf, P - 1, 2, COMMITTED)  # candidate at P: distance 0
    _place(buf, P + 2, 2, COMMITTED)
    assert _guess(buf) == P


def test_an_equal_rank_and_distance_goes_to_the_position_behind() -> None:
    buf = _buffer()
    _place(buf, P + 1, 2, COMMITTED)  # candidate at P + 2: distance 2
    _place(buf, P - 3, 2, COMMITTED)  # candidate at P − 2: distance 2
    assert _guess(buf) == P - 2


def test_the_committed_output_bounds_the_match() -> None:
    a = _aligner()
    buf = _buffer()
    _place(buf, P + 5, 3, [12, 13, ROOT])
    _place(buf, P + 1, 1, [ROOT])
    # with only the root committed every match has length 1: the nearer wins
    assert a.guess(buf, len(buf), [ROOT]) == P + 2
    assert a.guess(buf, len(buf), [12, 13, ROOT]) == P + 6


def test_no_guess_without_suffix_anchoring_or_a_mismatch() -> None:
    buf = _buffer()
    _place(buf, P + 1, 2, COMMITTED)
    a = Aligner(W, LB, suffix=False)
    a.pos, a.status = P, MISMATCH
    assert a.guess(buf, len(buf), COMMITTED) is None
    b = _aligner()
    b.status = 1  # matched: no anchor awaited
    assert b.guess(buf, len(buf), COMMITTED) is None


# ---------------------------------------------------------------------------- cursor
@pytest.mark.parametrize("accepted, offered", [(1, 4), (4, 4), (2, 2)])
def test_the_cursor_after_an_accepted_guess(accepted: int, offered: int) -> None:
    buf = _buffer()
    j = P + 5
    _place(buf, j, 2, COMMITTED)
    a = _aligner()
    assert a.guess(buf, len(buf), COMMITTED) == j + 1
    new_root = buf[j + accepted + 1] if accepted == offered else 999
    a.after_call(buf, len(buf), offered, accepted, new_root, anchor_round=True)
    # the old root sat at j; the accepted candidates and the new root follow it
    assert a.pos == j + accepted + 1
    assert (a.last_action, a.last_offset) == ("suffix", j - P)
    assert a.status == (MISMATCH if accepted < offered else 1)


def test_a_rejected_guess_runs_the_papers_rules_on_the_anchor() -> None:
    buf = _buffer()
    _place(buf, P + 5, 2, COMMITTED)
    buf[P + 2] = 77  # the anchor y found by rule 2 (search)
    a = _aligner()
    assert a.guess(buf, len(buf), COMMITTED) == P + 6
    a.after_call(buf, len(buf), 3, 0, 77, anchor_round=True)
    assert (a.pos, a.last_action, a.last_offset) == (P + 2, "search", 2)
