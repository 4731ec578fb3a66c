"""The resident runner's stream: every block encoded, prefilled and decoded in order on
the serial target path, while the resident source worker drafts ahead from arrived audio.

Models are loaded (and, with ``warmup``, warmed on the first block's audio) before the
stream clock starts. Block i's processing starts at ``max(its arrival, the end of block
i-1)``: a block that arrives while another is processed waits (the queue), none is
dropped. Its audio context is its epoch's audio up to its end, its text context the
tokens its epoch's earlier blocks committed (EOS excluded; the most recent half of the
decoder's positions at most), prefilled after the prompt. Each block is one engine
:class:`~as2d_cli.engine.Episode` of the chosen policy, so its committed tokens are the
target's greedy output for that audio and context whatever the candidates were.

With ``stop_file`` set, the stream ends before the first block that would start after that
file appeared (the host's monitor writes it when the device's conditions break); the blocks
done so far stand, and the source worker is stopped as at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.engine import Episode, Limits, TargetOnly, WallClock
from as2d_cli.engine.history import HISTORY, history_buffer
from as2d_cli.engine.methods import DEFAULT_SOURCE, MethodSpec
from as2d_cli.errors import UserError
from native.producer import pin_current_thread
from native.protocol import FILES_ENV
from native.stream_clock import CLOCKS, StreamClock
from native.stream_pacer import RATE, Block, Pacer, plan_blocks
from native.stream_settings import StreamSettings
from native.stream_source import SourceEpochs, SourceSettings

OnBlock = Callable[[dict[str, Any]], None]


class ContextDrafter:
    """A serial drafter (SD) whose prefix starts with the block's text context, as the
    target's does."""

    def __init__(self, inner: Any, context: Sequence[int]) -> None:
        self.inner = inner
        self.context = list(context)

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Any:
        return self.inner.draft([*self.context, *prefix], count, stop_below)

    def refresh(self, prefix: Sequence[int], reused: Sequence[int]) -> None:
        self.inner.refresh([*self.context, *prefix], reused)


