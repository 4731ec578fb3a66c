"""The resident source worker's driver: one source epoch per block, in block order.

The worker (the producer process of :mod:`native.producer_process`, or a producer thread
where no process can start) stays loaded for the whole stream. Epoch i starts when block
i has arrived and the worker is free; it reads only that block's audio (never the target's
text or states: the source encodes the block itself) and publishes into block i's
candidate buffer on the engine's clock, so the target's episode for block i uses exactly
the candidates published by each of its decision times. An epoch ends at its source's EOS
or cap, or when its lifetime ends:

* ``arrival`` -- a deadline one block interval after the block's arrival (when the next
  block arrives);
* ``consumption`` -- when the target has finished the block (it no longer needs
  candidates), so no epoch expires early while blocks wait in a backlog.

The step in flight finishes after a stop (drain). An epoch whose lifetime ended before it
could start (its block already consumed, or its deadline passed) is recorded as skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from as2d_cli.engine import CandidateBuffer, WallClock
from as2d_cli.errors import UserError
from native.stream_pacer import Pacer

LIFETIMES = ("arrival", "consumption")
# How often the driver looks whether an epoch's source has ended (a consumed block or a
# halt wakes it at once, a deadline is waited for exactly). Each look is a wake-up that,
# with the target's and the producer's cores both busy, takes a CPU from one of them; an
# epoch's end only frees the worker for the next block, due a block interval later.
LIVE_POLL_S = 0.05


@dataclass
class Epoch:
    block: int
    start_s: float | None = None  # stream time the worker began it (None: skipped)
    end_s: float | None = None
    ended: str = "skipped"  # finished (EOS/cap), stopped, deadline, consumed, halted, skipped
    published: int = 0  # tokens
    steps: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SourceSettings:
    name: str  # "drafter" | "lookahead" | "ctc"
    batch: int
    limit: int  # tokens per epoch
    lifetime: str
    block_s: float
    language: str | None = None
    cores: Sequence[int] | None = None


class SourceEpochs(threading.Thread):
    """Drives the resident source over the stream's blocks."""

    def __init__(self, models: Any, n_blocks: int, s: SourceSettings) -> None:
        super().__init__(name="as2d-stream-source", daemon=True)
        if s.lifetime not in LIFETIMES:
            raise UserError(
                f"unknown source lifetime {s.lifetime!r}; use one of {', '.join(LIFETIMES)}"
            )
        self.models = models
        self.pacer: Pacer | None = None
        self.s = s
        n = n_blocks
        self.buffers = [CandidateBuffer(s.name, f"epoch-{i}") for i in range(n)]
        self.consumed = [threading.Event() for _ in range(n)]
        self.halt = (
            threading.Event()
        )  # the stream is over (or aborted): stop after the step in flight
        self.epochs: list[Epoch] = [Epoch(i) for i in range(n)]
        self.mode: str | None = None  # "process" | "thread"
        self.error: str | None = None
        self._running_epoch = threading.Event()  # set while an epoch's producer runs
        self.worker = models.producer_worker(s.cores)
        self.mode = "process" if self.worker is not None else "thread"

    def bind(self, pacer: Pacer) -> None:
        """The stream's pacer (its clock starts the stream); before :meth:`start`."""
        self.pacer = pacer

    def warm_up(self, audio: Any) -> None:
        """One unmeasured epoch over ``audio`` before the stream (sessions warmed)."""
        buf = CandidateBuffer(self.s.name, "warm-up")
        producer = self._producer(audio, buf)
        producer.start()
        producer.join()

    def history(self, i: int) -> list[int]:
        """The source's own output for the earlier blocks of block i's context epoch (EOS
        excluded, the most recent half of the drafter's positions at most), in the source
        model's own tokens: what it drafts after, as the target continues after its
        committed text. The buffers hold the target's tokens; a source with its own
        tokenizer (the text conversion) gets their text re-encoded with it."""
        assert self.pacer is not None
        blocks = self.pacer.blocks
        out: list[int] = []
        pair = self.models.pair
        eos = pair.vocab.eot
        for j in range(i - 1, -1, -1):
            if blocks[j].epoch != blocks[i].epoch:
                break
            out = [t for t in self.buffers[j].tokens if t != eos] + out
        if out and pair.converts("drafter"):
            out = self.models.decoder_for(self.s.name).vocab.encode(
                pair.vocab.decode(out), start=True
            )
        cap = self.s.limit // 2
        return out[-cap:] if cap > 0 else []

    def _producer(self, audio: Any, buffer: CandidateBuffer, prefix: Sequence[int] = ()) -> Any:
        from native.producer import Producer, source_units

        kind = "chunked" if self.s.name == "ctc" else "autoregressive"
        # The engine's clock for every block (before the stream: a clock of its own).
        clock = WallClock(None if self.pacer is None else self.pacer.clock.origin_ns)
        if self.worker is not None:
            from native.producer_process import ProcessProducer

            # hidden=None: the source encodes the block itself (it never reads target states)
            self.worker.arm(
                self.s.name, audio, self.s.limit, kind, self.s.batch, None, self.s.language, prefix
            )
            return ProcessProducer(self.worker, buffer, clock)
        from as2d_cli.models.sources import CtcSource, drafter_source, open_ctc

        if self.s.name == "ctc":
            source: Any = CtcSource(open_ctc(self.models.pair, self.models.threads), audio)
        else:
            source = drafter_source(
                self.s.name,
                self.models.decoder_for(self.s.name),
                audio,
                target_vocab=self.models.pair.vocab,
                limit=self.s.limit,
                language=self.s.language,
                prefix=prefix,
            )
        return Producer(
            source_units(source), buffer, clock, kind=kind, batch=self.s.batch, cores=self.s.cores
        )

    def run(self) -> None:
        assert self.pacer is not None, "bind(pacer) before start()"
        clock = self.pacer.clock
        try:
            for i, block in enumerate(self.pacer.blocks):
                if not self.pacer.wait(i, self.halt):
                    return
                ep = self.epochs[i]
                deadline = block.arrival_s + self.s.block_s
                if self.consumed[i].is_set() or (
                    self.s.lifetime == "arrival" and clock.now() >= deadline
                ):
                    self.buffers[i].close()
                    continue  # skipped: its lifetime ended before the worker was free
                ep.start_s = clock.now()
                self._running_epoch.set()
                # A drafter reads the block's audio context and continues its own history;
                # a chunked source (CTC) reads the block's own audio.
                ctc = self.s.name == "ctc"
                producer = self._producer(
                    self.pacer.audio(i, context=not ctc),
                    self.buffers[i],
                    () if ctc else self.history(i),
                )
                producer.start()
                ep.ended = self._live(producer, i, deadline)
                producer.stop.set()
                producer.join()
                ep.end_s = clock.now()
                self._running_epoch.clear()
                ep.published = len(self.buffers[i])
                ep.steps = len(producer.steps)
                ep.error = None if producer.error is None else str(producer.error)
                if ep.ended == "finished" and producer.finished_at is None:
                    ep.ended = "stopped"
                if self.halt.is_set() and ep.ended != "finished":
                    return
        except Exception as exc:  # noqa: BLE001 - the stream goes on target-only; recorded
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._running_epoch.clear()
            for b in self.buffers:
                b.close()

    def _live(self, producer: Any, i: int, deadline: float) -> str:
        """Wait until the epoch's source ends or its lifetime does; how it ended."""
        assert self.pacer is not None
        clock = self.pacer.clock
        while self._running(producer):
            if self.halt.is_set():
                return "halted"
            if self.s.lifetime == "consumption" and self.consumed[i].is_set():
                return "consumed"
            wait = LIVE_POLL_S
            if self.s.lifetime == "arrival":
                left = deadline - clock.now()
                if left <= 0:
                    return "deadline"
                wait = min(wait, left)
            self.consumed[i].wait(wait)
        return "finished"

    def busy(self) -> bool:
        """Whether an epoch's producer runs now (a virtual clock skips no time it uses)."""
        return self._running_epoch.is_set()

    @staticmethod
    def _running(producer: Any) -> bool:
        alive = getattr(producer, "running", None)
        return alive() if alive is not None else producer.is_alive()

    def finish(self) -> None:
        """The stream is over: stop the epoch in flight and wait for it (the drain)."""
        self.halt.set()
        for e in self.consumed:
            e.set()
        self.join()
