"""The native runner on the bundled models: every method is exact, accounting holds,
bad commands get one error event, external candidates work (runner conformance)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from as2d_cli.launch.host import LocalRunner, RunnerError, default_cores
from native.protocol import METHODS, PROTOCOL_VERSION

MAX = 48


@pytest.fixture(scope="module")
def runner():
    from as2d_cli.corpus.manifest import load_corpus

    windows = sorted(load_corpus().split("dev"), key=lambda w: w.seconds)
    tc, pc = default_cores()
    r = LocalRunner()
    hello = r.call({"op": "hello"})
    assert hello["protocol"] == "as2d.runner" and hello["version"] == PROTOCOL_VERSION
    loaded = r.call({"op": "load", "target_cores": tc, "producer_cores": pc})
    assert loaded["max_tokens"] > MAX
    r.window = windows[0].id
    r.english = next(w.id for w in windows if w.language == "en")
    yield r
    r.close()


def _decode(r, method, **kw):
    return r.call(
        {
            "op": "decode",
            "window": kw.pop("window", r.window),
            "method": method,
            "max_tokens": MAX,
            **kw,
        }
    )


def test_every_method_commits_target_only_tokens(runner) -> None:
    ref = _decode(runner, "target-only")
    assert ref["n_tokens"] == len(ref["tokens"]) >= 2
    assert len(ref["margins"]) == ref["n_tokens"]
    for method in METHODS:
        res = _decode(runner, method)
        assert res["tokens"] == ref["tokens"], f"{method} diverged from target-only"
        a = res["accounting_ns"]
        assert a["T"] == a["D"] + a["V"] - a["O"] + a["H"]
        assert a["T"] > 0 and abs(res["tps"] - res["n_tokens"] / (a["T"] / 1e9)) < 1e-6
        assert sum(r["committed"] for r in res["rounds"]) == res["n_tokens"] - 1
        kinds = {e["op"] for e in res["events"]}
        if method in ("as2d", "as2d-no-bc"):
            # The producer may not publish before a fast target ends; what it did publish is logged.
            assert "verify" in kinds and kinds <= {
                "verify",
                "align",
                "source_step",
                "publish",
                "producer_done",
            }
            pubs = [e for e in res["events"] if e["op"] == "publish"]
            assert sum(e["count"] for e in pubs) == len(res["source_tokens"])
            assert max(r["width"] for r in res["rounds"]) <= (8 if method == "as2d" else 25)
        if method in ("sd", "asp", "as2d-no-td"):
            assert "draft" in kinds and res["drafts"]
        if method == "target-only":
            assert kinds <= {"target_step"}


def test_chunked_source_and_perfect_external_candidates(runner) -> None:
    ref = _decode(runner, "target-only", window=runner.english)
    ctc = _decode(runner, "as2d", window=runner.english, source="ctc")
    assert ctc["tokens"] == ref["tokens"] and ctc["source"] == "ctc"
    # The target's own output published at once: every candidate is accepted, rounds shrink.
    ext = _decode(
        runner,
        "as2d",
        window=runner.english,
        source="external",
        candidates=[{"t_ms": 0, "tokens": ref["tokens"]}],
    )
    assert ext["tokens"] == ref["tokens"]
    decoded = ref["n_tokens"] - 1
    rounds = ext["summary"]["rounds"]
    assert rounds == -(-decoded // 8)  # budget 7: root + 7 accepted + the bonus per call
    assert ext["summary"]["accepted"] >= decoded - rounds


def test_source_runs_in_its_own_process_and_publishes_its_own_sequence(runner) -> None:
    """The decoupled source runs in a worker process (no interpreter lock shared with the
    target) and publishes exactly the sequence the source produces in-process."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.engine import CandidateBuffer, WallClock
    from as2d_cli.models.model_pair import load_pair
    from as2d_cli.models.session import Seq2SeqModel
    from as2d_cli.models.sources import DrafterSource
    from as2d_cli.models.target import OrtTarget
    from native.producer_process import ProcessProducer, ProducerWorker

    res = _decode(runner, "as2d", window=runner.english, source="drafter")
    assert (
        res["producer_mode"] == "process"
        and res["tokens"] == _decode(runner, "target-only", window=runner.english)["tokens"]
    )
    steps = [e for e in res["events"] if e["op"] == "source_step"]
    assert (
        steps and steps[0]["tokens"] == 0 and all(e["end_ns"] >= e["t_ns"] >= 0 for e in steps)
    )  # startup first

    audio = load_corpus().get(runner.english).load_audio()
    own = DrafterSource(Seq2SeqModel(load_pair(), "drafter", 1), audio, 20)
    own.start()
    expected = []
    while (unit := own.step()) is not None:
        expected += [t for t, _ in unit]
    target = OrtTarget(load_pair())
    target.start(audio)  # the target's encoder states, which the shipped drafter reads
    worker = ProducerWorker(None, 1, None)
    try:
        # run to the source's own end (nothing races it); handed the target's states or not
        for batch, hidden in ((1, None), (8, target.hidden)):
            clock = WallClock()
            worker.arm("drafter", audio, 20, "autoregressive", batch, hidden)
            p = ProcessProducer(worker, CandidateBuffer("drafter"), clock)
            p.start()
            if hidden is None:
                # No receiver thread: what the worker sent comes in when the buffer is read.
                deadline = time.monotonic() + 60
                while p.buffer.ready_count(clock.now()) < len(expected):
                    assert time.monotonic() < deadline, "the publications never came in"
                    time.sleep(0.01)
                while p.running():
                    assert time.monotonic() < deadline, "the worker's end never came in"
                    time.sleep(0.01)
                assert p.buffer.closed
            p.join(60)
            assert p.error is None and p.finished_at is not None
            assert list(p.buffer.tokens) == expected
            assert sum(n for _, _, n in p.publications) == len(expected)
            assert all(n <= batch for _, _, n in p.publications)
    finally:
        worker.close()
    # A worker that cannot load its models is one clear error (the runner then uses a thread).
    with pytest.raises(Exception, match="could not load the models"):
        ProducerWorker("/nonexistent/models", 1, None)


