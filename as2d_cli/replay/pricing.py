"""Integer-nanosecond prices for engine ops, from a device cost profile (paper D.2).

The profile holds milliseconds; the engine's virtual clock advances by integer
nanoseconds so T = D + V − O + H holds exactly. Every price is converted once per
(profile, method, source) into lookup tables, so the hot path is a dict lookup.

Concurrency (D.2.1; docs/replay.md): a target call costs idle × the profile's concurrent/idle
ratio for its width while the producer is in service. Whether it is, is decided at the
call's start (the event-time rule of a discrete-event simulation); the producer's own
segments likewise use their concurrent cost when the target is in service at their start.

Context (profile v2, :func:`with_context`): when the profile has context terms, each call
also pays them for the window's audio length and the cache length it starts from.

In-loop ratios (profile v2 ``in_loop``, :func:`in_loop`): a call inside a method's decode
loop costs its priced figure times the ratio its calibration measured for that method
family and op kind (the sweeps time calls hot; a loop's calls are not).
"""

from __future__ import annotations

from collections.abc import Callable

from as2d_cli.engine.clock import Op
from as2d_cli.errors import FormatError
from as2d_cli.formats.profile import ContextCosts, CostProfile, ms_to_ns

Price = Callable[[Op, int], int]


def _ns(ms: float, what: str, profile: CostProfile) -> int:
    ns = ms_to_ns(ms)
    if ns < 0:
        raise FormatError(
            f"{profile.path}: {what} costs {ms} ms, a negative cost; fix the profile or recalibrate"
        )
    return ns


class WidthTable:
    """Verification cost by physical width K, idle and concurrent, in ns.

    Widths the profile lacks are refused when first asked for (naming the width), never
    charged zero. ``limit`` is checked up front so a method that could ask for a width the
    profile lacks fails before any window runs."""

    __slots__ = ("idle", "conc", "ratio", "profile", "source")

    def __init__(self, profile: CostProfile, source: str | None, concurrent: bool) -> None:
        self.profile = profile
        self.source = source
        self.idle: dict[int, int] = {}
        self.conc: dict[int, int] = {}
        for k in profile.widths:
            self.idle[k] = _ns(profile.verify_ms(k), f"verification K{k}", profile)
            if concurrent:
                try:
                    self.conc[k] = _ns(
                        profile.verify_ms(k, True, source), f"concurrent verification K{k}", profile
                    )
                except FormatError:
                    pass  # no ratio for this width: refused only if a concurrent K-call happens
        self.ratio = {
            k: self.conc[k] / self.idle[k] for k in self.conc if self.idle.get(k)
        }  # concurrent/idle

    def require(self, max_width: int, concurrent: bool = False) -> None:
        """Refuse now if any width 1..max_width is missing (a method could ask for it)."""
        missing = [
            k
            for k in range(1, max_width + 1)
            if k not in self.idle or (concurrent and k not in self.conc)
        ]
        if not missing:
            return
        top = 0
        while top + 1 in self.idle and (not concurrent or top + 1 in self.conc):
            top += 1
        what = (
            "concurrent verification (idle cost or concurrent/idle ratio)"
            if concurrent
            else "verification"
        )
        span = f"K{missing[0]}" if len(missing) == 1 else f"K{missing[0]}–K{missing[-1]}"
        raise FormatError(
            f"{self.profile.path}: this configuration can ask for physical width K{max_width}, but {what} "
            f"{span} was not measured (measured up to K{top}); lower the budget/width to at most "
            f"{max(top - 1, 0)} proposals (K{top}) or recalibrate with `as2d calibrate` to cover K{max_width}"
        )

    def cost(self, k: int, concurrent: bool) -> int:
        table = self.conc if concurrent else self.idle
        c = table.get(k)
        if c is None:
            self.profile.verify_ms(k, concurrent, self.source)  # raises naming the width
            raise FormatError(f"{self.profile.path}: no cost for width K{k}")  # pragma: no cover
        return c


def target_only_price(profile: CostProfile) -> Price:
    step = _ns(profile.target_step_ms, "target_step_ms", profile)

    def price(op: Op, now: int) -> int:
        if op.kind == "target_step":
            return step
        raise FormatError(f"target-only asked to price a {op.kind!r} op")  # engine contract

    return price


