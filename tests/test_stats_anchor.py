"""Anchor check (paper Table 8, D.2.2): target-only at 59.391 ms per step over 688
windows totalling 94,511 tokens, first token free, pools to 16.96 TPS — computed with the
stats functions over the synthetic traces of the paper's shape."""

from __future__ import annotations

import pytest

from as2d_cli.formats.profile import ms_to_ns
from as2d_cli.stats import Outcome, tps_by_dataset
from as2d_cli.synthetic import DATASETS, synthetic_profile, synthetic_traces


@pytest.fixture(scope="module")
def traces():
    return synthetic_traces(drafter=False)


def test_synthetic_cohort_has_the_papers_shape(traces):
    assert len(traces) == 688 and traces.n_tokens == 94_511
    counts = {d: sum(1 for w in traces.windows if w.dataset == d) for d in DATASETS}
    assert counts == {"librispeech": 165, "ami": 53, "fleurs": 91, "kespeech": 188, "m4singer": 191}
    assert sum(w.capped for w in traces.windows) == 1
    assert [w.dataset for w in traces.windows if w.capped] == ["fleurs"]
    assert sum(not w.sources["qwen"].eos for w in traces.windows) == 2  # two capped Qwen sequences
    assert 136 < traces.n_tokens / len(traces) < 138
    assert sum(w.audio_seconds for w in traces.windows) == pytest.approx(11.0 * 3600, rel=1e-6)


def test_target_only_anchor_is_16_96_tps(traces):
    step_ns = ms_to_ns(synthetic_profile().target_step_ms)
    assert step_ns == 59_391_000
    outs = [
        Outcome.from_ns(w.id, w.dataset, w.n_tokens, (w.n_tokens - 1) * step_ns)
        for w in traces.windows
    ]
    tps = tps_by_dataset(outs)
    assert round(tps["all"], 2) == 16.96
    assert tps["all"] == pytest.approx(94_511 / (93_823 * 0.059391), rel=1e-12)
    # The K70 target-only row of Table 8, per dataset.
    table8 = {
        "librispeech": 16.92,
        "ami": 16.92,
        "fleurs": 16.94,
        "kespeech": 17.00,
        "m4singer": 17.04,
    }
    assert {d: round(tps[d], 2) for d in table8} == table8
