"""The target-decoupled producer in its own process.

In one Python process the producer thread and the target share one interpreter lock:
both models run in ONNX Runtime with the lock released, but every step's Python work
(sampling, confidences, publication, the engine's bookkeeping) waits for it, so which side
runs at full speed varied from window to window (measured: a drafter source's 106 tokens
took 17 ms next to a slowed target in one request, twice as long next to a fast one in
another). The paper's drafter and verifier run on different processors; here the source
runs in a worker process pinned to the producer cores, and only its publications cross
to the runner, each stamped with the worker's own time (``time.perf_counter_ns`` is one
system-wide monotonic clock on Linux, so both processes share the decode clock). They wait
in the pipe until the runner reads the candidate buffer: every read first takes what has
arrived (the buffer's ``pump``), on the reading thread. A receiver thread woken for every
publication needs a CPU while both are busy, the target's and the producer's, and takes it
from one of them; a publication is then in the buffer only once that thread has run. Read
at the decision points instead, it costs the target's thread one poll per read.

The worker is started once per runner (outside any decode clock) and serves one request
at a time: the audio (and the target's encoder states, for a drafter sharing the target's
encoder) is handed over before the clock starts, the source's start (its audio encoding, or
the projection of those states) and steps run inside it, and after the target's EOS the step in flight finishes (drain).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import select
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from as2d_cli.engine import CandidateBuffer, WallClock
from as2d_cli.errors import UserError

BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _worker(
    cmds: Connection,
    events: Connection,
    models_dir: str | None,
    threads: int,
    cores: Sequence[int] | None,
    prompt: dict[str, Any] | None = None,
) -> None:
    from as2d_cli.models.loader import open_seq2seq
    from as2d_cli.models.model_pair import load_pair
    from as2d_cli.models.prompting import PromptSpec
    from as2d_cli.models.sources import CtcSource, drafter_source, open_ctc
    from native.producer import pin_current_thread, source_units

    pinned = pin_current_thread(cores)
    try:
        pair = load_pair(  # the runner checked the hashes
            models_dir, check_hashes=False, prompt=PromptSpec.from_wire(prompt)
        )
        drafter = open_seq2seq(pair, "drafter", threads)
        ctc: Any = None
        ahead: Any = None  # the look-ahead decoder, opened on the first lookahead request
    except BaseException as exc:  # reported to the runner, which falls back to a thread
        events.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    events.send(("ready", pinned))
    while True:
        try:
            msg = cmds.recv()
        except (EOFError, OSError):  # the runner is gone
            return
        if msg[0] == "quit":
            return
        if msg[0] != "request":  # a stop that arrived after the source had already ended
            continue
        _, name, audio, limit, kind, batch, hidden, req_language, *more = msg
        prefix = more[0] if more else ()  # the source's own earlier output (a stream's context)
        question = more[1] if len(more) > 1 else None  # the request's own (a corpus window's)
        try:
            if name == "ctc":
                ctc = ctc or open_ctc(pair, threads=threads)
                units = source_units(CtcSource(ctc, audio))
            else:
                if name == "lookahead" and ahead is None:
                    ahead = open_seq2seq(pair, "drafter", threads, ahead=True)
                units = source_units(
                    drafter_source(
                        name,
                        ahead if name == "lookahead" else drafter,
                        audio,
                        target_vocab=pair.vocab,
                        limit=limit,
                        hidden=hidden,
                        language=req_language,
                        prefix=prefix,
                        question=question,
                    )
                )
        except BaseException as exc:
            events.send(("failed", f"{type(exc).__name__}: {exc}"))
            continue
        events.send(("armed",))
        go = cmds.recv()
        if go[0] != "go":
            continue
        _serve(units, kind, batch, int(go[1]), cmds, events)


class _PipeBuffer:
    """The worker's side of the candidate buffer: each publication goes to the runner."""

    def __init__(self, events: Connection) -> None:
        self.events = events
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def publish(self, tokens: list[int], t: int, confidences: list[float] | None) -> None:
        self.events.send(("pub", t, self.count, tokens, confidences))
        self.count += len(tokens)

    def close(self) -> None:  # the runner's receiver closes the real buffer
        pass