def serial_price(profile: CostProfile, max_width: int) -> Price:
    """Standard SD and SpecASR-ASP: everything idle (nothing runs concurrently)."""
    widths = WidthTable(profile, None, concurrent=False)
    widths.require(max_width)
    profile.draft_ms(0)  # refuses a profile without drafter costs, naming the file
    d = profile.drafter
    assert d is not None
    step = _ns(d.step_ms, "drafter step_ms", profile)
    catch = _ns(d.catch_up_ms, "drafter catch_up_ms", profile)
    row = _ns(d.row_ms, "drafter row_ms", profile)
    paired = _ns(d.paired_ms, "drafter paired_ms", profile)
    loop = _ns(profile.loop_ms, "loop_ms", profile)
    refresh: dict[int, int] = {}
    idle = widths.idle

    def price(op: Op, now: int) -> int:
        kind = op.kind
        if kind == "verify":
            c = idle.get(op.width)
            return c if c is not None else widths.cost(op.width, False)
        if kind == "draft":
            return op.count * step + op.catch_up * catch + op.rows * row
        if kind == "loop":
            return loop
        if kind == "paired":
            return paired + op.rows * row
        if kind == "refresh":
            c = refresh.get(op.width)
            if c is None:
                c = refresh[op.width] = _ns(
                    profile.refresh_ms(op.width), f"refresh width {op.width}", profile
                )
            return c
        raise FormatError(f"serial method asked to price a {op.kind!r} op")  # engine contract

    return price


def require_refresh(profile: CostProfile, cap: int) -> None:
    """ASP may refresh any reused suffix up to its cap: all those widths must be measured."""
    for w in range(1, cap + 1):
        profile.refresh_ms(w)


def with_context(
    base: Price, ctx: ContextCosts, audio_s: float, ratio: Callable[[Op, int], float] | None = None
) -> Callable[[Op, int, int], int]:
    """``base`` plus the profile's context terms for one window of ``audio_s`` seconds.

    Called as price(op, now, cache) with the target's cache length before the call (the
    virtual clock's ``position``). Target calls add the target terms (scaled by the
    call's concurrent/idle ratio when ``ratio`` says so); ``draft`` adds the drafter
    terms for each forward at its own cache length; a paired forward and a batched
    refresh add them once. A call never costs less than nothing."""
    # Per width, filled as widths occur: the extra at cache 0 and the slope per cached token (ns).
    t0: dict[int, float] = {}
    ta: dict[int, float] = {}
    d0 = ctx.drafter_ms(0, audio_s) * 1e6
    da = ctx.drafter_ms_per_token * 1e6

    def price(op: Op, now: int, cache: int) -> int:
        c = base(op, now)
        kind = op.kind
        if kind == "verify" or kind == "target_step":
            k = op.width if op.width > 0 else 1
            if k not in t0:
                t0[k] = ctx.target_ms(0, audio_s, k) * 1e6
                ta[k] = ctx.target_token_slope(k) * 1e6
            extra = t0[k] + ta[k] * cache
            if ratio is not None:
                extra *= ratio(op, now)
        elif kind == "draft":
            n = op.count + op.catch_up
            extra = n * (d0 + da * cache) + da * n * (n - 1) / 2
        elif kind == "paired" or kind == "refresh":
            extra = d0 + da * cache
        else:
            return c
        c += int(round(extra))
        return c if c > 0 else 0

    return price


FAMILY = {"sd": "sd", "asp": "asp", "as2d-no-td": "asp", "as2d": "as2d", "as2d-no-bc": "as2d"}


def in_loop_ratios(profile: CostProfile, method: str) -> dict[str, float]:
    """The op kinds whose in-loop ratio for ``method``'s family differs from 1."""
    family = FAMILY.get(method)
    if family is None or not profile.in_loop:
        return {}
    return {k: r for k, r in (profile.in_loop.get(family) or {}).items() if r != 1.0}


def in_loop(
    price: Callable[..., int], ratios: dict[str, float], finish: int | None = None
) -> Callable[..., int]:
    """``price`` with each op scaled by its kind's in-loop ratio. With ``finish`` (a
    target-decoupled method), the ratio applies only once the producer has finished: calls
    before that pay the source's concurrent ratios instead."""
    if not ratios:
        return price
    start = -1 if finish is None else finish  # serial methods: every call is in the loop

    def scaled(op: Op, now: int, *cache: int) -> int:
        c = price(op, now, *cache)
        r = ratios.get(op.kind) if now >= start else None
        return c if r is None else int(round(c * r))

    return scaled
