"""The target-decoupled producer's own timeline (paper C.1, A.3; docs/replay.md).

An autoregressive source runs its startup, then one step per token of its own sequence (or,
when its trace lists ``steps``, one step per entry, emitting that many tokens), publishing
once ``batch`` tokens are pending and its final partial batch at its EOS or cap. A
chunked source runs its startup, then each chunk's service followed by one publication of
the whole chunk. Publication is producer service too, and a batch becomes usable at the
end of its publication. The producer never waits for the target (A.1).

Why one timeline per (window, source) serves every budget: the engine takes a target
round at every boundary (K1 when nothing is usable), so the target is in service
continuously from 0 to its EOS. Every producer segment that starts before target EOS
therefore runs at its concurrent cost (startup and publication included), and segments are back to back — the timeline up
to target EOS does not depend on the budget or on target outcomes. At target EOS the
producer is told to stop; the segment already started finishes and is charged (drain).
The full-window protocol (A.1) makes the whole audio available before the decode clock
starts, so a chunk's audio end time never delays its service.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from as2d_cli.engine.buffer import CandidateBuffer
from as2d_cli.errors import FormatError
from as2d_cli.formats.profile import ContextCosts, SourceCosts, ms_to_ns
from as2d_cli.formats.trace import AUTOREGRESSIVE, CHUNKED, SourceTrace

STARTUP = "startup"
STEP = "step"
CHUNK = "chunk"
PUBLISH = "publish"


@dataclass(frozen=True, slots=True)
class Publication:
    at: int  # ns: end of the publication service
    tokens: tuple[int, ...]
    confidences: tuple[float, ...] | None


class ProducerTimeline:
    """Back-to-back producer segments from time 0 and the publications they make.

    ``starts``/``ends``/``kinds`` describe segment i; ``finish`` is the end of the last
    segment (the producer is in service on [0, finish)).
    """

    __slots__ = (
        "source",
        "starts",
        "ends",
        "kinds",
        "publications",
        "finish",
        "n_tokens",
        "_buffer",
    )

    def __init__(
        self,
        source: str,
        segments: list[tuple[str, int]],
        publications: list[tuple[int, tuple[int, ...], tuple[float, ...] | None]],
    ) -> None:
        self.source = source
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.kinds: list[str] = []
        t = 0
        for kind, cost in segments:
            if cost <= 0:
                continue  # zero-length service occupies no time (and is not an interval)
            self.starts.append(t)
            self.kinds.append(kind)
            t += cost
            self.ends.append(t)
        self.finish = t
        self.publications = [Publication(at, toks, conf) for at, toks, conf in publications]
        self.n_tokens = sum(len(p.tokens) for p in self.publications)
        self._buffer: CandidateBuffer | None = None

    def busy(self, t: int) -> bool:
        """Is the producer in service at time ``t``?"""
        return t < self.finish

    def drain_end(self, t_end: int) -> int:
        """End of the segment in flight at target EOS ``t_end`` (started before it and not
        yet finished), or ``t_end`` when none is: the episode's end T."""
        i = bisect.bisect_left(self.starts, t_end) - 1  # last segment starting before t_end
        if i >= 0 and self.ends[i] > t_end:
            return self.ends[i]
        return t_end

    def spans(self, until: int) -> list[tuple[int, int]]:
        """Producer service spans clipped to [0, until] (work after the drain is not run)."""
        out = []
        for s, e in zip(self.starts, self.ends):
            if s >= until:
                break
            out.append((s, min(e, until)))
        return out

    def buffer(self) -> CandidateBuffer:
        """A candidate buffer holding every publication with its time. The engine reads only
        ``ready_count(boundary)`` tokens, so a batch published after a boundary is never
        offered at it (causality), whether it was appended earlier or later. The engine
        never writes to the buffer, so one buffer serves every budget of a sweep."""
        if self._buffer is not None:
            return self._buffer
        buf = CandidateBuffer(self.source, f"{self.source}-producer")
        for p in self.publications:
            buf.publish(p.tokens, p.at, p.confidences)
        buf.close()
        self._buffer = buf
        return buf


