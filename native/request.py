"""One native request: prefill, then the engine under the wall clock with real models.

The target runs in the calling thread (pinned to its cores), a target-decoupled source in
a producer thread (pinned to its own). Loading and the target's (and a serial drafter's)
audio/prompt prefill happen before the decode clock starts; a target-decoupled source's
audio encoding is producer work inside the clock (paper A.1). After the target's EOS the
producer's step in flight finishes and is charged (drain).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from as2d_cli.engine import CandidateBuffer, Episode, Limits, Policy, WallClock
from as2d_cli.engine.accounting import decompose, split_intervals
from as2d_cli.engine.history import HISTORY, history_buffer
from as2d_cli.errors import UserError
from as2d_cli.models.timing import booked_wall_ns, mark, split_since
from native.producer import Producer, external_units, pin_current_thread, source_units
from native.producer_process import ProcessProducer

if TYPE_CHECKING:
    from as2d_cli.models.prompting import PromptSpec


@dataclass
class Models:
    """The loaded model pair: target, prefix-conditioned drafter, source models."""

    pair: Any
    target: Any
    drafter: Any
    threads: int = 1
    load_ms: float = 0.0
    _ctc: Any = None
    _ahead: Any = None
    _worker: Any = None
    _worker_failed: str | None = None

    def source(
        self,
        name: str,
        audio: np.ndarray,
        limit: int,
        language: str | None = None,
        question: str | None = None,
    ) -> Any:
        """A fresh per-request target-decoupled source over ``audio`` (the target must have
        started on the same audio: a drafter sharing its encoder reads its states); a
        drafter with its own tokenizer publishes the target's tokens through the text
        conversion."""
        from as2d_cli.models.sources import CtcSource, drafter_source, open_ctc

        if name == "ctc":
            if self._ctc is None:
                self._ctc = open_ctc(self.pair, threads=self.threads)
            return CtcSource(self._ctc, audio)
        return drafter_source(
            name,
            self.decoder_for(name),
            audio,
            target_vocab=self.pair.vocab,
            limit=limit,
            hidden=self.shared_hidden(),
            language=language,
            question=question,
        )

    def decoder_for(self, name: str) -> Any:
        """The drafter model autoregressive source ``name`` runs: for ``lookahead`` the
        drafter opened with its look-ahead decoder (on first use), else the drafter's."""
        if name != "lookahead":
            return self.drafter.model
        if self._ahead is None:
            from as2d_cli.models.loader import open_seq2seq

            self._ahead = open_seq2seq(self.pair, "drafter", self.threads, ahead=True)
        return self._ahead

    @property
    def drafter_reads_target_encoder(self) -> bool:
        return self.drafter.model.shares_encoder_of(self.target.model)

    def shared_hidden(self) -> np.ndarray | None:
        """The target's encoder states for the current request when the drafter shares the
        target's encoder (computed in the target's prefill, before the decode clock), else None."""
        return self.target.hidden if self.drafter_reads_target_encoder else None

    def producer_worker(self, cores: Sequence[int] | None) -> Any:
        """The producer process (started on first use; None when ``AS2D_PRODUCER=thread``
        or when it cannot start — the producer then runs as a thread, recorded in the
        result's ``producer_mode``)."""
        if os.environ.get("AS2D_PRODUCER", "process") == "thread" or self._worker_failed:
            return None
        if (
            self._worker is not None and not self._worker.alive()
        ):  # it died with a request: start afresh
            self._worker.close()
            self._worker = None
        if self._worker is None:
            from native.producer_process import ProducerWorker

            try:
                self._worker = ProducerWorker(
                    str(self.pair.directory), self.threads, cores, self.pair.prompt.to_wire()
                )
            except (UserError, OSError) as exc:
                self._worker_failed = str(exc)
                return None
        return self._worker

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def ctc_eligible(self, language: str) -> bool:
        """True when the pair has a CTC source and it reads ``language`` (paper D.4.3)."""
        from as2d_cli.models.sources import open_ctc

        if not self.pair.has("ctc"):
            return False
        if self._ctc is None:
            self._ctc = open_ctc(self.pair, threads=self.threads)
        return self._ctc.eligible(language)


