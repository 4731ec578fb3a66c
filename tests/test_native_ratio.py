"""eval --native puts the As²d / target-only ratio the replay predicts beside the one the
device gave, with the per-pass native ratios as the interval its repetitions give."""

from __future__ import annotations

import pytest

from as2d_cli.evaluate.native_render import render_native
from as2d_cli.evaluate.native_stats import ratio_comparison, summarize


def _row(window: str, rep: int, method: str, nat_s: float, rep_s: float, n: int = 100) -> dict:
    return {
        "window": window,
        "rep": rep,
        "method": method,
        "divergence": None,
        "res": {"n_tokens": n, "time_ms": nat_s * 1e3},
        "tps_native": n / nat_s,
        "tps_replay": n / rep_s,
        "error_percent": 100 * (nat_s / rep_s - 1),
    }


def _rows() -> list[dict]:
    # Two windows (100 and 300 tokens), two passes. Replayed: target-only 1.0 s and 3.0 s,
    # As²d 0.5 s and 1.0 s → replay ratio 400/4.0 ÷ … = (400/1.5)/(400/4.0) = 2.667.
    # Natively: pass 0 target-only 1.0 + 3.0, As²d 0.8 + 1.6 → 1.667; pass 1 target-only
    # 1.2 + 3.0, As²d 0.8 + 2.0 → 1.5; pooled (8.2 s vs 5.2 s) → 1.577.
    rows = []
    for rep, (t1, t2, a1, a2) in enumerate([(1.0, 3.0, 0.8, 1.6), (1.2, 3.0, 0.8, 2.0)]):
        rows += [
            _row("w1", rep, "target-only", t1, 1.0),
            _row("w2", rep, "target-only", t2, 3.0, n=300),
            _row("w1", rep, "as2d", a1, 0.5),
            _row("w2", rep, "as2d", a2, 1.0, n=300),
        ]
    return rows


def test_replay_and_native_ratios_over_the_same_windows() -> None:
    c = ratio_comparison(_rows())
    assert c is not None
    assert c["replay"] == pytest.approx(4.0 / 1.5)
    assert c["native"] == pytest.approx(8.2 / 5.2)
    assert c["native_per_pass"] == pytest.approx([4.0 / 2.4, 4.2 / 2.8])
    assert c["native_range"] == pytest.approx([1.5, 4.0 / 2.4])
    assert c["replay_over_native"] == pytest.approx((4.0 / 1.5) / (8.2 / 5.2))


def test_the_ratio_line_is_rendered_and_absent_without_both_methods() -> None:
    text = render_native(summarize(_rows()))
    assert (
        "As²d / target-only: replay 2.667×, native 1.577× (per pass 1.500–1.667×, 2 passes); "
        "replay ÷ native 1.691" in text
    )
    only_to = [r for r in _rows() if r["method"] == "target-only"]
    assert ratio_comparison(only_to) is None
    # a run whose replay is missing for a window gives no replay ratio rather than a wrong one
    rows = _rows()
    rows[0]["tps_replay"] = None
    assert ratio_comparison(rows)["replay"] is None


def _gap(to_nat, to_rep, a_nat, a_rep, v_nat, v_rep, r_nat, r_rep) -> dict:
    def fig(n: float, r: float) -> dict:
        return {"native": n, "replay": r, "ratio": r / n}

    return {
        "target-only": {"time_ms": fig(to_nat, to_rep)},
        "as2d": {
            "time_ms": fig(a_nat, a_rep),
            "verifier_ms": fig(v_nat, v_rep),
            "rounds": fig(r_nat, r_rep),
        },
    }


def test_the_ratio_error_is_the_product_of_its_factors() -> None:
    from as2d_cli.evaluate.replay_gap import ratio_factors, render_ratio_factors

    # Native: target-only 1000 ms, As²d 650 ms (V 600 over 100 rounds); repriced:
    # target-only 800 ms (the profile 20 % cheap), As²d 500 ms (V 480 over 96 rounds).
    gap = _gap(1000, 800, 650, 500, 600, 480, 100, 96)
    rf = ratio_factors(gap, replay_ratio=1.7)
    f = rf["factors"]
    assert f["trajectories"] == pytest.approx(1.7 / (800 / 500))
    assert f["target-only price"] == pytest.approx(0.8)
    assert f["As²d verify price"] == pytest.approx((600 / 100) / (480 / 96))
    assert f["As²d rounds"] == pytest.approx(100 / 96)
    assert f["As²d not verifying"] == pytest.approx((650 / 600) / (500 / 480))
    assert rf["replay_over_native"] == pytest.approx(1.7 / (1000 / 650))
    product = 1.0
    for x in f.values():
        product *= x
    assert product == pytest.approx(rf["replay_over_native"])
    assert sum(rf["shares"].values()) == pytest.approx(1.0)
    text = "\n".join(render_ratio_factors(rf))
    assert "target-only price" in text and "1.105 = the product" in text
    # no target-only runs, or no replay ratio: nothing to split
    assert ratio_factors({"as2d": gap["as2d"]}, 1.7) is None
    assert ratio_factors(gap, None) is None


def test_the_replay_ratio_is_the_replays_own_runs_when_given() -> None:
    # The replay part ran w1 and w2 its own way: target-only 1.0 s and 3.0 s, As²d 0.4 s and
    # 1.2 s; weighted as the native runs (each window twice) → (800/8.0) / (800/3.2) = 2.5.
    own = {
        "target-only": {"w1": (100, 1000.0), "w2": (300, 3000.0)},
        "as2d": {"w1": (100, 400.0), "w2": (300, 1200.0)},
    }
    c = ratio_comparison(_rows(), own)
    assert c["replay"] == pytest.approx(2.5)
    assert c["repriced"] == pytest.approx(4.0 / 1.5)  # the native trajectories repriced
    assert c["replay_over_native"] == pytest.approx(2.5 / (8.2 / 5.2))
    text = render_native(summarize(_rows(), own=own))
    assert "replay 2.500× (the native runs' own trajectories repriced: 2.667×)" in text
    # a window the replay part did not run: no replay ratio rather than a partial one
    del own["as2d"]["w2"]
    assert ratio_comparison(_rows(), own)["replay"] is None
