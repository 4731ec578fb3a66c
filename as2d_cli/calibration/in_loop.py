"""In-loop costs: what a call costs inside each method's native decode loop.

The sweeps time each call hot, repeated after a rollback. Inside a decode loop the same
call costs more or less: the target's weights are colder after eight drafter forwards,
the producer on the other core competes for memory and the interpreter, and the loop
itself has bookkeeping between calls. The calibration's ``episodes`` steps run whole
native requests of every method on development windows of several lengths and record
every charged op (``loop.<method>.<op>`` samples). From them this module fits:

* the target-only step by cache and audio length (least squares over every step), plus
  the loop's unaccounted time per round;
* per method family, the ratio of measured in-loop time to the sweep-priced time for each
  op kind (a ratio of sums, so pooled time is right) — ``costs.in_loop``;
* per source, the target's verification while the producer runs, and the producer's own
  steps and startup while the target runs;
* the serial loop residual and As²d's queue/alignment work per round.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from as2d_cli.calibration.regression import MIN_AUDIO_SPAN_S
from as2d_cli.calibration.regression import lstsq as _lstsq
from as2d_cli.errors import FormatError
from as2d_cli.formats.profile import IN_LOOP_KINDS, CostProfile, SourceCosts

MIN_SAMPLES = 5  # fewer in-loop samples of an op than this: keep the sweep's figure


def _tag(figure: str) -> tuple[str, str]:
    _, tag, op = figure.split(".", 2)
    return tag, op


def _by_tag(samples: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Mapping[str, Any]]]]:
    out: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s["figure"].startswith("loop.") and s["figure"].count(".") >= 2:
            tag, op = _tag(s["figure"])
            out[tag][op].append(s)
    return out


class _Pricer:
    """The replay's price for a sampled op under ``profile`` (sweep figures + context)."""

    def __init__(self, profile: CostProfile) -> None:
        self.p = profile
        self.ctx = profile.context

    def _audio(self, s: Mapping[str, Any]) -> float:
        return float(s.get("audio_s", self.ctx.ref_audio_s if self.ctx else 0.0))

    def target(self, s: Mapping[str, Any], width: int) -> float:
        ms = self.p.verify_ms(width)
        if self.ctx is not None:
            ms += self.ctx.target_ms(float(s.get("position", 0)), self._audio(s), width)
        return ms

    def drafter_extra(self, s: Mapping[str, Any], n: int) -> float:
        if self.ctx is None or n <= 0:
            return 0.0
        pos = float(s.get("position", 0))
        return (
            n * self.ctx.drafter_ms(pos, self._audio(s))
            + self.ctx.drafter_ms_per_token * n * (n - 1) / 2
        )

    def op(self, s: Mapping[str, Any], op: str) -> float | None:
        p = self.p
        try:
            if op == "verify":
                return self.target(s, int(s["width"]))
            if op == "draft":
                n = int(s.get("count", 0)) + int(s.get("catch_up", 0))
                return p.draft_ms(
                    int(s.get("count", 0)), int(s.get("catch_up", 0)), int(s.get("rows", 0))
                ) + self.drafter_extra(s, n)
            if op == "paired":
                return p.paired_ms(int(s.get("rows", 0))) + self.drafter_extra(s, 1)
            if op == "refresh":
                return p.refresh_ms(int(s["width"])) + self.drafter_extra(s, 1)
        except FormatError:  # a width or figure the sweeps lack: this sample cannot be priced
            return None
        return None


MIN_REPS = 3  # repetitions per window needed to take a median over them


def _reps_per_window(samples: Any) -> bool:
    """Whether every sample names its window and repetition and each window has at least
    MIN_REPS repetitions (a median over them is then meaningful)."""
    reps: dict[Any, set] = defaultdict(set)
    for s in samples:
        reps[s.get("window")].add(s.get("rep"))
    return all(w is not None and None not in r and len(r) >= MIN_REPS for w, r in reps.items())