def load_models(
    directory: str | None = None,
    threads: int = 1,
    *,
    prompt: PromptSpec | None = None,
) -> Models:
    """Load a model pair (default: the bundled one; a relative folder is found from the
    working directory, where a phone's launcher starts this process), its files checked
    against their hashes, and open it (:func:`open_models`); ``prompt`` holds the request
    settings (task, language, question, instruction text: docs/models.md)."""
    from as2d_cli.models.model_pair import load_pair

    t0 = time.perf_counter()
    models = open_models(load_pair(directory, prompt=prompt), threads)
    models.load_ms = (time.perf_counter() - t0) * 1e3
    return models


def open_models(pair: Any, threads: int = 1) -> Models:
    """The loaded ``pair`` (a ModelPair) opened: its target and prefix-conditioned drafter,
    which drafts through the text conversion when its tokenizer is not the target's (the
    sources open when first asked for)."""
    from as2d_cli.models.drafter import open_drafter
    from as2d_cli.models.target import OrtTarget

    t0 = time.perf_counter()
    models = Models(pair, OrtTarget(pair, threads=threads), open_drafter(pair, threads), threads)
    models.load_ms = (time.perf_counter() - t0) * 1e3
    return models


class RecordingDrafter:
    """Keeps every prefix-conditioned draft (position, tokens, confidences) for replay."""

    def __init__(self, drafter: Any) -> None:
        self.inner = drafter
        self.calls: list[dict[str, Any]] = []

    def draft(self, prefix: Sequence[int], count: int, stop_below: float | None = None) -> Any:
        d = self.inner.draft(prefix, count, stop_below)
        self.calls.append(
            {
                "position": len(prefix) - 1,
                "count": count,
                "tokens": list(d.tokens),
                "confidences": None
                if d.confidences is None
                else [round(c, 6) for c in d.confidences],
            }
        )
        return d

    def refresh(self, prefix: Sequence[int], reused: Sequence[int]) -> None:
        self.inner.refresh(prefix, reused)


class MarginTarget:
    """Records the top-2 logit margin behind every committed decision (Appendix F.6)."""

    def __init__(self, target: Any) -> None:
        self.inner = target
        self.last: list[float] = []

    @property
    def length(self) -> int:
        return self.inner.length

    def verify(self, tokens: Sequence[int]) -> list[int]:
        out = self.inner.verify(tokens)
        m = self.inner.last_margins
        self.last = [] if m is None else [float(x) for x in m]
        return out

    def rollback(self, length: int) -> None:
        self.inner.rollback(length)


@dataclass
class _Source:
    """A decoupled method's candidate source for one request: the buffer it publishes
    into, its producer (thread or worker process), and the decode clock they share."""

    clock: WallClock
    name: str | None = None
    buffer: CandidateBuffer | None = None
    producer: Any = None  # Producer | ProcessProducer
    mode: str | None = None  # "thread" | "process"


def _start_source(
    models: Models,
    s: dict[str, Any],
    audio: np.ndarray,
    language: str,
    policy: Policy,
    max_tokens: int,
    producer_cores: Sequence[int] | None,
    question: str | None = None,
) -> _Source:
    """Start the request's source (decoupled methods only) on the decode clock."""
    src = _Source(WallClock())
    spec = s["spec"]
    if not policy.decoupled:
        return src
    name = spec.source
    if name == "ctc" and not models.ctc_eligible(language):
        name = "drafter"  # language-ineligible: fall back (paper D.4.3)
    if name == HISTORY:  # the committed history alone (engine/history.py): no producer
        src.name, src.buffer = name, history_buffer()
        return src
    src.name, src.buffer = name, CandidateBuffer(name, "producer-0")
    if name == "external":
        units, schedule = external_units([(b["t_ms"], b["tokens"]) for b in s["candidates"]])
        while schedule and schedule[0] <= 0:  # available at the request: published at time 0
            src.buffer.publish([t for t, _ in units.pop(0)], 0)
            schedule.pop(0)
        src.producer = Producer(
            units, src.buffer, src.clock, kind="external", cores=producer_cores, schedule=schedule
        )
        src.mode = "thread"  # no computation: its batches only wait for their times
    else:
        kind = "chunked" if name == "ctc" else "autoregressive"
        worker = models.producer_worker(producer_cores)
        if worker is not None:  # the source in its own process (no shared interpreter lock)
            worker.arm(
                name,
                audio,
                max_tokens + 8,
                kind,
                spec.batch,
                models.shared_hidden(),
                language,
                question=question,
            )
            src.clock = WallClock()  # the decode clock starts after the hand-over
            src.buffer = CandidateBuffer(name, "producer-0")
            src.producer = ProcessProducer(worker, src.buffer, src.clock)
            src.mode = "process"
        else:
            units_of = source_units(models.source(name, audio, max_tokens + 8, language, question))
            src.producer = Producer(
                units_of, src.buffer, src.clock, kind=kind, batch=spec.batch, cores=producer_cores
            )
            src.mode = "thread"
    src.producer.start()
    return src