def _arrivals(conn: Connection) -> Any:
    """A poller of ``conn``'s incoming messages, registered once: it is asked before every
    step or decision, and ``Connection.poll`` builds a selector per call (about 20 µs)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return poller


class _StopRequested:
    """The producer's stop flag in the worker: the runner's stop message is waiting."""

    def __init__(self, cmds: Connection) -> None:
        self._poller = _arrivals(cmds)

    def is_set(self) -> bool:
        return bool(self._poller.poll(0))


def _serve(
    units: Any, kind: str, batch: int, origin: int, cmds: Connection, events: Connection
) -> None:
    """:class:`native.producer.Producer`'s own loop, run in this process on the runner's
    decode clock; it stops after the unit in flight when the runner says so."""
    from native.producer import Producer

    producer = Producer(units, _PipeBuffer(events), WallClock(origin), kind=kind, batch=batch)  # type: ignore[arg-type]
    producer.stop = _StopRequested(cmds)  # type: ignore[assignment]
    producer.run()  # in this thread: the worker process is the producer's processor
    if cmds.poll():
        cmds.recv()  # the runner's stop
    error = None if producer.error is None else f"{type(producer.error).__name__}: {producer.error}"
    events.send(("done", producer.steps, producer.finished_at, error, producer.split))


class ProducerWorker:
    """The worker process and its two one-way pipes; ``prompt`` is the pair's prompt
    settings in their wire form (:meth:`~as2d_cli.models.prompting.PromptSpec.to_wire`),
    loaded as the runner loaded them."""

    def __init__(
        self,
        models_dir: str | None,
        threads: int,
        cores: Sequence[int] | None,
        prompt: dict[str, Any] | None = None,
    ) -> None:
        ctx = mp.get_context("spawn")  # never fork a process holding ONNX Runtime threads
        cmd_r, self.cmds = ctx.Pipe(duplex=False)
        self.events, ev_w = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=_worker,
            args=(cmd_r, ev_w, models_dir, threads, list(cores or []) or None, prompt),
            name="as2d-producer",
            daemon=True,
        )
        # One BLAS thread in the worker: pinned to the producer core, a BLAS pool would spin
        # its threads on that one core (the log-mel's matrix product) and slow every step.
        saved = {k: os.environ.get(k) for k in BLAS_ENV}
        os.environ.update({k: "1" for k in BLAS_ENV})
        try:
            self.process.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        cmd_r.close()
        ev_w.close()
        if not self.events.poll(120):
            self.close()
            raise UserError("the producer process did not start within 120 s")
        try:
            msg = self.events.recv()
        except EOFError:  # the child died while starting (for example, importing the main module)
            msg = ("failed", f"exit code {self.process.exitcode}")
        if msg[0] != "ready":
            self.close()
            raise UserError(f"the producer process could not load the models: {msg[1]}")
        self.pinned = bool(msg[1])

    def alive(self) -> bool:
        return self.process.is_alive()

    def arm(
        self,
        name: str,
        audio: np.ndarray,
        limit: int,
        kind: str,
        batch: int,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        prefix: Sequence[int] = (),
        *,
        question: str | None = None,
    ) -> None:
        """Hand one request's audio (and, for a drafter sharing the target's encoder, the
        target's encoder states for it; for a stream, the source's own earlier output as
        ``prefix``, in the source model's own tokens; the request's own question) to the
        worker, before the decode clock starts."""
        self.cmds.send(
            (
                "request",
                name,
                np.ascontiguousarray(audio, dtype=np.float32),
                limit,
                kind,
                batch,
                None if hidden is None else np.ascontiguousarray(hidden, dtype=np.float32),
                language,
                [int(t) for t in prefix],
                question,
            )
        )
        msg = self.events.recv()
        if msg[0] != "armed":
            raise UserError(f"the {name} source could not start: {msg[1]}")

    def close(self) -> None:
        try:
            self.cmds.send(("quit",))
        except (OSError, ValueError):
            pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()


class _Stop:
    def __init__(self, send: Any) -> None:
        self._send = send
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._send()

    def is_set(self) -> bool:
        return self._set


def _poll_ms(timeout: float | None) -> int | None:
    """``select.poll``'s timeout: whole milliseconds, rounded up (None: wait until ready)."""
    return None if timeout is None else max(0, math.ceil(timeout * 1000))


class ProcessProducer:
    """:class:`native.producer.Producer`'s surface over the worker process."""

    def __init__(self, worker: ProducerWorker, buffer: CandidateBuffer, clock: WallClock) -> None:
        self.worker = worker
        self.buffer = buffer
        self.clock = clock
        self.steps: list[tuple[int, int, int]] = []
        self.publications: list[tuple[int, int, int]] = []
        self.finished_at: int | None = None
        self.error: str | None = None
        self.split: dict[str, int] = {}  # the worker's step time, split (models/timing.py)
        self.pinned = worker.pinned
        self.stop = _Stop(lambda: worker.cmds.send(("stop",)))
        self._lock = threading.Lock()  # one reader of the pipe at a time
        self._done = False
        self._poller = _arrivals(worker.events)  # pump's, under the lock
        # join's own: it waits outside the lock while another thread may pump, and one
        # poll object refuses a second concurrent poll() (RuntimeError).
        self._waiter = _arrivals(worker.events)
        buffer.pump = self.pump

    def start(self) -> None:
        self.worker.cmds.send(("go", self.clock.origin))

    def pump(self) -> None:
        """Take every message that has arrived, without waiting."""
        if not self._done:
            with self._lock:
                self._take()

    def _take(self) -> None:
        """Under the lock: take messages until none is waiting or the worker reports the
        request done (every ``recv`` follows a poll that found a message, so none blocks)."""
        events = self.worker.events
        try:
            while not self._done and self._poller.poll(0):
                msg = events.recv()
                if msg[0] == "pub":
                    _, t, offset, tokens, confs = msg
                    self.buffer.publish(tokens, t, confs)
                    self.publications.append((t, offset, len(tokens)))
                elif msg[0] == "done":
                    _, steps, finished, error, *more = msg
                    self.split = dict(more[0]) if more else {}
                    self.steps = [tuple(s) for s in steps]
                    self.finished_at = finished
                    self.error = error
                    self._end()
        except (EOFError, OSError) as exc:
            self.error = f"the producer process ended unexpectedly ({exc})"
            self._end()

    def _end(self) -> None:
        self._done = True
        self.buffer.close()

    def running(self) -> bool:
        """Until the worker reports the request done."""
        self.pump()
        return not self._done

    def join(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds) for the worker's end of the request, taking
        its remaining publications."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            # Wait outside the lock (a poll reads nothing), so a thread reading the buffer
            # meanwhile -- the target's, in a stream's backlog -- is never held up by it.
            if self._waiter.poll(_poll_ms(left)):
                self.pump()
