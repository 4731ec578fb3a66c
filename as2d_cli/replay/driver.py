"""Replay one window under one method: the same Episode as native runs, on a virtual clock.

Serial methods (target-only, SD, ASP, w/o TD) charge every engine op at its idle profile
cost. Target-decoupled methods (As²d, w/o BC) run against the source's producer timeline
(:mod:`as2d_cli.replay.producer`): the buffer exposes each batch from its publication
time, target calls started while the producer is in service pay the concurrent ratio,
and after target EOS the producer's in-flight segment is charged (drain):
T = max(target end, end of that segment). The result carries the producer/verifier
service spans and D, V, O, H with T = D + V − O + H exactly (integer ns, D.2.7).
A profile with context terms (v2) prices each call at the window's audio length and the
cache length the call starts from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from as2d_cli.engine.accounting import decompose, merge, split_intervals
from as2d_cli.engine.clock import Op, VirtualClock
from as2d_cli.engine.episode import Episode, Limits
from as2d_cli.engine.history import HISTORY, history_buffer
from as2d_cli.engine.methods import MethodSpec
from as2d_cli.engine.reference import SequenceDrafter, SequenceTarget
from as2d_cli.errors import EngineError, FormatError
from as2d_cli.formats.profile import CostProfile, ms_to_ns
from as2d_cli.formats.trace import WindowTrace
from as2d_cli.replay.pricing import (
    Price,
    WidthTable,
    in_loop,
    in_loop_ratios,
    require_refresh,
    serial_price,
    target_only_price,
    with_context,
)
from as2d_cli.replay.producer import ProducerTimeline, build_timeline


@dataclass(slots=True)
class WindowReplay:
    """One window replayed under one configuration (times in integer ns)."""

    window: str
    dataset: str
    config: str
    tokens: int
    time_ns: int
    rounds: int
    proposed: int
    accepted: int
    eos: bool
    capped: bool
    width_histogram: dict[int, int] = field(default_factory=dict)
    source: str | None = None  # the source actually used (after the language fallback)
    target_end_ns: int = 0  # end of the last target round (before drain)
    producer_spans: list[tuple[int, int]] = field(default_factory=list)  # merged, within [0, T]
    verifier_spans: list[tuple[int, int]] = field(default_factory=list)
    D: int = 0
    V: int = 0
    O: int = 0
    H: int = 0
    committed: list[int] | None = None  # the committed tokens (detail runs only)
    draft_forwards: int = 0  # serial drafter forwards incl. catch-up (detail runs only)
    paired_forwards: int = 0  # ASP paired-branch forwards (detail runs only)
    round_records: list[Any] = field(default_factory=list)  # keep_rounds runs only

    @property
    def tps(self) -> float | None:
        """Tokens per second; None when no decode time passed (a one-token output)."""
        return self.tokens / (self.time_ns / 1e9) if self.time_ns > 0 else None

    @property
    def coverage(self) -> float:
        decoded = self.tokens - 1
        return self.accepted / decoded if decoded > 0 else 0.0

    def to_json(self, spans: bool = True) -> dict:
        d: dict[str, Any] = {
            "window": self.window,
            "dataset": self.dataset,
            "config": self.config,
            "source": self.source,
            "tokens": self.tokens,
            "time_ms": self.time_ns / 1e6,
            "time_ns": self.time_ns,
            "tps": self.tps,
            "eos": self.eos,
            "capped": self.capped,
            "rounds": self.rounds,
            "width_histogram": {str(k): v for k, v in sorted(self.width_histogram.items())},
            "proposed": self.proposed,
            "accepted": self.accepted,
            "coverage": self.coverage,
            "target_end_ns": self.target_end_ns,
            "draft_forwards": self.draft_forwards,
            "paired_forwards": self.paired_forwards,
            "accounting_ns": {
                "T": self.time_ns,
                "D": self.D,
                "V": self.V,
                "O": self.O,
                "H": self.H,
            },
        }
        if spans:
            d["producer_spans_ns"] = [list(s) for s in self.producer_spans]
            d["verifier_spans_ns"] = [list(s) for s in self.verifier_spans]
        return d


class Prepared:
    """Per-(profile, configuration) pricing, checked once before any window runs."""

    def __init__(self, profile: CostProfile, spec: MethodSpec) -> None:
        self.profile = profile
        self.spec = spec
        self.policy = spec.policy()
        self.price: Price | None = None
        self.widths: WidthTable | None = None
        self.align_ns = 0
        if spec.method == "target-only":
            self.price = target_only_price(profile)
        elif spec.serial:
            self.price = serial_price(profile, spec.max_width)
            if spec.method in ("asp", "as2d-no-td"):
                require_refresh(profile, spec.budget or 0)
        else:
            self.align_ns = ms_to_ns(profile.align_ms)
        self._tables: dict[str, WidthTable] = {}
        self.in_loop = in_loop_ratios(profile, spec.method)

    def table(self, source: str) -> WidthTable:
        """Verification costs for target calls next to ``source`` (its own ratios if any)."""
        t = self._tables.get(source)
        if t is None:
            if source == HISTORY:  # no producer runs beside the target: idle widths only
                t = WidthTable(self.profile, None, concurrent=False)
                t.require(self.spec.max_width)
            else:
                self.profile.source(source)  # refuses a source the profile has no costs for
                t = WidthTable(self.profile, source, concurrent=True)
                t.require(self.spec.max_width, concurrent=True)
            self._tables[source] = t
        return t


def decoupled_price(table: WidthTable, align_ns: int, finish: int) -> Price:
    """Target calls pay the concurrent cost when they start while the producer is in service."""
    idle, conc = table.idle, table.conc

    def price(op: Op, now: int) -> int:
        if op.kind == "verify":
            c = (conc if now < finish else idle).get(op.width)
            return c if c is not None else table.cost(op.width, now < finish)
        if op.kind == "align":
            return align_ns
        raise EngineError(f"target-decoupled replay asked to price a {op.kind!r} op")

    return price


def _episode(
    w: WindowTrace, prep: Prepared, clock: VirtualClock, *, buffer=None, keep_rounds: bool
) -> Episode:
    drafter = None
    if prep.spec.serial:
        d = w.drafter
        if d is None:
            raise FormatError(
                f"window {w.id}: no drafter continuations in the trace; {prep.spec.method} needs them — regenerate the trace with the drafter"
            )
        need = prep.spec.max_width - 1
        if d.cap < need:
            raise FormatError(
                f"window {w.id}: drafter continuations hold {d.cap} tokens but {prep.spec.label} drafts up to {need}; "
                f"lower the width/cap or regenerate the trace with a larger drafter cap"
            )
        conts, confs = d.for_engine()
        drafter = SequenceDrafter(w.reference, conts, confs, eos_id=w.eos_id)
    return Episode(
        prep.policy,
        SequenceTarget(w.reference),
        w.first_token,
        limits=Limits(w.eos_id, w.max_tokens),
        clock=clock,
        buffer=buffer,
        drafter=drafter,
        keep_rounds=keep_rounds,
    )


def _run(ep: Episode, w: WindowTrace) -> None:
    try:
        ep.run()
    except EngineError as exc:
        raise FormatError(
            f"window {w.id}: the trace's reference cannot be replayed ({exc}); its reference, EOS and max_tokens disagree — regenerate the window"
        ) from None
    if len(ep.tokens) != len(w.reference) or ep.tokens != list(w.reference):
        raise FormatError(
            f"window {w.id}: replay committed {len(ep.tokens)} tokens but the reference has {len(w.reference)} "
            f"(eos={w.eos}, max_tokens={w.max_tokens}); the window's reference and cap disagree — regenerate it"
        )


def timeline_for(w: WindowTrace, prep: Prepared, source: str) -> tuple[str, ProducerTimeline]:
    used, st = w.source_for(source)
    costs = prep.profile.source(used)
    return used, build_timeline(
        used,
        st,
        costs,
        prep.spec.batch,
        where=f"window {w.id}: ",
        context=prep.profile.context,
        audio_s=w.audio_seconds,
    )


def _ratio(table: WidthTable, finish: int):
    """A target call's concurrent/idle ratio at its start (1 once the producer finished)."""
    ratios = table.ratio

    def ratio(op: Op, now: int) -> float:
        return ratios.get(op.width, 1.0) if now < finish else 1.0

    return ratio