def _drained(src: _Source, target_end: int) -> tuple[int, Any, list[tuple[int, int]]]:
    """Episode time T (the producer step in flight at the target's end is charged: drain),
    the D/V/O/H decomposition and the producer's spans."""
    T = target_end
    prod_spans: list[tuple[int, int]] = []
    if src.producer is not None:
        prod_spans = [(a, b) for a, b, _ in src.producer.steps]
        for a, b in prod_spans:
            if a < target_end < b:
                T = max(T, b)
    serial_prod, ver = split_intervals(src.clock.intervals)
    return T, decompose(prod_spans + serial_prod, ver, T), prod_spans


def run_request(
    models: Models,
    audio: np.ndarray,
    s: dict[str, Any],
    *,
    language: str = "en",
    question: str | None = None,
    target_cores: Sequence[int] | None = None,
    producer_cores: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Decode one request natively; returns tokens, rounds, timings, D/V/O/H and events.

    ``language`` and ``question`` are the request's own (a corpus window's); the pair's
    prompt settings take precedence where they fix them (a forced language, --question)."""
    policy = s["spec"].policy()
    target = models.target
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pinned = pin_current_thread(target_cores)
    try:
        t0 = time.perf_counter_ns()
        first = target.start(audio, language, question)
        first_margin = float(target.last_margins[-1]) if target.last_margins is not None else None
        drafter = None
        if policy.serial:
            models.drafter.start(audio, models.shared_hidden(), language, question)
            drafter = RecordingDrafter(models.drafter)
        prefill_ns = time.perf_counter_ns() - t0
        cap = target.max_length
        max_tokens = min(s["max_tokens"] or cap, cap)
        src = _start_source(
            models, s, audio, language, policy, max_tokens, producer_cores, question
        )
        mt = MarginTarget(target)
        at = mark()  # the target thread's time from here to its EOS, split (models/timing.py)
        drafter_ort0 = booked_wall_ns(models.drafter.model) if policy.serial else 0
        ep = Episode(
            policy,
            mt,
            first,
            limits=Limits(target.eos_id, max_tokens),
            clock=src.clock,
            buffer=src.buffer,
            drafter=drafter,
        )
        margins: list[float | None] = [first_margin]
        try:
            while not ep.done:
                rec = ep.step()
                margins.extend(mt.last[: rec.committed])
        finally:
            target_end = src.clock.now()
            target_split = split_since(at)
            if policy.serial:  # the serial drafter's calls ran on this thread: apart
                target_split["drafter_ort_ns"] = booked_wall_ns(models.drafter.model) - drafter_ort0
            if src.producer is not None:
                src.producer.stop.set()
                src.producer.join()
        if src.producer is not None and src.producer.error is not None:
            raise UserError(f"the {src.name} source failed: {src.producer.error}")
        _, dec, _ = _drained(src, target_end)
        out = _result(
            models, s, policy, language, question, ep.result, src, max_tokens, prefill_ns, dec
        )
        out["margins"] = margins
        out["pinned"] = bool(pinned)
        out["time_split_ns"] = {
            "target": target_split,
            "source": None if src.producer is None else dict(getattr(src.producer, "split", {})),
        }
        if drafter is not None:
            out["drafts"] = drafter.calls
        if s.get("events", True):
            out["rounds"] = [_round(r) for r in ep.result.rounds]
            out["events"] = _events(src.clock, src.producer)
        return out
    finally:
        if pinned and before is not None:
            os.sched_setaffinity(0, before)


def _result(
    models: Models,
    s: dict[str, Any],
    policy: Policy,
    language: str,
    question: str | None,
    res: Any,
    src: _Source,
    max_tokens: int,
    prefill_ns: int,
    dec: Any,
) -> dict[str, Any]:
    """The request's result record (docs/runner-protocol.md, the ``result`` event); ``dec``:
    the episode's D/V/O/H decomposition, its time ``T`` included."""
    n = len(res.tokens)
    T = dec.T
    producer = src.producer
    pair = models.pair
    out: dict[str, Any] = {
        "id": s.get("id"),
        "pair": pair.name,
        "model_type": pair.model_type(),
        "task": pair.task or pair.default_task(),
        "language": pair.language or language,
        # The question the prompt asked: the pair's --question, else the request's own
        # (a corpus window's, for --task answer); None for any other task.
        "question": pair.prompt.for_window(question).question,
        "prompt_sha256": pair.prompt_hash(question),
        # the settings in MethodSpec's wire form, with the source that ran (after fallback)
        **s["spec"].to_wire(),
        "policy": policy.name,
        "source": src.name,
        "tokens": res.tokens,
        "n_tokens": n,
        "eos": res.eos,
        "capped": res.capped,
        "max_tokens": max_tokens,
        "prefill_ms": prefill_ns / 1e6,
        "time_ms": T / 1e6,
        "tps": n / (T / 1e9) if T > 0 else None,
        "accounting_ms": dec.as_ms(),
        "accounting_ns": {"T": dec.T, "D": dec.D, "V": dec.V, "O": dec.O, "H": dec.H},
        "summary": res.summary(),
        "producer_pinned": bool(producer.pinned) if producer is not None else None,
        "producer_mode": src.mode,
        "producer_finished_ms": (producer.finished_at / 1e6)
        if producer is not None and producer.finished_at
        else None,
    }
    if src.buffer is not None:
        out["source_tokens"] = list(src.buffer.tokens)
        out["source_confidences"] = [
            None if c is None else round(c, 6) for c in src.buffer.confidences
        ]
        pubs = producer.publications if producer is not None else []
        out["publications_ms"] = [[t / 1e6, off, cnt] for t, off, cnt in pubs]
        # tokens per producer step (its start and a final publication emit none)
        steps = producer.steps if producer is not None else []
        out["source_steps"] = [n for _, _, n in steps if n > 0]
    return out


