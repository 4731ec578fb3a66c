"""Every window of a replayed set, every method: committed tokens equal the reference and
T = D + V − O + H holds exactly, with each term checked against what the method's
structure implies (not just the identity that defines H)."""

from __future__ import annotations

import pytest

from as2d_cli.engine.accounting import intersect, measure, merge
from as2d_cli.engine.methods import MethodOptions
from as2d_cli.formats.profile import ms_to_ns
from as2d_cli.replay.run import run_method
from as2d_cli.synthetic import synthetic_profile, synthetic_traces


@pytest.fixture(scope="module")
def data():
    ts = synthetic_traces(seed=7, scale=0.06)
    return ts, synthetic_profile()


CASES = [
    ("target-only", {}),
    ("sd", {}),
    ("asp", {}),
    ("as2d", {"source": "qwen"}),
    ("as2d", {"source": "parakeet", "budget": 3}),
    ("as2d", {"source": "sensevoice", "budget": 12}),
    ("as2d-no-td", {}),
    ("as2d-no-bc", {"source": "qwen"}),
]


@pytest.mark.parametrize(
    "method,kw", CASES, ids=[f"{m}-{kw.get('source', '')}{kw.get('budget', '')}" for m, kw in CASES]
)
def test_identity_and_exactness_on_every_window(data, method, kw) -> None:
    ts, prof = data
    run = run_method(
        ts.windows, prof, method, MethodOptions(default_source=ts.default_source, **kw)
    )
    loop = ms_to_ns(prof.loop_ms)
    step = ms_to_ns(prof.target_step_ms)
    n = 0
    for spec, rows in zip(run.specs, run.runs):
        for w, r in zip(ts.windows, rows):
            n += 1
            assert r.committed == list(w.reference), (spec.label, w.id)
            assert r.tokens == len(w.reference)
            assert r.time_ns == r.D + r.V - r.O + r.H, (spec.label, w.id)
            assert min(r.D, r.V, r.O, r.H) >= 0 and r.O <= min(r.D, r.V)
            # The terms agree with the stored spans.
            assert r.D == measure(r.producer_spans) and r.V == measure(r.verifier_spans)
            assert r.O == measure(intersect(r.producer_spans, r.verifier_spans))
            assert r.H == r.time_ns - measure(
                merge(r.producer_spans + r.verifier_spans, 0, r.time_ns)
            )
            assert sum(r.width_histogram.values()) == r.rounds
            assert max(r.width_histogram) <= spec.max_width
            if spec.method == "target-only":
                assert (r.D, r.O, r.H) == (0, 0, 0) and r.V == r.time_ns == (r.tokens - 1) * step
            elif spec.serial:
                # Serial: nothing overlaps; H is exactly one loop residual per round.
                assert r.O == 0 and r.H == r.rounds * loop
            else:
                # Target-decoupled: the target is in service from 0 to its EOS, the
                # producer from 0 to its finish or drain; nothing else is in [0, T].
                assert r.verifier_spans == [(0, r.target_end_ns)]
                assert r.producer_spans and r.producer_spans[0][0] == 0
                assert r.time_ns == max(r.target_end_ns, r.producer_spans[-1][1])
                assert r.H == 0 and r.O == min(r.D, r.V)
    assert n == len(ts.windows) * len(run.specs)


def test_sd_time_is_forwards_times_step_plus_verification_plus_loop(data) -> None:
    # The paper's K70 SD accounting (D.4.2): drafting = forwards × 23.347 ms, verification =
    # rounds × the width-K cost, plus one loop residual per round — nothing else.
    ts, prof = data
    run = run_method(ts.windows, prof, "sd", MethodOptions(k=8))
    step, k8, loop = (ms_to_ns(x) for x in (prof.drafter.step_ms, prof.verify_ms(8), prof.loop_ms))
    assert step == 23_347_000 and k8 == 112_656_000
    for r in run.windows:
        assert r.D == r.draft_forwards * step
        n8 = r.width_histogram.get(8, 0)
        assert r.V == sum(n * ms_to_ns(prof.verify_ms(k)) for k, n in r.width_histogram.items())
        assert r.time_ns == r.D + r.V + r.rounds * loop
        # K−1 = 7 forwards per full-width round (+1 catch-up after full acceptance).
        assert 7 * n8 <= r.draft_forwards <= 8 * r.rounds
    assert sum(r.draft_forwards for r in run.windows) > 0
