"""Pooled statistics against hand-computed values (paper A.3, D.1.3, D.4.3, D.4.5)."""

from __future__ import annotations

import math

import pytest

from as2d_cli.errors import UserError
from as2d_cli.stats import (
    ImpossibleFigure,
    Outcome,
    cdf,
    oracle,
    oracle_gap,
    pooled_tps,
    sd_summary,
    sd_window_tps,
    slowdown,
    tps_by_dataset,
    window_tps,
)

O = Outcome


def test_pooled_is_sum_over_sum_not_mean_of_ratios():
    outs = [O("a", "x", 10, 1.0), O("b", "x", 30, 2.0)]
    assert pooled_tps(outs) == pytest.approx(40 / 3)  # mean of ratios would be 12.5
    assert window_tps(outs) == {"a": 10.0, "b": 15.0}


def test_by_dataset_and_all():
    outs = [O("a", "x", 10, 1.0), O("b", "y", 30, 2.0), O("c", "x", 5, 4.0)]
    got = tps_by_dataset(outs)
    assert list(got) == ["x", "y", "all"]
    assert (
        got["x"] == pytest.approx(15 / 5)
        and got["y"] == pytest.approx(15.0)
        and got["all"] == pytest.approx(45 / 7)
    )


def test_from_ns():
    assert O.from_ns("a", "x", 3, 1_500_000_000).time_s == 1.5


@pytest.mark.parametrize(
    "make",
    [
        lambda: O("a", "x", -1, 1.0),
        lambda: O("a", "x", 3, -0.5),
        lambda: O("a", "x", 3, math.nan),
        lambda: O("a", "x", 3, math.inf),
    ],
)
def test_impossible_outcomes_refused(make):
    with pytest.raises(ImpossibleFigure) as e:
        make()
    assert isinstance(e.value, UserError) and "window a" in str(e.value)


def test_zero_time():
    one = O("a", "x", 1, 0.0)  # only the free first token
    with pytest.raises(ImpossibleFigure, match="zero decode time has no tokens/s"):
        _ = one.tps
    with pytest.raises(ImpossibleFigure, match="zero total decode time"):
        pooled_tps([one])
    assert pooled_tps([one, O("b", "x", 3, 1.0)]) == 4.0  # fine when pooled with others
    with pytest.raises(ImpossibleFigure, match="no windows to pool"):
        pooled_tps([])


def _sd():
    # Two windows, K=5..8; window a: 10 tokens, b: 20 tokens; times chosen by hand.
    times = {5: (1.0, 4.0), 6: (2.0, 2.0), 7: (1.0, 1.0), 8: (5.0, 5.0)}
    return {k: [O("a", "x", 10, ta), O("b", "y", 20, tb)] for k, (ta, tb) in times.items()}


def test_sd_summary_is_mean_of_per_k_pooled():
    s = sd_summary(_sd())
    # all: per-K pooled 30/5, 30/4, 30/2, 30/10 = 6, 7.5, 15, 3; x: 10/1, 10/2, 10/1, 10/5.
    assert s["all"] == pytest.approx((6.0 + 7.5 + 15.0 + 3.0) / 4)
    assert s["x"] == pytest.approx((10 + 5 + 10 + 2) / 4)
    assert s["y"] == pytest.approx((5 + 10 + 20 + 4) / 4)


def test_sd_window_is_mean_of_that_windows_four_tps():
    w = sd_window_tps(_sd())
    assert w["a"] == pytest.approx((10 + 5 + 10 + 2) / 4)
    assert w["b"] == pytest.approx((5 + 10 + 20 + 4) / 4)


def test_sd_needs_every_k_and_same_windows():
    by_k = _sd()
    del by_k[7]
    with pytest.raises(ImpossibleFigure, match="lack K=7"):
        sd_summary(by_k)
    by_k = _sd()
    by_k[6] = by_k[6][:1]
    with pytest.raises(ImpossibleFigure, match="cover different windows"):
        sd_window_tps(by_k)


def test_oracle_and_gap():
    cat = {
        ("qwen", 7): [O("a", "x", 10, 2.0), O("b", "x", 20, 2.0)],
        ("qwen", 3): [O("a", "x", 10, 1.0), O("b", "x", 20, 4.0)],
        ("parakeet", 7): [O("a", "x", 10, 1.0), O("b", "x", 20, 3.0)],
    }
    r = oracle(cat)
    assert r.choice == {
        "a": ("qwen", 3),
        "b": ("qwen", 7),
    }  # first minimum in catalog order breaks the tie
    assert r.tps == pytest.approx(30 / 3.0)
    selected = pooled_tps(cat[("qwen", 7)])  # 30/4
    assert oracle_gap(selected, r.tps) == pytest.approx(100 * (1 - 7.5 / 10))
    assert oracle_gap(10.0, 10.0) == 0.0
    with pytest.raises(ImpossibleFigure):
        oracle_gap(0.0, 10.0)


def test_oracle_refuses_token_disagreement():
    cat = {"p": [O("a", "x", 10, 2.0)], "q": [O("a", "x", 11, 1.0)]}
    with pytest.raises(ImpossibleFigure, match="commits 11 tokens but 'p' commits 10"):
        oracle(cat)


def test_slowdown_counts_ties_and_losses():
    base = {"a": 10.0, "b": 10.0, "c": 10.0, "d": 10.0, "e": 10.0}
    meth = {"a": 12.0, "b": 9.0, "c": 10.0 * (1 - 5e-10), "d": 5.0, "e": 10.0 * (1 - 2e-9)}
    s = slowdown(meth, base)
    assert (s.n, s.faster, s.slower, s.ties) == (5, 1, 3, 1)
    assert set(s.slower_windows) == {"b", "d", "e"}
    assert s.slower_fraction == pytest.approx(3 / 5)
    assert s.median_loss_pct == pytest.approx(10.0)
    assert s.max_loss_pct == pytest.approx(50.0)
    none = slowdown({"a": 11.0}, {"a": 10.0})
    assert none.slower == 0 and none.median_loss_pct is None and none.max_loss_pct is None


def test_slowdown_refuses_mismatch_and_bad_baseline():
    with pytest.raises(ImpossibleFigure, match="different windows"):
        slowdown({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ImpossibleFigure, match="baseline positive"):
        slowdown({"a": 1.0}, {"a": 0.0})


def test_cdf():
    assert cdf({"a": 3.0, "b": 1.0, "c": 2.0, "d": 2.0}) == [
        (1.0, 0.25),
        (2.0, 0.5),
        (2.0, 0.75),
        (3.0, 1.0),
    ]
    with pytest.raises(ImpossibleFigure):
        cdf([])
