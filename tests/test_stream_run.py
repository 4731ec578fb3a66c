"""The stream on the bundled models: pacing, the queue, context resets, both source
lifetimes and exactness against target-only. Virtual clocks keep it fast; a clock running
10 000 times real time makes every block take longer than the block interval on any machine,
so the backlog does not depend on this host's speed."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from as2d_cli.engine.methods import spec_of
from as2d_cli.errors import EngineError, UserError
from native.stream_clock import SkipClock
from native.stream_loop import check_blocks, run_stream
from native.stream_pacer import RATE, Pacer, plan_blocks
from native.stream_recording import stream_audio
from native.stream_settings import StreamSettings

BLOCK_S, CONTEXT_S = 2.0, 4.0  # two blocks per context epoch
SECONDS = 6.0  # three blocks: one whole context epoch and the first block of the next
FAST = 10_000  # virtual time runs this many times real time: a 2 s block interval is 0.2 ms


@pytest.fixture(scope="module")
def models():
    from native.request import load_models

    m = load_models()
    yield m
    m.close()


@pytest.fixture(scope="module")
def audio():
    from as2d_cli.corpus.manifest import load_corpus

    ids = [w.id for w in load_corpus().split("test") if w.language == "en"][:2]
    a, lang = stream_audio({"windows": ids, "seconds": SECONDS}, None)
    assert lang == "en" and len(a) == SECONDS * RATE
    return a


def _settings(method: str, lifetime: str = "arrival", **spec: object) -> StreamSettings:
    return StreamSettings(
        spec=spec_of(method, **spec), lifetime=lifetime, block_s=BLOCK_S, context_s=CONTEXT_S
    )


@pytest.fixture(scope="module")
def reference(models, audio):
    """Target-only, paced on a virtual clock."""
    return run_stream(models, audio, _settings("target-only"), language="en", make_clock=SkipClock)


def test_blocks_arrive_in_real_time_and_are_processed_in_order(reference) -> None:
    blocks = reference.blocks
    assert [b["block"] for b in blocks] == list(range(3))
    assert [b["arrival_s"] for b in blocks] == [2.0, 4.0, 6.0]
    prev_finish = 0.0
    for b in blocks:
        assert b["start_s"] >= b["arrival_s"]  # nothing is processed before it arrives
        assert b["start_s"] >= prev_finish  # serial target path
        assert b["finish_s"] >= b["start_s"] + b["encoder_s"] + b["prefill_s"] + b["decode_s"]
        prev_finish = b["finish_s"]
    assert reference.drained_s >= reference.end_s >= blocks[-1]["finish_s"]


def test_context_persists_then_resets(models, reference) -> None:
    blocks = reference.blocks
    eos = models.target.eos_id
    assert [b["epoch"] for b in blocks] == [0, 0, 1]
    assert [b["context_audio_s"] for b in blocks] == [2.0, 4.0, 2.0]
    for b, prev in zip(blocks, [None, *blocks[:-1]]):
        if b["epoch"] != (prev or {}).get("epoch"):
            assert b["context_tokens"] == 0  # reset: no text carried over
        else:  # the previous block's committed text (EOS excluded), within the cap
            body = [t for t in prev["tokens"] if t != eos]
            assert b["context_tokens"] == min(len(body), models.target.model.max_positions // 2)


def test_a_backlog_queues_every_block_and_drops_none(models, audio, reference) -> None:
    slow = run_stream(
        models, audio, _settings("target-only"), language="en", make_clock=lambda: SkipClock(FAST)
    )
    blocks = slow.blocks
    assert [b["block"] for b in blocks] == list(range(3))
    for b, prev in zip(blocks[1:], blocks):
        # each block waits for the one before it: queue wait = previous finish - arrival
        assert b["start_s"] >= prev["finish_s"] > b["arrival_s"]
        assert b["start_s"] - b["arrival_s"] > 0
    # while block 0 was processed every other block arrived: two wait at block 1
    assert [b["queued"] for b in blocks] == [1, 2, 1]
    assert [b["tokens"] for b in blocks] == [b["tokens"] for b in reference.blocks]


@pytest.mark.parametrize("lifetime", ["arrival", "consumption"])
def test_both_source_lifetimes_commit_target_only_tokens(
    models, audio, reference, lifetime
) -> None:
    run = run_stream(
        models,
        audio,
        _settings("as2d", lifetime=lifetime),
        language="en",
        make_clock=lambda: SkipClock(FAST),
    )
    assert [b["tokens"] for b in run.blocks] == [b["tokens"] for b in reference.blocks]
    ended = [e["ended"] for e in run.epochs]
    assert len(ended) == 3 and run.source_error is None
    if lifetime == "arrival":  # a deadline one block after arrival: the backlog expires epochs
        assert "consumed" not in ended and {"deadline", "skipped"} & set(ended)
    else:  # never by a deadline: until the source's end or the target has used the block
        assert not {"deadline"} & set(ended)
    for e in run.epochs:
        if e["start_s"] is not None:  # the worker read block i only once it had arrived
            assert e["start_s"] >= run.blocks[e["block"]]["arrival_s"]


def test_as2d_on_a_real_clock_equals_target_only(models, audio) -> None:
    short = audio[: 2 * RATE]  # two 1 s blocks in one epoch, paced in real time: about 2 s
    s = StreamSettings(block_s=1.0, context_s=2.0, check=True)
    run = run_stream(models, short, s, language="en")
    ref = run_stream(
        models, short, replace(s, spec=spec_of("target-only")), language="en", make_clock=SkipClock
    )
    assert [b["tokens"] for b in run.blocks] == [b["tokens"] for b in ref.blocks]
    assert run.blocks[1]["context_tokens"] > 0  # the second block decoded after the first's text
    assert all(c["equal"] for c in check_blocks(models, short, s, run.blocks, language="en"))
    assert run.source_mode in ("process", "thread") and len(run.epochs) == 2


def test_sd_commits_target_only_tokens(models, audio, reference) -> None:
    two = audio[: 4 * RATE]
    run = run_stream(models, two, _settings("sd"), language="en", make_clock=SkipClock)
    assert [b["tokens"] for b in run.blocks] == [b["tokens"] for b in reference.blocks[:2]]


def test_the_pacer_refuses_to_read_the_future() -> None:
    blocks = plan_blocks(int(5 * RATE), 2.0, 4.0)
    clock = SkipClock()
    pacer = Pacer(np.zeros(int(5 * RATE), dtype=np.float32), blocks, clock)
    with pytest.raises(EngineError, match="before it arrives"):
        pacer.audio(0)
    clock.idle_until(2.0)
    assert len(pacer.audio(0)) == 2 * RATE and pacer.arrived_count() == 1
    with pytest.raises(EngineError):
        pacer.audio(1, context=True)
    stop = threading.Event()
    stop.set()
    assert pacer.wait(1, stop) is False  # another thread waits (here: told to stop) ...
    assert not pacer.arrived(1)  # ... and never skips time itself
    clock.idle_until(5.0)
    # the 1 s remainder is the last block; context from its epoch's start
    assert [(b.start, b.end, b.epoch) for b in blocks] == [
        (0, 32000, 0),
        (32000, 64000, 0),
        (64000, 80000, 1),
    ]
    assert len(pacer.audio(2, context=True)) == 16000


def test_block_plan_refuses_what_cannot_stream() -> None:
    with pytest.raises(UserError, match="shorter than one block"):
        plan_blocks(RATE * 10, 4.0, 2.0)
    with pytest.raises(UserError, match="no whole block"):
        plan_blocks(100, 4.0, 12.0)
    # 4 s blocks with 12 s context: three blocks per epoch (the paper's setting)
    assert [b.epoch for b in plan_blocks(RATE * 28, 4.0, 12.0)] == [0, 0, 0, 1, 1, 1, 2]


def test_settings_default_to_the_papers_stream() -> None:
    s = StreamSettings()
    assert (s.block_s, s.context_s, s.lifetime, s.spec.method) == (4.0, 12.0, "arrival", "as2d")
    assert replace(s, spec=spec_of("sd")).spec.label == "sd-k8"


def test_the_lookahead_source_streams_target_only_tokens(models, audio, reference) -> None:
    """The drafter checking its look-ahead guesses drafts each block after its own earlier
    output, as the drafter source does; the committed tokens are target-only's."""
    run = run_stream(
        models,
        audio,
        _settings("as2d", source="lookahead"),
        language="en",
        make_clock=lambda: SkipClock(FAST),
    )
    assert [b["tokens"] for b in run.blocks] == [b["tokens"] for b in reference.blocks]
    assert run.source_error is None and len(run.epochs) == 3