def replay_window(
    w: WindowTrace,
    prep: Prepared,
    *,
    detail: bool = True,
    timeline: tuple[str, ProducerTimeline] | None = None,
    keep_rounds: bool = False,
) -> WindowReplay:
    """Replay ``w`` under ``prep``'s configuration. ``detail`` keeps spans and D/V/O/H;
    ``keep_rounds`` every round's record (``round_records``: what each call saw and did)."""
    spec = prep.spec
    used: str | None = None
    tl: ProducerTimeline | None = None
    if spec.decoupled and spec.source == HISTORY:
        # The committed history alone (engine/history.py): no producer, nothing published.
        used = HISTORY
        price, ratio = decoupled_price(prep.table(HISTORY), prep.align_ns, 0), None
        buffer = history_buffer()
    elif spec.decoupled:
        assert spec.source is not None
        used, tl = timeline if timeline is not None else timeline_for(w, prep, spec.source)
        table = prep.table(used)
        price = decoupled_price(table, prep.align_ns, tl.finish)
        ratio = _ratio(table, tl.finish) if prep.profile.context is not None else None
        buffer = tl.buffer()
    else:
        assert prep.price is not None
        price, ratio = prep.price, None
        buffer = None
    ctx = prep.profile.context
    priced = price if ctx is None else with_context(price, ctx, w.audio_seconds, ratio)
    if prep.in_loop:
        priced = in_loop(priced, prep.in_loop, tl.finish if tl is not None else None)
    clock = VirtualClock(priced)
    clock.record_intervals = detail
    ep = _episode(w, prep, clock, buffer=buffer, keep_rounds=keep_rounds)
    if ctx is not None:
        tokens = ep.tokens
        clock.position = lambda: len(tokens) - 1  # the target cache length a call starts from
    _run(ep, w)
    res = ep.result
    t_end = clock.now()
    T = tl.drain_end(t_end) if tl is not None else t_end
    out = WindowReplay(
        window=w.id,
        dataset=w.dataset,
        config=spec.label,
        tokens=len(res.tokens),
        time_ns=T,
        rounds=res.n_rounds,
        proposed=res.proposed,
        accepted=res.accepted,
        eos=res.eos,
        capped=res.capped,
        width_histogram=dict(res.width_histogram),
        source=used,
        target_end_ns=t_end,
    )
    if keep_rounds:
        out.round_records = list(res.rounds)
    if detail:
        prod, ver = split_intervals(clock.intervals)
        if tl is not None:
            prod = prod + tl.spans(T)
        dec = decompose(prod, ver, T)
        out.producer_spans = merge(prod, 0, T)
        out.verifier_spans = merge(ver, 0, T)
        out.D, out.V, out.O, out.H = dec.D, dec.V, dec.O, dec.H
        out.committed = list(res.tokens)
        for iv in clock.intervals:
            if iv.op.kind == "draft":
                out.draft_forwards += iv.op.count + iv.op.catch_up
            elif iv.op.kind == "paired":
                out.paired_forwards += 1
    return out