def test_bad_commands_get_one_error_event(runner) -> None:
    with pytest.raises(RunnerError, match="unknown op"):
        runner.call({"op": "fly"})
    with pytest.raises(RunnerError, match="'method' must be one of"):
        runner.call({"op": "decode", "window": runner.window, "method": "magic"})
    with pytest.raises(RunnerError, match="no window"):
        runner.call({"op": "decode", "window": "nope", "method": "sd"})
    with pytest.raises(RunnerError, match="t_ms"):
        runner.call(
            {
                "op": "decode",
                "window": runner.window,
                "method": "as2d",
                "source": "external",
                "candidates": [{"tokens": [1]}],
            }
        )
    assert runner.call({"op": "hello"})["event"] == "hello"  # still alive


def test_runner_file_mode(tmp_path) -> None:
    import subprocess
    import sys

    cmds = tmp_path / "c.jsonl"
    out = tmp_path / "e.jsonl"
    cmds.write_text('{"op":"hello"}\nnot json\n{"op":"quit"}\n')
    subprocess.run(
        [sys.executable, "-m", "native.runner", "--commands", str(cmds), "--out", str(out)],
        check=True,
    )
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [e["event"] for e in events] == ["hello", "error", "bye"]
    assert "not JSON" in events[1]["message"]