@dataclass
class StreamRun:
    """What a finished (or stopped) stream hands back."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    warmup_s: float = 0.0
    end_s: float = 0.0  # stream time the last block's output completed
    drained_s: float = 0.0  # ... and the source worker stopped (resource time)
    source_mode: str | None = None
    source_error: str | None = None
    stopped_before: int | None = None  # the stop file appeared: the first block not processed


def text_context(
    blocks: Sequence[Block], outputs: Sequence[Sequence[int]], i: int, eos: int, cap: int
) -> list[int]:
    """Block i's text context: the committed tokens (EOS excluded) of the earlier blocks in
    its epoch, the most recent ``cap`` of them."""
    ctx: list[int] = []
    for j in range(i - 1, -1, -1):
        if blocks[j].epoch != blocks[i].epoch:
            break
        ctx = [t for t in outputs[j] if t != eos] + ctx
    return ctx[-cap:] if cap > 0 else []


def decode_block(
    models: Any,
    audio: np.ndarray,
    context: Sequence[int],
    s: StreamSettings,
    *,
    language: str | None,
    clock: StreamClock,
    buffer: Any = None,
) -> dict[str, Any]:
    """Encode, prefill and decode one block; stream times of each stage and the episode."""
    target = models.target
    policy = s.spec.policy()
    t_enc = clock.now()
    target.encode(audio, language)
    t_pre = clock.now()
    first = target.prefill(context)
    drafter = None
    if policy.serial:
        models.drafter.start(audio, models.shared_hidden(), language)
        drafter = ContextDrafter(models.drafter, context)
    t_dec = clock.now()
    room = target.max_length
    if room < 1:
        raise UserError(
            f"the block's text context ({len(context)} tokens) leaves no room in the decoder; "
            "use a shorter --context-s"
        )
    max_tokens = min(s.max_tokens or room, room)
    ep = Episode(
        policy,
        target,
        first,
        limits=Limits(target.eos_id, max_tokens),
        clock=WallClock(clock.origin_ns),
        buffer=buffer,
        drafter=drafter,
        keep_rounds=False,
        context=context,
    )
    ready_at_start = buffer.ready_count(ep.clock.now()) if buffer is not None else None
    while not ep.done:
        ep.step()
    t_end = clock.now()
    res = ep.result
    return {
        "start_s": t_enc,
        "encoder_s": t_pre - t_enc,
        "prefill_s": t_dec - t_pre,
        "decode_s": t_end - t_dec,
        "decoded_at_s": t_end,
        "tokens": list(res.tokens),
        "eos": res.eos,
        "capped": res.capped,
        "max_tokens": max_tokens,
        "ready_at_start": ready_at_start,
        "summary": res.summary(),
    }


def run_stream(
    models: Any,
    audio: np.ndarray,
    s: StreamSettings,
    *,
    language: str | None = None,
    target_cores: Sequence[int] | None = None,
    producer_cores: Sequence[int] | None = None,
    on_block: OnBlock | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    make_clock: Callable[[], StreamClock] | None = None,
) -> StreamRun:
    """Pace ``audio`` (16 kHz mono) through the resident models; ``on_block`` receives each
    block's record as soon as its output is complete. ``make_clock`` (default: the
    settings' clock) is called when the stream starts, after loading and warm-up."""
    blocks = plan_blocks(len(audio), s.block_s, s.context_s)
    policy = s.spec.policy()
    target = models.target
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pinned = pin_current_thread(target_cores)
    run = StreamRun()
    source: SourceEpochs | None = None
    try:
        t0 = time.perf_counter()
        source_settings = SourceSettings(
            s.spec.source or DEFAULT_SOURCE,  # read only when the method has a source
            s.spec.batch,
            target.model.max_positions,
            s.lifetime,
            s.block_s,
            language,
            producer_cores,
        )
        if s.warmup:  # sessions warmed before the stream clock starts
            _warm_target(models, audio[: blocks[0].end], language, serial=policy.serial)
        if policy.decoupled and s.spec.source != HISTORY:  # history alone: no producer
            source = SourceEpochs(models, len(blocks), source_settings)
            if s.warmup:
                source.warm_up(audio[: blocks[0].end])
        clock = (make_clock or CLOCKS[s.clock])()  # the stream starts now
        pacer = Pacer(audio, blocks, clock)
        if source is not None:
            source.bind(pacer)
            run.source_mode = source.mode
        run.warmup_s = time.perf_counter() - t0
        if on_start is not None:
            on_start(
                {
                    "blocks": len(blocks),
                    "audio_s": len(audio) / RATE,
                    "streamed_s": blocks[-1].end / RATE,
                    "warmup_s": run.warmup_s,
                    "wall_time": time.time(),
                    "source_mode": run.source_mode,
                    "pinned": bool(pinned),
                }
            )
        if source is not None:
            source.start()
        live = _Live(models, s, blocks, pacer, clock, source, language, policy.decoupled)
        _decode_blocks(live, run, on_block)
        run.end_s = clock.now()
        if source is not None:
            source.finish()
            run.epochs = [e.to_dict() for e in source.epochs]
            run.source_error = source.error
        run.drained_s = clock.now()
        return run
    finally:
        if source is not None and source.is_alive():
            source.finish()
        if pinned and before is not None:
            os.sched_setaffinity(0, before)


@dataclass
class _Live:
    """A stream once its clock runs: the models and settings, the blocks and their pacer,
    the clock, the source worker (None: none runs), the language, and whether the method
    is target-decoupled."""

    models: Any
    settings: StreamSettings
    blocks: list[Block]
    pacer: Pacer
    clock: StreamClock
    source: SourceEpochs | None
    language: str | None
    decoupled: bool