def typical_sums(rows: Sequence[tuple[Mapping[str, Any], float, float]]) -> tuple[float, float]:
    """Σ observed and Σ predicted over ``(sample, observed, predicted)`` rows, as a typical
    repetition sees them: per window, the median over its repetitions of each repetition's
    sums (a whole run preempted by the host moves a mean, not a median — evaluation compares
    the replay with the median native run, D.3). Plain sums when the samples do not name
    their window and repetition, or a window has fewer than MIN_REPS repetitions."""
    if not _reps_per_window(s for s, _, _ in rows):
        return sum(o for _, o, _ in rows), sum(p for *_, p in rows)
    per: dict[Any, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for s, o, p in rows:
        acc = per[s["window"]][s["rep"]]
        acc[0] += o
        acc[1] += p
    return (
        sum(median(a[0] for a in reps.values()) for reps in per.values()),
        sum(median(a[1] for a in reps.values()) for reps in per.values()),
    )


def _ratio(samples: Sequence[Mapping[str, Any]], pricer: _Pricer, op: str) -> float | None:
    rows = []
    for s in samples:
        p = pricer.op(s, op)
        if p is None or p <= 0:
            continue
        rows.append((s, float(s["ms"]), p))
    obs, pred = typical_sums(rows)
    return obs / pred if len(rows) >= MIN_SAMPLES and pred > 0 else None


def _target_step(profile: CostProfile, ops: Mapping[str, list[Mapping[str, Any]]]) -> CostProfile:
    """Target-only: step = a + b·(cache − ref) + c·(audio − ref) over every in-loop step,
    plus the loop's unaccounted time per round; the K1 slopes replace the sweeps' (the
    per-width increments stay)."""
    steps = ops.get("target_step", [])
    ctx = profile.context
    if len(steps) < MIN_SAMPLES:
        return profile
    eps = ops.get("episode", [])
    rounds = sum(int(e["rounds"]) for e in eps)
    extra = sum(float(e["unaccounted_ms"]) for e in eps) / rounds if rounds else 0.0
    if ctx is None:
        a = sum(float(s["ms"]) for s in steps) / len(steps)
        return dataclasses.replace(profile, target_step_ms=a + extra)
    auds = [float(s.get("audio_s", ctx.ref_audio_s)) for s in steps]
    two = max(auds) - min(auds) >= MIN_AUDIO_SPAN_S

    def row(s: Mapping[str, Any], a: float) -> list[float]:
        return [1.0, float(s.get("position", 0)) - ctx.ref_tokens] + (
            [a - ctx.ref_audio_s] if two else []
        )

    # Slopes from the steps without preemptions (over 3× their window's median), then the
    # intercept moved so the fit's total equals a typical repetition's measured total
    # (preemptions inside a run happen natively too; the replay spreads them over all steps).
    med: dict[float, float] = {}
    for a in set(auds):
        med[a] = median(float(s["ms"]) for s, x in zip(steps, auds) if x == a)
    keep = [(s, a) for s, a in zip(steps, auds) if float(s["ms"]) <= 3 * med[a]]
    coef = _lstsq(*_typical_steps(keep, row))
    fitted = [sum(c * x for c, x in zip(coef, row(s, a))) for s, a in zip(steps, auds)]
    obs, pred = typical_sums([(s, float(s["ms"]), f) for s, f in zip(steps, fitted)])
    n_typical, _ = typical_sums([(s, 1.0, 1.0) for s in steps])
    coef[0] += (obs - pred) / n_typical
    a, b = coef[0], max(0.0, coef[1])
    c = max(0.0, coef[2]) if two else ctx.target_ms_per_audio_s
    # Keep every width's slopes ≥ 0 with the new K1 slopes.
    top = max(profile.widths) - 1
    tw = max(ctx.target_ms_per_token_per_width, -b / top) if top else 0.0
    aw = max(ctx.target_ms_per_audio_s_per_width, -c / top) if top else 0.0
    new_ctx = dataclasses.replace(
        ctx,
        target_ms_per_token=b,
        target_ms_per_audio_s=c,
        target_ms_per_token_per_width=tw,
        target_ms_per_audio_s_per_width=aw,
    )
    return dataclasses.replace(profile, target_step_ms=a + extra, context=new_ctx)


def _typical_steps(
    keep: Sequence[tuple[Mapping[str, Any], float]], row: Any
) -> tuple[list[list[float]], list[float]]:
    """Least-squares rows and values: one per step, or — when every sample names its window
    and repetition and each window has MIN_REPS of them — one per (window, position) with
    the median over the repetitions, so a repetition the host slowed throughout does not
    tilt the slopes."""
    if not _reps_per_window(s for s, _ in keep):
        return [row(s, a) for s, a in keep], [float(s["ms"]) for s, _ in keep]
    groups: dict[tuple[Any, Any], list[float]] = defaultdict(list)
    first: dict[tuple[Any, Any], tuple[Mapping[str, Any], float]] = {}
    for s, a in keep:
        key = (s["window"], s.get("position", 0))
        groups[key].append(float(s["ms"]))
        first.setdefault(key, (s, a))
    return [row(*first[k]) for k in groups], [median(v) for v in groups.values()]


def _slopes(
    ops: Sequence[Mapping[str, Any]], ctx: Any, forwards: bool
) -> tuple[float, float] | None:
    """Least-squares slopes per cached token and per audio second of in-loop calls (for
    drafting ops, per forward: each forward at its own cache length); None without a
    span of audio lengths."""
    pts = []
    for s in ops:
        n = int(s.get("count", 0)) + int(s.get("catch_up", 0)) if forwards else 1
        if n <= 0:
            continue
        pos = float(s.get("position", 0)) - ctx.ref_tokens + (n - 1) / 2
        pts.append(
            (n, pos, float(s.get("audio_s", ctx.ref_audio_s)) - ctx.ref_audio_s, float(s["ms"]))
        )
    if len(pts) < MIN_SAMPLES or max(p[2] for p in pts) - min(p[2] for p in pts) < MIN_AUDIO_SPAN_S:
        return None
    coef = _lstsq([[n, n * pos, n * a] for n, pos, a, _ in pts], [ms for *_, ms in pts])
    return max(0.0, coef[1]), max(0.0, coef[2])


def _serial_slopes(
    profile: CostProfile, by: Mapping[str, Mapping[str, list[Mapping[str, Any]]]]
) -> CostProfile:
    """The drafter's slopes from every in-loop drafting op of SD and ASP; the target's
    per-width growth from SD's verification (one wide width) against the target-only K1
    slopes. The sweeps and the source's hot steps gave these before; inside the loop the
    calls' dependence on the window differs."""
    ctx = profile.context
    if ctx is None:
        return profile
    drafts = [s for f in ("sd", "asp") for s in by.get(f, {}).get("draft", [])]
    got = _slopes(drafts, ctx, forwards=True)
    if got is not None:
        ctx = dataclasses.replace(ctx, drafter_ms_per_token=got[0], drafter_ms_per_audio_s=got[1])
    verify = by.get("sd", {}).get("verify", [])
    if verify:
        widths = [int(s["width"]) for s in verify]
        k = max(set(widths), key=widths.count)
        got = _slopes([s for s in verify if int(s["width"]) == k], ctx, forwards=False)
        top = max(profile.widths) - 1  # no width may get a negative slope
        if got is not None and k > 1 and top > 0:
            ctx = dataclasses.replace(
                ctx,
                target_ms_per_token_per_width=max(
                    (got[0] - ctx.target_ms_per_token) / (k - 1), -ctx.target_ms_per_token / top
                ),
                target_ms_per_audio_s_per_width=max(
                    (got[1] - ctx.target_ms_per_audio_s) / (k - 1), -ctx.target_ms_per_audio_s / top
                ),
            )
    return dataclasses.replace(profile, context=ctx)


def _startup(
    steps: Sequence[Mapping[str, Any]], ref_audio_s: float | None, chunk_ms: float | None = None
) -> tuple[float, float] | None:
    """The producer's startup (ms, ms per audio second) from the episodes' source steps.

    With the steps' decode-clock end times (``end_ms``) it is what the first publication
    waits for: the first step's end — for a chunked source, whose first step is an empty
    ``start()``, the first chunk's end less the steady chunk price ``chunk_ms`` — so the
    hand-over's wake-up and a cold first chunk are charged, as natively. Older samples
    without ``end_ms``: the first step's own duration."""
    on_clock = any("end_ms" in s for s in steps)
    index = 1 if on_clock and chunk_ms is not None else 0  # a chunked source's first chunk
    first = [
        s for s in steps if int(s.get("index", -1)) == index and (not on_clock or "end_ms" in s)
    ]
    if on_clock and first:
        vals = [float(s["end_ms"]) - (chunk_ms or 0.0) for s in first]
    else:  # older samples, or no publishing step recorded: the first step's own duration
        first = [s for s in steps if int(s.get("index", -1)) == 0]
        vals = [float(s["ms"]) for s in first]
    if not first:
        return None
    auds = [float(s.get("audio_s", ref_audio_s or 0.0)) for s in first]
    if ref_audio_s is not None and max(auds) - min(auds) >= MIN_AUDIO_SPAN_S:
        a, b = _lstsq([[1.0, x - ref_audio_s] for x in auds], vals)
        return max(0.0, a), max(0.0, b)
    return max(0.0, sum(vals) / len(vals)), 0.0


def _source(
    profile: CostProfile, name: str, ops: Mapping[str, list[Mapping[str, Any]]], pricer: _Pricer
) -> SourceCosts | None:
    """The source's costs as measured next to a running target."""
    if name not in profile.sources:
        return None
    src = profile.sources[name]
    ctx = profile.context
    conc_verify = [s for s in ops.get("verify", []) if s.get("concurrent")]
    r_verify = _ratio(conc_verify, pricer, "verify")
    rows = []
    # A chunked source's first step is an empty start(); on the decode clock its first
    # chunk's excess over the steady chunk is charged as startup (_startup), so that chunk
    # stays out of the steady ratio too (older samples without ``end_ms`` keep it).
    first_chunk = src.kind != "autoregressive" and any(
        "end_ms" in s for s in ops.get("source_step", [])
    )
    for s in ops.get("source_step", []):
        i = int(s.get("index", 0))
        if (
            i == 0
            or (first_chunk and i == 1)
            or not s.get("concurrent")
            or int(s.get("tokens", 0)) == 0
        ):
            continue  # startup, or after the target's end, or the final partial publication
        if src.kind == "autoregressive":
            at = int(s.get("position", int(s["index"]) - 1))  # the source's cache length
            p = src.step_ms_idle + (
                ctx.drafter_ms(at, float(s.get("audio_s", ctx.ref_audio_s)))
                if ctx is not None
                else 0.0
            )
        else:
            p = src.chunk_ms_idle
        rows.append((s, float(s["ms"]), max(p, 1e-6)))
    obs, pred = typical_sums(rows)
    changes: dict[str, Any] = {}
    if len(rows) >= MIN_SAMPLES and pred > 0:
        changes["concurrent_ratio"] = obs / pred
    if r_verify is not None:
        changes["verify_concurrent_ratio"] = {k: r_verify for k in profile.widths}
    chunk = None
    if src.kind != "autoregressive":  # the steady concurrent chunk the first publication also pays
        chunk = src.chunk_ms_idle * float(changes.get("concurrent_ratio", src.concurrent_ratio))
    st = _startup(ops.get("source_step", []), ctx.ref_audio_s if ctx is not None else None, chunk)
    if st is not None:
        # The episodes see the startup beside the running target; the profile keeps idle
        # figures and the replay applies the concurrent ratio, which gives the observed back.
        r = float(changes.get("concurrent_ratio", src.concurrent_ratio))
        changes["startup_ms"] = st[0] / r
        if ctx is not None:
            changes["startup_ms_per_audio_s"] = st[1] / r
    return dataclasses.replace(src, **changes) if changes else src


def apply_in_loop(profile: CostProfile, samples: Sequence[Mapping[str, Any]]) -> CostProfile:
    """``profile`` (fitted from the sweeps) corrected by the calibration's native episodes;
    unchanged when there are none."""
    by = _by_tag(samples)
    if not by:
        return profile
    if "target-only" in by:
        profile = _target_step(profile, by["target-only"])
    profile = _serial_slopes(profile, by)
    pricer = _Pricer(profile)
    in_loop: dict[str, dict[str, float]] = {}
    for family in ("sd", "asp"):  # the serial families; As²d's ratio is fitted below
        kinds = IN_LOOP_KINDS[family]
        ops = by.get(family)
        if not ops or profile.drafter is None:
            continue
        for kind in kinds:
            r = _ratio(ops.get(kind, []), pricer, kind)
            if r is not None:
                in_loop.setdefault(family, {})[kind] = r
    # The serial loop residual: each round's time no op accounts for, plus the loop op.
    rounds = unacc = 0.0
    for family in ("sd", "asp"):
        ops = by.get(family, {})
        rounds += sum(int(e["rounds"]) for e in ops.get("episode", []))
        unacc += sum(float(e["unaccounted_ms"]) for e in ops.get("episode", []))
        unacc += sum(float(s["ms"]) for s in ops.get("loop", []))
    changes: dict[str, Any] = {}
    if rounds:
        changes["loop_ms"] = max(0.0, unacc / rounds)
    # As²d: calls after the producer finished, per source the concurrent figures, and the
    # loop's queue/alignment work (with its unaccounted time) per alignment.
    idle_after: list[Mapping[str, Any]] = []
    sources = dict(profile.sources)
    align_n = 0
    align_ms = 0.0
    for tag, ops in by.items():
        if not tag.startswith("as2d:"):
            continue
        idle_after += [s for s in ops.get("verify", []) if not s.get("concurrent")]
        updated = _source(profile, tag.split(":", 1)[1], ops, pricer)
        if updated is not None:
            sources[updated.name] = updated
        align_n += len(ops.get("align", []))
        align_ms += sum(float(s["ms"]) for s in ops.get("align", []))
        align_ms += sum(float(e["unaccounted_ms"]) for e in ops.get("episode", []))
    r = _ratio(idle_after, pricer, "verify")
    if r is not None:
        in_loop["as2d"] = {"verify": r}
    if align_n:
        changes["align_ms"] = align_ms / align_n
    return dataclasses.replace(profile, sources=sources, in_loop=in_loop or None, **changes)
