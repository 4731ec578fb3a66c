"""Where a native request's time goes (as2d_cli/models/timing.py): the target's thread and
the source, each split into ONNX Runtime calls, the Python around them and waiting."""

from __future__ import annotations

import pytest

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.models.timing import OrtLedger, TimedSession, ledger, mark, split_since


class _Slow:
    """A stand-in session whose run takes a known CPU time (the ledger's arithmetic)."""

    def run(self, names, feeds):  # type: ignore[no-untyped-def]
        x = 0
        for i in range(200_000):
            x += i
        return [x]

    def run_with_ort_values(self, feeds, names, options):  # type: ignore[no-untyped-def]
        return self.run(names, feeds)

    def get_inputs(self) -> list:
        return ["in"]


def test_a_timed_session_books_its_calls_and_passes_the_rest_through() -> None:
    s = TimedSession(_Slow())
    before = ledger().calls
    at = mark()
    s.run(None, {})
    s.run(None, {})
    s.run_with_ort_values([], {})  # the OrtValue path is booked the same way
    sp = split_since(at)
    assert ledger().calls == before + 3 and s.booked.calls == 3
    assert sp["ort_calls"] == 3 and 0 < sp["ort_ns"] <= sp["wall_ns"]
    assert sp["ort_ns"] + sp["python_ns"] + sp["wait_ns"] <= sp["wall_ns"] * 1.01 + 1e5
    assert s.get_inputs() == ["in"] and isinstance(s.booked, OrtLedger)


@pytest.mark.parametrize("method", ["target-only", "sd", "as2d"])
def test_a_request_reports_its_time_split(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    models = load_models()
    try:
        w = load_corpus().get("dev-read-000")
        res = run_request(
            models, w.load_audio(), decode_settings({"method": method, "window": w.id})
        )
    finally:
        models.close()
    t, src = res["time_split_ns"]["target"], res["time_split_ns"]["source"]
    assert t["ort_ns"] > 0 and t["ort_calls"] >= 1 and t["wall_ns"] <= res["time_ms"] * 1e6 * 1.01
    assert t["ort_ns"] + t["python_ns"] + t["wait_ns"] <= t["wall_ns"] * 1.01 + 1e5
    if method == "as2d":
        assert (
            src is not None and src["ort_ns"] > 0 and src["ort_calls"] >= len(res["source_steps"])
        )
    else:
        assert src is None
    if method == "sd":  # the serial drafter's calls ran on the target's thread, counted apart
        assert 0 < t["drafter_ort_ns"] < t["ort_ns"]


def test_native_reports_render_the_split_per_token() -> None:
    from as2d_cli.evaluate.native_render import split_text
    from as2d_cli.evaluate.native_stats import time_split_per_token

    runs = [
        {
            "n_tokens": 10,
            "source_tokens": list(range(20)),
            "time_split_ns": {
                "target": {"ort_ns": 5_000_000, "python_ns": 1_000_000, "wait_ns": 0},
                "source": {"ort_ns": 4_000_000, "python_ns": 2_000_000, "wait_ns": 400_000},
            },
        },
        {"n_tokens": 30, "source_tokens": [], "time_split_ns": {"target": {"ort_ns": 15_000_000}}},
    ]
    s = time_split_per_token(runs)
    assert s["target"]["ort_us"] == 500 and s["target"]["python_us"] == 25  # over 40 tokens
    assert s["source"]["ort_us"] == 200 and s["source"]["wait_us"] == 20  # over 20 published
    assert split_text("source", s["source"]) == "source 200 / 100 / 20"
    assert time_split_per_token([{"n_tokens": 3}]) == {}  # runs from before the split
