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