def _step_costs(
    name: str,
    trace: SourceTrace,
    costs: SourceCosts,
    where: str,
    context: ContextCosts | None,
    audio_s: float | None,
) -> tuple[tuple[int, ...], list[int]]:
    """An autoregressive source's steps (tokens each) and each step's concurrent cost; with
    ``context`` and ``audio_s``, step i pays the drafter's context terms at its cache length
    (the tokens before it)."""
    step = ms_to_ns(costs.step_ms(True))
    if step <= 0:
        raise FormatError(
            f"{where}source {name!r} has a non-positive step cost; fix the profile or recalibrate"
        )
    n = len(trace.tokens)
    steps = trace.steps if trace.steps is not None else (1,) * n
    if any(k < 1 for k in steps) or sum(steps) != n:
        raise FormatError(
            f"{where}source {name!r} has steps summing to {sum(steps)} for {n} tokens; "
            "regenerate the trace"
        )
    if context is None or audio_s is None:
        return steps, [step] * len(steps)
    # the concurrent ratio scales the whole step, its context terms included
    d0 = context.drafter_ms(0, audio_s) * 1e6 * costs.concurrent_ratio
    da = context.drafter_ms_per_token * 1e6 * costs.concurrent_ratio
    out: list[int] = []
    done = 0
    for k in steps:
        out.append(max(0, step + int(round(d0 + da * done))))
        done += k
    return steps, out


def build_timeline(
    name: str,
    trace: SourceTrace,
    costs: SourceCosts,
    batch: int,
    *,
    where: str = "",
    context: ContextCosts | None = None,
    audio_s: float | None = None,
) -> ProducerTimeline:
    """The producer's timeline with concurrent costs (the target is in service throughout).

    With ``context`` and ``audio_s``, the startup follows the window's length and step i of
    an autoregressive source pays the drafter's context terms at its own cache length i."""
    if batch < 1:
        raise FormatError(f"{where}publication batch must be >= 1, got {batch}")
    if costs.kind != trace.kind:
        raise FormatError(
            f"{where}source {name!r} is {trace.kind} in the trace but {costs.kind} in the profile; "
            f"use a profile calibrated for this source"
        )
    # Startup and publication run beside the target like the steps do, so they pay the
    # producer's concurrent ratio too (the profile's figures are idle ones).
    ratio = costs.concurrent_ratio
    ref_audio_s = context.ref_audio_s if context is not None else None
    startup = ms_to_ns(costs.startup_for(audio_s, ref_audio_s) * ratio)  # flat when unknown
    publish = ms_to_ns(costs.publish_ms * ratio)
    segments: list[tuple[str, int]] = [(STARTUP, startup)]
    pubs: list[tuple[int, tuple[int, ...], tuple[float, ...] | None]] = []
    t = startup
    if trace.kind == AUTOREGRESSIVE:
        toks = trace.tokens
        conf = trace.confidences
        n = len(toks)
        steps, step_ns = _step_costs(name, trace, costs, where, context, audio_s)
        # One segment per step (a step may emit several tokens; its cache length is the
        # tokens before it); publication once ``batch`` tokens are pending, and at the end.
        lo = done = 0
        for k, c in zip(steps, step_ns, strict=True):
            segments.append((STEP, c))
            t += c
            done += k
            if done - lo >= batch or done == n:
                segments.append((PUBLISH, publish))
                t += publish
                pubs.append(
                    (t, tuple(toks[lo:done]), None if conf is None else tuple(conf[lo:done]))
                )
                lo = done
    elif trace.kind == CHUNKED:
        chunk = ms_to_ns(costs.chunk_ms(True))
        if chunk <= 0:
            raise FormatError(
                f"{where}source {name!r} has a non-positive chunk cost; fix the profile or recalibrate"
            )
        for ch in trace.chunks or ():
            segments.append((CHUNK, chunk))
            segments.append((PUBLISH, publish))
            t += chunk + publish
            pubs.append((t, tuple(ch.tokens), ch.confidences))
    else:
        raise FormatError(
            f"{where}source {name!r} has unknown kind {trace.kind!r}; expected autoregressive or chunked"
        )
    return ProducerTimeline(name, segments, pubs)