def _round(r: Any) -> dict[str, Any]:
    return {
        "i": r.index,
        "kind": r.kind,
        "width": r.width,
        "ready": r.ready,
        "offered": r.offered,
        "accepted": r.accepted,
        "root": r.root,
        "new_root": r.new_root,
        "corrected": r.corrected,
        "committed": r.committed,
        "align": r.align_action,
        "align_offset": r.align_offset,
        "cursor": r.cursor,
        "drafted": r.drafted,
        "catch_up": r.catch_up,
        "recycled": r.recycled,
        "from_history": r.from_history,
        "start_ns": r.start,
        "end_ns": r.end,
    }


def _events(clock: WallClock, producer: Producer | None) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    for iv in clock.intervals:
        ev.append(
            {
                "t_ns": iv.start,
                "end_ns": iv.end,
                "stage": iv.stage,
                "op": iv.op.kind,
                "width": iv.op.width,
                "count": iv.op.count,
                "catch_up": iv.op.catch_up,
                "rows": iv.op.rows,
            }
        )
    if producer is not None:
        for a, b, n in producer.steps:
            ev.append(
                {"t_ns": a, "end_ns": b, "stage": "producer", "op": "source_step", "tokens": n}
            )
        for t, off, n in producer.publications:
            ev.append({"t_ns": t, "stage": "producer", "op": "publish", "offset": off, "count": n})
        if producer.finished_at is not None:
            ev.append({"t_ns": producer.finished_at, "stage": "producer", "op": "producer_done"})
    ev.sort(key=lambda e: (e["t_ns"], e.get("end_ns", e["t_ns"])))
    return ev
