"""Catalog sweeps and selection: the fan-out over processes gives the same times as
in-process replay, the ranking is by pooled TPS, the oracle is a per-window minimum, and
an ineligible source falls back to the default source at the same budget (D.4.3)."""

from __future__ import annotations

import numpy as np
import pytest

from as2d_cli.engine.methods import DEFAULT_BATCH, DEFAULT_THRESHOLD, MethodSpec, spec_grid
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.trace import TraceSet
from as2d_cli.replay.driver import Prepared, replay_window
from as2d_cli.replay.selection import oracle, rank, rank_settings, select_budget
from as2d_cli.replay.sweep import sweep
from as2d_cli.synthetic import synthetic_profile, synthetic_traces

SOURCES = ["qwen", "parakeet", "sensevoice"]


@pytest.fixture(scope="module")
def data():
    ts = synthetic_traces(seed=3, scale=0.04, drafter=False)
    return ts, synthetic_profile()


@pytest.fixture(scope="module")
def cat(data):
    ts, prof = data
    return sweep(ts.windows, prof, SOURCES, range(1, 13), processes=1)


def test_parallel_sweep_equals_in_process_and_detailed_replay(data, cat) -> None:
    ts, prof = data
    par = sweep(ts.windows, prof, SOURCES, range(1, 13), processes=2)
    assert np.array_equal(par.times, cat.times) and np.array_equal(par.rounds, cat.rounds)
    assert par.used == cat.used
    # Spot-check against the detailed (interval-recording) replay of single windows.
    for i in (0, len(ts.windows) // 2, len(ts.windows) - 1):
        w = ts.windows[i]
        for j, s in enumerate(SOURCES):
            for b in (1, 7, 12):
                r = replay_window(w, Prepared(prof, MethodSpec("as2d", budget=b, source=s)))
                assert r.time_ns == cat.times[i, j, b - 1]
                assert r.source == cat.used[i][j]


def test_saturated_budgets_reuse_is_exact(data, cat) -> None:
    ts, prof = data
    full = sweep(ts.windows, prof, SOURCES, range(1, 13), processes=1, reuse=False)
    assert np.array_equal(full.times, cat.times) and np.array_equal(full.rounds, cat.rounds)
    assert full.simulated_rounds == full.n_rounds
    assert cat.simulated_rounds < cat.n_rounds  # some budgets never bound and were reused


def test_ineligible_windows_use_the_default_source_at_the_same_budget(data, cat) -> None:
    ts, _ = data
    fell_back = 0
    for i, w in enumerate(ts.windows):
        for j, s in enumerate(SOURCES):
            if not w.sources[s].eligible:
                fell_back += 1
                assert cat.used[i][j] == "qwen"
                assert np.array_equal(cat.times[i, j], cat.times[i, 0])
            else:
                assert cat.used[i][j] == s
    assert fell_back > 0  # the synthetic cohort has Chinese windows parakeet cannot serve


def test_ranking_and_oracle(data, cat) -> None:
    ranked = rank(cat)
    assert len(ranked) == 3 * 12
    tps = cat.pooled_tps()
    assert [r.tps for r in ranked] == sorted((float(x) for x in tps.ravel()), reverse=True)
    best = ranked[0]
    orc = oracle(cat, best.source, best.budget)
    # The oracle takes each window's least time over the whole catalog.
    per_window_min = cat.times.reshape(len(cat.window_ids), -1).min(axis=1)
    assert orc.tps_oracle == pytest.approx(
        cat.tokens.sum() / (per_window_min.sum() / 1e9), rel=1e-12
    )
    assert orc.tps_oracle >= orc.tps_selected == pytest.approx(best.tps, rel=1e-12)
    assert orc.gap_percent == pytest.approx(100 * (1 - best.tps / orc.tps_oracle), rel=1e-12)
    for (_wid, src, b), i in zip(orc.choices, range(len(cat.window_ids))):
        j = cat.budgets.index(b)
        assert (
            min(cat.times[i, s_, j] for s_ in range(3) if cat.used[i][s_] == src)
            == per_window_min[i]
        )
    with pytest.raises(UserError):
        oracle(cat, "qwen", 99)


def test_rank_ties_prefer_the_smaller_budget() -> None:
    from as2d_cli.replay.sweep import CatalogTimes

    t = np.array(
        [[[10, 10, 20], [10, 30, 30]]], dtype=np.int64
    )  # one window, 2 sources × 3 budgets
    cat = CatalogTimes(["w"], ["d"], np.array([5]), ["a", "b"], [1, 2, 3], t, t, [["a", "b"]])
    assert [(r.source, r.budget) for r in rank(cat)[:3]] == [("a", 1), ("b", 1), ("a", 2)]


def _dev_and_val() -> tuple[TraceSet, TraceSet, TraceSet]:
    """Synthetic dev and val traces, and one set holding both."""
    dev = synthetic_traces(seed=5, scale=0.03, drafter=False, split="dev")
    val = synthetic_traces(seed=6, scale=0.03, drafter=False, split="val")
    both = TraceSet(
        dev.provenance, dev.eos_id, dev.sources, dev.default_source, dev.windows + val.windows
    )
    return dev, val, both


def test_select_budget_on_dev_with_val_retention() -> None:
    dev, val, ts = _dev_and_val()
    prof = synthetic_profile()
    sel = select_budget(ts, prof, budgets=range(1, 11), processes=1)
    devcat = sweep(dev.windows, prof, SOURCES, range(1, 11), processes=1)
    best = rank(devcat)[0]
    assert (sel.source, sel.budget) == (best.source, best.budget)
    assert sel.dev["windows"] == len(dev.windows) and sel.val["windows"] == len(val.windows)
    valcat = sweep(val.windows, prof, SOURCES, range(1, 11), processes=1)
    chosen_val = valcat.pooled_tps()[SOURCES.index(sel.source), sel.budget - 1]
    assert sel.val["tps"] == pytest.approx(float(chosen_val), rel=1e-12)
    assert sel.val["retained"] == (chosen_val >= 0.99 * valcat.pooled_tps().max())
    # No dev windows: a clear error; a budget beyond the profile's widths is dropped, not zero-cost.
    with pytest.raises(UserError, match="no 'dev' windows"):
        select_budget(
            TraceSet(val.provenance, val.eos_id, val.sources, val.default_source, val.windows), prof
        )
    small = synthetic_profile(max_width=9)
    sel2 = select_budget(
        TraceSet(dev.provenance, dev.eos_id, dev.sources, dev.default_source, dev.windows),
        small,
        budgets=range(1, 13),
        processes=1,
    )
    assert sel2.catalog["budgets"] == list(range(1, 9)) and sel2.catalog["dropped_budgets"] == [
        9,
        10,
        11,
        12,
    ]
    assert sel2.val is None


def test_sweep_refuses_a_missing_width_before_running(data) -> None:
    ts, _ = data
    with pytest.raises(FormatError, match="K13"):
        sweep(ts.windows, synthetic_profile(max_width=12), ["qwen"], [12], processes=2)


def test_ranking_across_settings_keeps_each_settings_order_and_breaks_ties_by_setting() -> None:
    from as2d_cli.replay.sweep import CatalogTimes

    def cat(times: list[list[int]]) -> CatalogTimes:
        t = np.array([times], dtype=np.int64)  # one window, 2 sources × 2 budgets
        return CatalogTimes(["w"], ["d"], np.array([5]), ["a", "b"], [1, 2], t, t, [["a", "b"]])

    slow, fast = cat([[20, 30], [20, 40]]), cat([[20, 10], [40, 40]])

    def st(threshold: float, batch: int) -> MethodSpec:
        return MethodSpec("as2d", threshold=threshold, batch=batch)

    merged = rank_settings([(st(0.4, 8), slow), (st(0.7, 2), fast)])
    assert len(merged) == 8
    assert (merged[0].source, merged[0].budget, merged[0].threshold, merged[0].batch) == (
        "a",
        2,
        0.7,
        2,
    )
    # Equal TPS: the smaller budget first, then the earlier setting, then the source order.
    assert [(r.source, r.budget, r.threshold) for r in merged[1:4]] == [
        ("a", 1, 0.4),
        ("b", 1, 0.4),
        ("a", 1, 0.7),
    ]
    # Each setting's own order survives the merge, and one setting is plain rank().
    for setting, c in ((st(0.4, 8), slow), (st(0.7, 2), fast)):
        own = [
            (r.source, r.budget)
            for r in merged
            if (r.threshold, r.batch) == (setting.threshold, setting.batch)
        ]
        assert own == [(r.source, r.budget) for r in rank(c, setting)]
    assert rank(slow) == rank_settings([(st(DEFAULT_THRESHOLD, DEFAULT_BATCH), slow)])


def test_a_wider_catalog_picks_the_best_setting_and_reports_it() -> None:
    _, _, ts = _dev_and_val()
    prof = synthetic_profile()
    budgets = range(1, 7)
    ths, bts = (0.4, 0.9), (1, 8)
    heard: list[tuple[str, int, int]] = []
    wide = select_budget(
        ts,
        prof,
        budgets=budgets,
        processes=1,
        settings=spec_grid(MethodSpec("as2d"), {"threshold": ths, "batch": bts}),
        progress=lambda *a: heard.append(a),
    )
    # One report per sweep as it starts: every setting on dev, then on val.
    assert [(d, n) for _, d, n in heard] == [(i, 8) for i in range(8)]
    assert (
        heard[0][0] == "dev, threshold 0.4, batch 1"
        and heard[5][0] == "val, threshold 0.4, batch 8"
    )
    singles = {
        (t, b): select_budget(
            ts,
            prof,
            budgets=budgets,
            processes=1,
            settings=[MethodSpec("as2d", threshold=t, batch=b)],
        )
        for t in ths
        for b in bts
    }
    best = max(singles.items(), key=lambda kv: kv[1].dev["tps"])
    assert wide.dev["tps"] == max(s.dev["tps"] for s in singles.values())
    assert (wide.threshold, wide.batch) == best[0]
    assert (wide.source, wide.budget) == (best[1].source, best[1].budget)
    assert wide.dev["oracle"] == best[1].dev["oracle"]  # the oracle of the chosen setting
    assert wide.catalog["thresholds"] == list(ths) and wide.catalog["batches"] == list(bts)
    assert wide.catalog["configurations"] == len(SOURCES) * len(budgets) * 4
    # Validation ranks the chosen configuration among every setting's.
    val_best = max(s.val["best"]["tps"] for s in singles.values())
    assert wide.val["best"]["tps"] == pytest.approx(val_best, rel=1e-12)
    assert wide.val["tps"] == pytest.approx(best[1].val["tps"], rel=1e-12)
    # The settings differ on these traces, so the test can tell a wrong pick.
    assert len({round(s.dev["tps"], 9) for s in singles.values()}) > 1