def _decode_blocks(live: _Live, run: StreamRun, on_block: OnBlock | None) -> None:
    """Every block in order on the serial target path, until the stop file appears."""
    models, blocks, pacer, clock, source = (
        live.models,
        live.blocks,
        live.pacer,
        live.clock,
        live.source,
    )
    eos = models.target.eos_id
    cap = models.target.model.max_positions // 2
    outputs: list[list[int]] = []
    stop = stop_path(live.settings.stop_file)
    for i, block in enumerate(blocks):
        if stop is not None and stop.exists():
            run.stopped_before = i
            break
        clock.idle_until(block.arrival_s, None if source is None else source.busy)
        if stop is not None and stop.exists():  # it may have come while waiting
            run.stopped_before = i
            break
        queued = pacer.arrived_count() - i  # arrived and not yet processed, this one included
        context = text_context(blocks, outputs, i, eos, cap)
        out = decode_block(
            models,
            pacer.audio(i, context=True),
            context,
            live.settings,
            language=live.language,
            clock=clock,
            buffer=history_buffer()
            if source is None and live.decoupled
            else (None if source is None else source.buffers[i]),
        )
        if source is not None:
            source.consumed[i].set()
        outputs.append(out["tokens"])
        finish = clock.now()  # the block's committed output is complete
        rec = {
            "block": i,
            "epoch": block.epoch,
            "audio_start_s": block.start_s,
            "audio_end_s": block.end_s,
            "context_audio_s": (block.end - block.context_start) / RATE,
            "context_tokens": len(context),
            "arrival_s": block.arrival_s,
            "queued": queued,
            "finish_s": finish,
            "text": _text(models, out["tokens"], eos),
            **out,
        }
        run.blocks.append(rec)
        if on_block is not None:
            on_block(rec)


def stop_path(name: str | None) -> Path | None:
    """The stop file's path: a relative name is in the runner's files folder (AS2D_FILES,
    the batch's run directory on a phone; else the working directory)."""
    if not name:
        return None
    p = Path(name)
    return p if p.is_absolute() else Path(os.environ.get(FILES_ENV, ".")) / p


def _warm_target(models: Any, audio: np.ndarray, language: str | None, *, serial: bool) -> None:
    """One short unmeasured target-only pass (and a serial drafter's) over ``audio``."""
    target = models.target
    target.encode(audio, language)
    ep = Episode(
        TargetOnly(),
        target,
        target.prefill(),
        limits=Limits(target.eos_id, min(16, target.max_length)),
        clock=WallClock(),
        keep_rounds=False,
    )
    ep.run()
    if serial:
        models.drafter.start(audio, models.shared_hidden(), language)
        models.drafter.draft([ep.tokens[0]], 4)


def check_blocks(
    models: Any,
    audio: np.ndarray,
    s: StreamSettings,
    blocks: Sequence[dict[str, Any]],
    *,
    language: str | None = None,
) -> list[dict[str, Any]]:
    """Target-only on every streamed block with the context the stream used (unpaced):
    whether each block's committed tokens equal it, and where they first differ."""
    from dataclasses import replace

    ref_s = replace(s, spec=MethodSpec("target-only"), max_tokens=None)
    plan = plan_blocks(len(audio), s.block_s, s.context_s)
    eos = models.target.eos_id
    cap = models.target.model.max_positions // 2
    outputs = [b["tokens"] for b in blocks]
    checks = []
    clock = CLOCKS["virtual"]()
    for b in blocks:
        i = b["block"]
        ctx = text_context(plan, outputs, i, eos, cap)
        blk = plan[i]
        ref = decode_block(
            models,
            audio[blk.context_start : blk.end],
            ctx,
            replace(ref_s, max_tokens=b["max_tokens"]),
            language=language,
            clock=clock,
        )["tokens"]
        got = b["tokens"]
        first = next((k for k, (x, y) in enumerate(zip(got, ref)) if x != y), None)
        if first is None and len(got) != len(ref):
            first = min(len(got), len(ref))
        checks.append(
            {
                "block": i,
                "equal": first is None,
                "first_divergence": first,
                "reference_tokens": len(ref),
            }
        )
    return checks


def _text(models: Any, tokens: Sequence[int], eos: int) -> str:
    vocab = models.pair.vocab
    body = [t for t in tokens if t != eos]
    try:
        return str(vocab.decode(body))
    except Exception:  # noqa: BLE001 - text is a convenience; the tokens are the record
        return ""
