"""`as2d traces build` with the bundled models: valid as2d.trace files whose reference is the
target's greedy output, whose drafter continuations are the drafter's own, and which resume."""

from __future__ import annotations

import json

import pytest

from as2d_cli.formats.trace_io import load_traces
from as2d_cli.tracegen.build import build_traces

MAX = 24


def test_build_resume_and_content(tmp_path) -> None:
    from as2d_cli.corpus.manifest import load_corpus
    from native.request import load_models

    out = tmp_path / "dev.jsonl.gz"
    seen: list[str] = []

    def stop_after_first(n: int, total: int, wid: str) -> None:
        seen.append(wid)
        if n == 1 and wid not in ("starting", "resumed"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_traces("dev", out, limit=2, processes=1, progress=stop_after_first, max_tokens=MAX)
    partial = out.with_name(out.name + ".partial.jsonl")
    lines = [json.loads(x) for x in partial.read_text().splitlines()]
    # the pair that made the partial first, then the one finished window
    assert (
        lines[0]["pair"]["name"] == "bundled"
        and [x["id"] for x in lines[1:]] == seen[1:2]
        and not out.exists()
    )
    events: list[str] = []
    path = build_traces(
        "dev", out, limit=2, processes=1, progress=lambda n, t, w: events.append(w), max_tokens=MAX
    )
    assert events[0] == "resumed" and not partial.exists()
    ts = load_traces(path, split="dev")
    assert (
        len(ts.windows) == 2
        and set(ts.sources) == {"drafter", "lookahead", "ctc"}
        and ts.default_source == "drafter"
    )

    models = load_models()
    corpus = load_corpus()
    for w in ts.windows:
        audio = corpus.get(w.id).load_audio()
        t = models.target
        ref = [t.start(audio)]
        while ref[-1] != t.eos_id and len(ref) < MAX:
            ref.append(t.verify([ref[-1]])[0])
        assert list(w.reference) == ref and w.eos == (ref[-1] == t.eos_id) and w.max_tokens == MAX
        assert len(w.drafter.continuations) == len(ref) and w.drafter.cap == 24
        models.drafter.start(audio)
        for n in range(len(ref)):
            d = models.drafter.draft(ref[: n + 1], 24)
            assert list(w.drafter.continuations[n][: len(d.tokens)]) == list(d.tokens)
        src = w.sources["drafter"]
        assert src.kind == "autoregressive" and len(src.confidences) == len(src.tokens) > 0
        assert src.steps is None  # one token per forward
        la = w.sources["lookahead"]  # the same drafter, one or two tokens per forward
        assert la.steps is not None and set(la.steps) <= {1, 2} and sum(la.steps) == len(la.tokens)
        assert w.sources["ctc"].eligible == (w.language == "en")
    with pytest.raises(Exception, match="never overwritten"):
        build_traces("dev", out, limit=2, processes=1, max_tokens=MAX)