@pytest.mark.parametrize("source, history", [("history", False), ("drafter", True)])
def test_history_candidates_commit_target_only_tokens(
    models, audio, reference, source, history
) -> None:
    """History candidates (the block's context and its output), alone or beside the drafter."""
    s = _settings("as2d", source=source, history=history)
    run = run_stream(models, audio, s, language="en", make_clock=SkipClock)
    assert [b["tokens"] for b in run.blocks] == [b["tokens"] for b in reference.blocks]
    if source == "history":  # no producer ran
        assert run.source_mode is None and not run.epochs


def test_a_virtual_clock_skips_no_time_the_source_worker_still_uses() -> None:
    """The runner's idle wait is skipped only once the source worker's epoch has ended (in
    real time it would have had that wait), and never past the arrival it waits for."""
    import threading

    from native.stream_clock import SkipClock

    clock = SkipClock()
    done = threading.Event()
    timer = threading.Timer(0.05, done.set)
    timer.start()
    t = clock.now() + 30.0
    clock.idle_until(t, busy=lambda: not done.is_set())
    assert done.is_set()  # it waited for the epoch in flight ...
    assert t <= clock.now() < t + 1.0  # ... then skipped the rest, to the arrival
    # a worker busy past the arrival does not hold the runner beyond it
    t2 = clock.now() + 0.05
    clock.idle_until(t2, busy=lambda: True)
    assert clock.now() >= t2


def test_the_stream_command_carries_history_to_the_runner(capsys) -> None:
    """`as2d stream --history` puts history candidates beside the source in the runner's
    settings; for a method without them it is refused in one line before anything runs."""
    from as2d_cli.cli.main import main
    from as2d_cli.stream.run import settings_for

    wire = settings_for(
        "as2d",
        budget=7,
        block_s=4.0,
        context_s=12.0,
        lifetime="arrival",
        source="drafter",
        check=False,
        history=True,
    )
    assert wire["history"] is True and wire["source"] == "drafter"
    with pytest.raises(SystemExit) as e:
        main(["stream", "--method", "target-only", "--history", "--minutes", "0.1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--history" in err and err.count("\n") == 1