def test_a_producer_is_joined_while_another_thread_reads_its_buffer() -> None:
    """join waits for the worker's end while another thread (the target's, in a stream's
    backlog) keeps reading the buffer, each read taking in what has arrived: neither
    breaks the other, and every publication comes in once."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.engine import CandidateBuffer, WallClock
    from native.producer_process import ProcessProducer, ProducerWorker

    audio = load_corpus().get("dev-read-000").load_audio()
    worker = ProducerWorker(None, 1, None)
    try:
        clock = WallClock()
        worker.arm("drafter", audio, 40, "autoregressive", 1, None)
        p = ProcessProducer(worker, CandidateBuffer("drafter"), clock)
        errors: list[BaseException] = []
        stop = threading.Event()

        def read() -> None:
            try:
                while not stop.is_set():
                    p.buffer.ready_count(clock.now())
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        reader = threading.Thread(target=read)
        p.start()
        reader.start()
        p.join(60)
        stop.set()
        reader.join(10)
        assert errors == [] and p.error is None and p.buffer.closed
        assert sum(n for _, _, n in p.publications) == len(p.buffer.tokens) > 0
    finally:
        worker.close()


def test_a_dead_producer_process_is_replaced_for_the_next_request() -> None:
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.errors import UserError
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    w = sorted(load_corpus().split("dev"), key=lambda w: w.seconds)[0]
    audio = w.load_audio()
    models = load_models()
    s = decode_settings(
        {
            "method": "as2d",
            "window": w.id,
            "source": "drafter",
            "budget": 2,
            "max_tokens": 24,
            "events": False,
        }
    )
    try:
        first = run_request(models, audio, s, language=w.language)
        assert first["producer_mode"] == "process"
        models._worker.process.kill()
        models._worker.process.join(10)
        again = run_request(models, audio, s, language=w.language)  # a new worker, not a crash
        assert again["producer_mode"] == "process" and again["tokens"] == first["tokens"]
    except UserError as exc:  # pragma: no cover - the message must say what failed
        pytest.fail(f"a dead worker was not replaced: {exc}")
    finally:
        models.close()


def _thread_ticks(pid: int) -> dict[str, int]:
    """CPU ticks (user + system) of every thread of ``pid``."""
    import os

    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def test_no_second_thread_of_the_runner_spins_while_the_target_decodes(runner) -> None:
    """Target-only keeps one core busy, not two: numpy's OpenBLAS, left to start a worker per
    core, busy-waits after every log-mel on the core the producer (or the target) needs."""
    import os

    from as2d_cli.corpus.manifest import load_corpus

    hello = runner.call({"op": "hello"})
    assert hello["blas_threads"] == "1"
    if not os.path.isdir(f"/proc/{hello['pid']}/task"):
        pytest.skip("needs /proc")
    window = max(load_corpus().split("dev"), key=lambda w: w.seconds).id
    before = _thread_ticks(hello["pid"])
    for _ in range(8):
        _decode(runner, "target-only", window=window)
    after = _thread_ticks(hello["pid"])
    used = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    assert used[0] >= 20, f"the decodes took too little CPU to tell ({used})"
    assert sum(used[1:]) <= 0.2 * used[0], (
        f"threads other than the decoding one used {used[1:]} ticks vs {used[0]}"
    )


def test_a_native_runs_replay_keeps_its_publications_and_prices_the_same_work(runner) -> None:
    """The agreement's op-by-op comparison: a native As²d run with the CTC source, replayed
    with the K70 profile, has one replayed publication per native one, the same tokens, and
    its figures line up for the report."""
    from as2d_cli.evaluate.native import native_trace, replay_native
    from as2d_cli.evaluate.replay_gap import gap_summary, native_facts
    from as2d_cli.formats.profile_io import load_profile

    res = _decode(runner, "as2d", window=runner.english, source="ctc", budget=3, events=False)
    assert res["source"] == "ctc" and res["publications_ms"]
    profile = load_profile(
        Path(__file__).resolve().parents[1]
        / "as2d_cli"
        / "assets"
        / "profiles"
        / "k70.profile.yaml"
    )
    w = native_trace(
        runner.english,
        "read",
        res,
        eos_id=int(res["tokens"][-1]) if res["eos"] else -1,
        audio_s=5.0,
    )
    tps, rep = replay_native(profile, w, res)
    nat = native_facts(res)
    assert tps and tps > 0
    assert len(rep["publications_ms"]) == len(nat["publications_ms"])
    assert (
        rep["publications_ms"] == sorted(rep["publications_ms"]) and rep["producer_finished_ms"] > 0
    )
    assert 0 < rep["verifier_ms"] <= rep["time_ms"] and rep["rounds"] >= 1
    assert nat["verifier_ms"] == pytest.approx(res["accounting_ms"]["V"])
    g = gap_summary([{"method": "as2d", "native_facts": nat, "replay_facts": rep}])["as2d"]
    assert g["publications"] == len(nat["publications_ms"]) and g["time_ms"][
        "ratio"
    ] == pytest.approx(rep["time_ms"] / nat["time_ms"])
