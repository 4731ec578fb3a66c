"""Calibration probes run inside the runner (paper B.2, D.2): raw timing samples only.

Each probe yields sample dicts ``{"figure", "ms", ...}``; the host keeps every sample,
fits the profile and never trusts a figure it did not measure. Probes:

* ``verify`` — K-width verification sweeps at prefix offsets, one warm-up and ``reps``
  measured calls per (offset, K), inputs being the target's own greedy continuation (so
  every call is a real, fully accepted check); optionally with the drafter source running
  as a producer on its own core (concurrent costs), whose steps are sampled too.
* ``target_step`` — scalar target-only steps along a greedy decode.
* ``source`` — a target-decoupled source alone: startup (audio encoding), per-step or
  per-chunk service, publication.
* ``drafter`` — the prefix-conditioned drafter: a step, the catch-up (the extra width of
  feeding a fully accepted draft's last token with the bonus token), the paired forward
  after a correction (the corrected token's forward), batched KV refresh by width, a
  confidence row.
* ``loop`` — serial SD rounds: the round's wall time minus drafting and verification.
* ``episodes`` — whole native requests of each method (the runner's own decode path), every
  charged op's interval with its width, counts and the cache length it started from, the
  source's steps, and each episode's unaccounted time: the host fits what a call costs
  inside each method's loop (cold caches after drafting, a producer on the other core)
  relative to the hot sweeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from as2d_cli.engine import CandidateBuffer, Episode, Limits, StandardSD, TargetOnly, WallClock
from as2d_cli.engine.methods import DEFAULT_SD_K
from native.producer import pin_current_thread
from native.protocol import MODEL_SOURCES, ProtocolError

MAX_CALL = 16


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


def greedy_reference(
    target: Any,
    audio: np.ndarray,
    length: int,
    language: str | None = None,
    *,
    question: str | None = None,
) -> tuple[list[int], bool]:
    """The target's greedy tokens (first included), extended past EOS by repetition so a
    sweep can reach deep offsets; the flag says whether it was extended."""
    from as2d_cli.models.target import greedy_decode

    ref = greedy_decode(target, audio, length, language, question)
    extended = False
    if len(ref) < length:
        body = ref[:-1] if ref[-1] == target.eos_id and len(ref) > 1 else ref
        while len(ref) < length:
            ref = ref[:-1] + body if ref[-1] == target.eos_id else ref + body
        ref = [t for t in ref if t != target.eos_id][:length]
        extended = True
    return ref, extended


def _drafter_tokens(drafter: Any, ref: Sequence[int], length: int) -> list[int]:
    """A converting drafter's (:class:`~as2d_cli.models.conversion.ConvertingDrafter`)
    own tokens for the target's ``ref``: its text re-encoded, repeated to ``length``."""
    body = [t for t in ref if t != drafter.dst.eot]
    own = drafter.src.encode(drafter.dst.decode(body), start=True) or [drafter.src.eot]
    return (own * (length // len(own) + 1))[:length]


def _place(target: Any, ref: Sequence[int], offset: int) -> None:
    """Make the target state hold exactly ``ref[:offset]``."""
    target.rollback(0)
    for i in range(0, offset, MAX_CALL):
        target.verify(list(ref[i : min(offset, i + MAX_CALL)]))


class _BackgroundProducer:
    """The drafter source running continuously on its own core (restarted when it ends)."""

    def __init__(
        self,
        models: Any,
        audio: np.ndarray,
        cores: Sequence[int] | None,
        language: str | None = None,
        *,
        question: str | None = None,
    ) -> None:
        self.models, self.audio, self.cores, self.language = models, audio, cores, language
        self.question = question
        self.stop = threading.Event()
        self.steps: list[float] = []
        self.busy = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        worker = self.models.producer_worker(self.cores)
        if worker is not None:  # as native requests run it: in its own process
            return self._run_process(worker)
        pin_current_thread(self.cores)
        while not self.stop.is_set():
            src = self.models.source("drafter", self.audio, 10_000, self.language, self.question)
            src.start()
            self.busy.set()
            while not self.stop.is_set():
                t0 = time.perf_counter_ns()
                unit = src.step()
                if unit is None:
                    break
                self.steps.append(_ms(t0))

    def _run_process(self, worker: Any) -> None:
        from native.producer_process import ProcessProducer

        while not self.stop.is_set():
            worker.arm(
                "drafter",
                self.audio,
                10_000,
                "autoregressive",
                8,
                self.models.shared_hidden(),
                self.language,
                question=self.question,
            )
            p = ProcessProducer(worker, CandidateBuffer("drafter"), WallClock())
            p.start()
            self.busy.set()
            while not self.stop.is_set() and p.running():
                self.stop.wait(0.01)  # the source works in the worker; this thread only waits
            p.stop.set()
            p.join()
            self.steps += [(b - a) / 1e6 for a, b, n in p.steps if n > 0]

    def __enter__(self) -> _BackgroundProducer:
        self.thread.start()
        self.busy.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def probe_verify(
    runner: Any,
    cmd: dict,
    audio: np.ndarray,
    language: str | None = None,
    *,
    question: str | None = None,
) -> Iterator[dict]:
    target = runner.models.target
    widths = [int(k) for k in cmd.get("widths", range(1, 17))]
    offsets = [int(o) for o in cmd.get("offsets", (0, 64, 128))]
    warmup, reps = int(cmd.get("warmup", 1)), int(cmd.get("reps", 5))
    if not widths or min(widths) < 1 or max(widths) > MAX_CALL:
        raise ProtocolError(f"widths must lie in 1..{MAX_CALL}")
    need = max(offsets) + max(widths) + 1
    if need > target.max_length:
        raise ProtocolError(
            f"offset {max(offsets)} + width {max(widths)} exceeds the target's {target.max_length} positions"
        )
    ref, extended = greedy_reference(target, audio, need, language, question=question)
    concurrent = bool(cmd.get("producer", False))
    bg = (
        _BackgroundProducer(
            runner.models, audio, runner.producer_cores, language, question=question
        )
        if concurrent
        else None
    )
    if bg is not None:
        bg.__enter__()
    try:
        for offset in offsets:
            _place(target, ref, offset)
            for k in widths:
                inputs = list(ref[offset : offset + k])
                for rep in range(warmup + reps):
                    t0 = time.perf_counter_ns()
                    out = target.verify(inputs)
                    ms = _ms(t0)
                    ok = extended or list(out[:-1]) == list(ref[offset + 1 : offset + k])
                    target.rollback(offset)
                    if rep >= warmup:
                        yield {
                            "figure": f"verify.K{k}",
                            "width": k,
                            "offset": offset,
                            "rep": rep - warmup,
                            "ms": ms,
                            "concurrent": concurrent,
                            "checked": not extended,
                            "top1_ok": bool(ok),
                        }
    finally:
        if bg is not None:
            bg.__exit__()
            for i, ms in enumerate(bg.steps):
                yield {"figure": "sources.drafter.step_concurrent", "ms": ms, "rep": i}


def probe_target_step(
    runner: Any,
    cmd: dict,
    audio: np.ndarray,
    language: str | None = None,
    *,
    question: str | None = None,
) -> Iterator[dict]:
    """Target-only rounds as the decode clock charges them: the engine's scalar step
    (the target call plus its commit/rollback bookkeeping), along a whole greedy decode so
    long contexts are sampled too; a new decode starts at EOS."""
    target = runner.models.target
    reps = int(cmd.get("reps", 64))
    i = 0
    while i < reps:
        first = target.start(audio, language, question)
        clock = WallClock()
        ep = Episode(
            TargetOnly(),
            target,
            first,
            limits=Limits(target.eos_id, target.max_length),
            clock=clock,
        )
        while not ep.done and i < reps:
            rec = ep.step()
            yield {
                "figure": "target_step",
                "ms": (rec.end - rec.start) / 1e6,
                "rep": i,
                "position": len(ep.tokens) - 2,
            }
            i += 1
        if ep.done and len(ep.tokens) <= 1:
            break


def probe_source(
    runner: Any, cmd: dict, audio: np.ndarray, language: str, *, question: str | None = None
) -> Iterator[dict]:
    name = cmd.get("source", "drafter")
    if name not in MODEL_SOURCES:
        raise ProtocolError(f"source must be one of {', '.join(MODEL_SOURCES)}")
    if name == "ctc" and not runner.models.ctc_eligible(language):
        raise ProtocolError(
            f"the ctc source does not serve language {language!r}; calibrate it on an English window"
        )
    if name != "ctc" and runner.models.drafter_reads_target_encoder:
        # As in a request: the target's prefill (outside any clock) encodes the audio whose
        # states a drafter sharing the target's encoder reads; its startup is the projection.
        runner.models.target.start(audio, language, question)
    src = runner.models.source(name, audio, int(cmd.get("limit", 10_000)), language, question)
    figure = "chunk" if name == "ctc" else "step"
    buf = CandidateBuffer(name)
    t0 = time.perf_counter_ns()
    src.start()
    yield {"figure": f"sources.{name}.startup", "ms": _ms(t0), "rep": 0}
    i = n = 0
    while True:
        t0 = time.perf_counter_ns()
        unit = src.step()
        if unit is None:
            break
        yield {
            "figure": f"sources.{name}.{figure}",
            "ms": _ms(t0),
            "rep": i,
            "tokens": len(unit),
            "position": n,  # the source's tokens before this step: its cache length
        }
        n += len(unit)
        t0 = time.perf_counter_ns()
        buf.publish([t for t, _ in unit], i, None)
        yield {"figure": f"sources.{name}.publish", "ms": _ms(t0), "rep": i}
        i += 1


def probe_drafter(
    runner: Any,
    cmd: dict,
    audio: np.ndarray,
    language: str | None = None,
    *,
    question: str | None = None,
) -> Iterator[dict]:
    from as2d_cli.models.session import softmax_max

    target, drafter = runner.models.target, runner.models.drafter
    reps = int(cmd.get("reps", 5))
    widths = [int(k) for k in cmd.get("widths", range(1, 17))]
    ref, _ = greedy_reference(target, audio, 48, language, question=question)
    drafter.start(audio, None, language, question)
    if runner.models.pair.converts("drafter"):  # its own tokenizer: probe it in its tokens
        ref = _drafter_tokens(drafter, ref, 48)
        drafter = drafter.inner
    model, cross = drafter.model, drafter._cross
    base = [*cross.prompt, *ref[:16]]
    for rep in range(reps + 1):
        _, cache = model.decode(base, model.empty_cache(), cross)
        t0 = time.perf_counter_ns()
        logits, _ = model.decode([ref[16]], cache, cross)
        step = _ms(t0)
        # Catch-up: this drafter feeds a fully accepted draft's last token together with the
        # bonus token in one call, so the catch-up is the extra width of a 2-token call.
        t0 = time.perf_counter_ns()
        model.decode([ref[16], ref[17]], cache, cross)
        catch = max(0.0, _ms(t0) - step)
        # Paired branch: the old branch's next token is known from the rejected draft, so
        # the pair costs one forward of the corrected token after the truncated cache.
        t0 = time.perf_counter_ns()
        model.decode([ref[16]], cache, cross)
        paired = _ms(t0)
        row = logits[-1:]
        t0 = time.perf_counter_ns()
        softmax_max(row)
        conf = _ms(t0)
        if rep:
            yield {"figure": "drafter.step", "ms": step, "rep": rep - 1}
            yield {"figure": "drafter.catch_up", "ms": catch, "rep": rep - 1}
            yield {"figure": "drafter.paired", "ms": paired, "rep": rep - 1}
            yield {"figure": "drafter.row", "ms": conf, "rep": rep - 1}
        for w in widths:
            t0 = time.perf_counter_ns()
            model.decode(list(ref[16 : 16 + w]), cache, cross)
            if rep:
                yield {"figure": f"drafter.refresh.K{w}", "width": w, "ms": _ms(t0), "rep": rep - 1}


def probe_loop(
    runner: Any,
    cmd: dict,
    audio: np.ndarray,
    language: str | None = None,
    *,
    question: str | None = None,
) -> Iterator[dict]:
    """Serial SD rounds: each round's wall time with its drafter forwards and width; the
    host subtracts the fitted drafting and verification costs (what remains is the loop
    residual the replay charges per serial round)."""
    target, drafter = runner.models.target, runner.models.drafter
    reps = int(cmd.get("reps", 2))
    k = int(cmd.get("k", 8))
    for rep in range(reps):
        first = target.start(audio, language, question)
        drafter.start(audio, None, language, question)
        clock = WallClock()
        ep = Episode(
            StandardSD(k),
            target,
            first,
            limits=Limits(target.eos_id, int(cmd.get("max_tokens", 96))),
            clock=clock,
            drafter=drafter,
        )
        while not ep.done:
            cache = len(ep.tokens) - 1
            rec = ep.step()
            yield {
                "figure": "loop_round",
                "ms": (rec.end - rec.start) / 1e6,
                "rep": rep,
                "round": rec.index,
                "width": rec.width,
                "forwards": rec.drafted + rec.catch_up,
                "drafted": rec.drafted,
                "catch_up": rec.catch_up,
                "position": cache,
            }


EPISODE_METHODS = (
    {"method": "target-only"},
    {"method": "sd", "k": DEFAULT_SD_K},
    {"method": "asp", "budget": 15},  # the cap
    {"method": "as2d", "source": "drafter", "budget": 4},
    {"method": "as2d", "source": "lookahead", "budget": 4},  # a pair with a look-ahead decoder
    {"method": "as2d", "source": "ctc", "budget": 4},
)


def episode_tag(spec: dict) -> str:
    m = spec["method"]
    return f"{m}:{spec.get('source', 'drafter')}" if m == "as2d" else m


def episode_samples(tag: str, res: dict, rep: int) -> Iterator[dict]:
    """One native request's events as calibration samples (figures ``loop.<tag>.<op>``)."""
    rounds = res["rounds"]
    starts, pos = [], 0
    for r in rounds:  # the target's cache length at each round's start
        starts.append((r["start_ns"], r["end_ns"], pos))
        pos += r["committed"]
    fin = res.get("producer_finished_ms")
    finished = fin * 1e6 if fin is not None else float("inf")
    ops = [e for e in res["events"] if "end_ns" in e and e["op"] != "source_step"]
    target_end = max((e["end_ns"] for e in ops if e["stage"] == "verifier"), default=0)
    j = 0
    for e in ops:
        while j + 1 < len(starts) and starts[j + 1][0] <= e["t_ns"]:
            j += 1
        yield {
            "figure": f"loop.{tag}.{e['op']}",
            "ms": (e["end_ns"] - e["t_ns"]) / 1e6,
            "rep": rep,
            "width": e.get("width", 0),
            "count": e.get("count", 0),
            "catch_up": e.get("catch_up", 0),
            "rows": e.get("rows", 0),
            "position": starts[j][2] if starts else 0,
            "concurrent": e["t_ns"] < finished,
        }
    steps = [e for e in res["events"] if e["op"] == "source_step"]
    before = 0  # the source's tokens before each step: its cache length
    for i, e in enumerate(steps):
        yield {
            "figure": f"loop.{tag}.source_step",
            "ms": (e["end_ns"] - e["t_ns"]) / 1e6,
            "rep": rep,
            "index": i,
            "position": before,
            "tokens": e.get("tokens", 0),
            "concurrent": e["t_ns"] < target_end,
            "end_ms": e["end_ns"] / 1e6,
        }  # on the decode clock: what the first publication waits for
        before += int(e.get("tokens", 0))
    # The target's time no op accounts for (the decode loop between and around calls).
    busy = sum(e["end_ns"] - e["t_ns"] for e in ops if e["t_ns"] < target_end)
    yield {
        "figure": f"loop.{tag}.episode",
        "ms": target_end / 1e6,
        "rep": rep,
        "rounds": len(rounds),
        "unaccounted_ms": (target_end - busy) / 1e6,
        "tokens": res["n_tokens"],
    }


def probe_episodes(
    runner: Any, cmd: dict, audio: np.ndarray, language: str, *, question: str | None = None
) -> Iterator[dict]:
    """Every method on ``window`` and on each of ``windows``, repetitions outermost so a
    drift of the machine's speed spreads over all windows instead of tracking their
    lengths; each sample names its window."""
    from native.protocol import decode_settings
    from native.request import run_request

    specs_all = cmd.get("methods") or list(EPISODE_METHODS)
    windows = [cmd.get("window"), *[w for w in cmd.get("windows", []) if w != cmd.get("window")]]
    loaded = [
        (w, audio, language, question) if i == 0 else (w, *runner._audio({"window": w}))
        for i, w in enumerate(windows)
    ]
    reps = int(cmd.get("reps", 2))
    n = 0
    for rep in range(-1, reps):  # rep −1: an unrecorded warm-up of every method on every window
        for w, au, lang, q in loaded:
            specs = [
                s
                for s in specs_all
                if (s.get("source") != "ctc" or runner.models.ctc_eligible(lang))
                and (s.get("source") != "lookahead" or runner.models.pair.has_ahead())
            ]
            k = n % len(specs)  # a rotating order, as native evaluation runs them
            n += 1
            for spec in specs[k:] + specs[:k]:
                s = decode_settings({**spec, "window": w, "events": True})
                res = run_request(
                    runner.models,
                    au,
                    s,
                    language=lang,
                    question=q,
                    target_cores=runner.target_cores,
                    producer_cores=runner.producer_cores,
                )
                if rep >= 0:
                    for sample in episode_samples(episode_tag(spec), res, rep):
                        sample["window"] = w
                        yield sample


def run_calibration_op(
    runner: Any, cmd: dict, audio: np.ndarray, language: str, question: str | None = None
) -> Iterator[dict]:
    """The probe ``cmd["what"]`` over one window's audio, language and own question."""
    what = cmd.get("what")
    probes = {
        "verify": probe_verify,
        "target_step": probe_target_step,
        "source": probe_source,
        "drafter": probe_drafter,
        "loop": probe_loop,
        "episodes": probe_episodes,
    }
    probe = probes.get(what) if isinstance(what, str) else None
    if probe is not None:
        return probe(runner, cmd, audio, language, question=question)
    raise ProtocolError(
        f"unknown calibration probe {what!r}; use verify, target_step, source, drafter, loop or episodes"
    )
