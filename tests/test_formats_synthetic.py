"""Synthetic traces behave like real greedy models and are deterministic."""

from __future__ import annotations

import statistics

from as2d_cli.formats.trace import CHUNKED
from as2d_cli.synthetic import EOS_ID, synthetic_traces


def test_deterministic_and_seeded():
    a = synthetic_traces(3, scale=0.02)
    assert a.windows == synthetic_traces(3, scale=0.02).windows
    assert a.windows != synthetic_traces(4, scale=0.02).windows


def test_drafter_is_a_consistent_greedy_model():
    ts = synthetic_traces(9, scale=0.05)
    checked = 0
    for w in ts.windows:
        d = w.drafter
        assert d is not None and len(d.continuations) == w.n_tokens - 1
        for n in range(len(d.continuations) - 1):
            c, nxt = d.continuations[n], d.continuations[n + 1]
            assert len(c) == d.cap == 24
            if c[0] == w.reference[n + 1]:
                # Same prefix after the accepted token → the same greedy tokens.
                assert c[1:] == nxt[: d.cap - 1]
                assert d.confidences[n][1:] == d.confidences[n + 1][: d.cap - 1]
                checked += 1
    assert checked > 100


def _first_token_agreement(ts, dataset: str) -> float:
    hits = [
        c[0] == w.reference[n + 1]
        for w in ts.windows
        if w.dataset == dataset
        for n, c in enumerate(w.drafter.continuations)
    ]
    return statistics.fmean(hits)


def test_dataset_difficulty_shows_in_drafter_and_sources():
    ts = synthetic_traces(2, scale=0.1)
    assert (
        _first_token_agreement(ts, "librispeech") > 0.88 > 0.75 > _first_token_agreement(ts, "ami")
    )
    for w in ts.windows:
        q = w.sources["qwen"]
        assert q.eligible and q.confidences is not None and len(q.confidences) == len(q.tokens)
        if q.eos:
            assert q.tokens[-1] == EOS_ID
        for name in ("parakeet", "sensevoice"):
            s = w.sources[name]
            assert s.kind == CHUNKED and s.confidences is None
            if s.eligible:
                assert s.tokens == tuple(t for c in s.chunks for t in c.tokens)
                ends = [c.audio_end_s for c in s.chunks]
                assert ends == sorted(ends) and len(ends) >= 1
            else:
                assert s.tokens == ()
        assert w.sources["parakeet"].eligible == (w.language == "en")
        assert w.sources["sensevoice"].eligible == (w.language in ("en", "zh"))
