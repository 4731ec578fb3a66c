"""Property tests for the statistics: the oracle is never beaten by a catalog entry, the gap
of any catalog entry is ≥ 0, pooled TPS lies between the extreme window rates, and the
slowdown counts partition the windows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d_cli.stats import Outcome, oracle, oracle_gap, pooled_tps, slowdown, tps_by_dataset

times = st.floats(0.01, 100.0, allow_nan=False)


@st.composite
def catalogs(draw):
    n = draw(st.integers(1, 8))
    tokens = [draw(st.integers(1, 500)) for _ in range(n)]
    datasets = [draw(st.sampled_from(["a", "b", "c"])) for _ in range(n)]
    k = draw(st.integers(1, 5))
    return {
        f"cfg{j}": [Outcome(f"w{i}", datasets[i], tokens[i], draw(times)) for i in range(n)]
        for j in range(k)
    }


@settings(max_examples=200, deadline=None)
@given(catalogs())
def test_oracle_dominates_every_fixed_configuration(cat):
    r = oracle(cat)
    for outs in cat.values():
        tps = pooled_tps(outs)
        assert r.tps >= tps * (1 - 1e-12)
        assert oracle_gap(tps, r.tps) >= -1e-9
    assert set(r.choice.values()) <= set(cat)
    assert sum(o.tokens for o in r.outcomes) == sum(o.tokens for o in next(iter(cat.values())))


@settings(max_examples=200, deadline=None)
@given(catalogs())
def test_pooled_between_extreme_window_rates(cat):
    outs = next(iter(cat.values()))
    rates = [o.tps for o in outs]
    p = pooled_tps(outs)
    assert min(rates) * (1 - 1e-12) <= p <= max(rates) * (1 + 1e-12)
    by = tps_by_dataset(outs)
    assert by["all"] == pytest.approx(p)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("xyz", min_size=1, max_size=3), st.tuples(times, times), min_size=1))
def test_slowdown_partitions_windows(pairs):
    m = {w: a for w, (a, _) in pairs.items()}
    b = {w: c for w, (_, c) in pairs.items()}
    s = slowdown(m, b)
    assert s.faster + s.slower + s.ties == s.n == len(pairs)
    assert all(m[w] < b[w] for w in s.slower_windows)
    if s.slower:
        assert 0 < s.median_loss_pct <= s.max_loss_pct < 100
