"""Fit a cost profile from raw calibration samples: medians, measured widths only.

Each figure is the median of its measured samples (warm-ups excluded by the runner).
Concurrent/idle verification ratios are per width, median concurrent over median idle, not
clipped. A source's own concurrent ratio is its median step time while the target runs
verifier sweeps over its median step time alone. Nothing unmeasured gets a value: a width
without samples is absent from the profile.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from statistics import median
from typing import Any

from as2d_cli.calibration.in_loop import apply_in_loop
from as2d_cli.calibration.regression import MIN_AUDIO_SPAN_S
from as2d_cli.calibration.regression import lstsq as _lstsq
from as2d_cli.errors import UserError
from as2d_cli.formats.profile import ContextCosts, CostProfile, DrafterCosts, Fit, SourceCosts

DRAFTER_PROBE_CACHE = 17.0  # the serial drafter probes run after SOT and 16 reference tokens


def loop_residuals(
    samples: Iterable[Mapping[str, Any]],
    verify_ms: Mapping[int, float],
    draft_ms: float,
    ctx: ContextCosts | None = None,
    catch_up_ms: float | None = None,
) -> list[float]:
    """Per serial round: wall time minus its drafter forwards (catch-ups at their own cost
    when the sample separates them) and its verification, each at the fitted cost (at the
    round's cache length when context terms exist) — the work the profile does not
    already charge."""
    out = []
    for s in samples:
        if s["figure"] != "loop_round" or int(s["width"]) not in verify_ms:
            continue
        d, v = draft_ms, verify_ms[int(s["width"])]
        if ctx is not None and "position" in s:
            pos = float(s["position"])
            d += ctx.drafter_ms(pos, ctx.ref_audio_s)
            v += ctx.target_ms(pos, ctx.ref_audio_s, int(s["width"]))
        if catch_up_ms is not None and "catch_up" in s:
            drafting = s["drafted"] * d + s["catch_up"] * catch_up_ms
        else:
            drafting = s["forwards"] * d
        out.append(float(s["ms"]) - drafting - v)
    return out


def group(samples: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Raw samples (ms) by figure name; verification split into idle and concurrent."""
    out: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        fig = s["figure"]
        if fig.startswith("verify.") and s.get("concurrent"):
            fig = fig.replace("verify.", "verify_concurrent.")
        out[fig].append(float(s["ms"]))
    return dict(out)


def _med(g: Mapping[str, list[float]], key: str, default: float | None = None) -> float:
    v = g.get(key)
    if not v:
        if default is not None:
            return default
        raise UserError(
            f"calibration has no samples for {key!r}; rerun `as2d calibrate` (it resumes) to measure it"
        )
    return float(median(v))


REF_TOKENS = 64.0  # the cache length flat figures are quoted at (the full sweep's middle offset)
MIN_TOKEN_SPAN = 32  # cache lengths measured must span this many tokens for a token slope


def _trim(xs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Drop wild samples (over 3× the median: a preemption, not the operation's cost)."""
    if not xs:
        return xs
    m = float(median(float(s["ms"]) for s in xs))
    return [s for s in xs if float(s["ms"]) <= 3 * m]


def fit_context(samples: list[Mapping[str, Any]], ref_audio_s: float | None) -> ContextCosts | None:
    """Linear context terms from the sweeps (None when the samples cannot separate them).

    Target: idle verification medians per (width, offset, audio length) fitted as a
    per-width constant plus a slope per cached token and one per audio second, each
    growing linearly with the width.
    Drafter: the drafter source's steps (position = its own cache length) on both windows.
    A term whose variable was never varied stays 0."""
    if ref_audio_s is None:
        return None
    cells: dict[tuple[int, int, float], list[float]] = defaultdict(list)
    for s in samples:
        if (
            s["figure"].startswith("verify.K")
            and not s.get("concurrent")
            and "audio_s" in s
            and "offset" in s
        ):
            cells[(int(s["width"]), int(s["offset"]), float(s["audio_s"]))].append(float(s["ms"]))
    if not cells:
        return None
    widths = sorted({k for k, _, _ in cells})
    offsets = {o for _, o, _ in cells}
    audios = {a for _, _, a in cells}
    # A slope is fitted only over a span worth extrapolating from (a few tokens or a
    # second of audio would turn noise into a slope).
    vary_t = max(offsets) - min(offsets) >= MIN_TOKEN_SPAN
    vary_a = max(audios) - min(audios) >= MIN_AUDIO_SPAN_S
    many = len(widths) > 2  # slopes that grow with the width need several widths
    rows, y = [], []
    for (k, o, a), v in sorted(cells.items()):
        row = [1.0 if k == w else 0.0 for w in widths]
        if vary_t:
            row += [o - REF_TOKENS] + ([(o - REF_TOKENS) * (k - 1)] if many else [])
        if vary_a:
            row += [a - ref_audio_s] + ([(a - ref_audio_s) * (k - 1)] if many else [])
        rows.append(row)
        y.append(float(median(v)))
    coef = _lstsq(rows, y)[len(widths) :]
    t_tok = coef.pop(0) if vary_t else 0.0
    t_tok_w = coef.pop(0) if vary_t and many else 0.0
    t_aud = coef.pop(0) if vary_a else 0.0
    t_aud_w = coef.pop(0) if vary_a and many else 0.0
    if not (vary_t or vary_a):
        return None
    top = max(widths) - 1  # no width may get a negative slope
    t_tok, t_aud = max(0.0, t_tok), max(0.0, t_aud)
    t_tok_w = max(t_tok_w, -t_tok / top) if top else 0.0
    t_aud_w = max(t_aud_w, -t_aud / top) if top else 0.0
    steps = _trim(
        [
            s
            for s in samples
            if s["figure"] == "sources.drafter.step" and "audio_s" in s and "position" in s
        ]
    )
    d_tok = d_aud = 0.0
    positions = [int(s["position"]) for s in steps]
    if positions and max(positions) - min(positions) >= MIN_TOKEN_SPAN:
        auds = [float(s["audio_s"]) for s in steps]
        two = max(auds) - min(auds) >= MIN_AUDIO_SPAN_S
        rows = [
            [1.0, float(s["position"]) - REF_TOKENS]
            + ([float(s["audio_s"]) - ref_audio_s] if two else [])
            for s in steps
        ]
        c = _lstsq(rows, [float(s["ms"]) for s in steps])
        d_tok, d_aud = c[1], (c[2] if two else 0.0)
    # Longer caches and longer audio never make a call cheaper: a negative fit is noise.
    return ContextCosts(
        ref_tokens=REF_TOKENS,
        ref_audio_s=ref_audio_s,
        target_ms_per_token=t_tok,
        target_ms_per_audio_s=t_aud,
        drafter_ms_per_token=max(0.0, d_tok),
        drafter_ms_per_audio_s=max(0.0, d_aud),
        target_ms_per_token_per_width=t_tok_w,
        target_ms_per_audio_s_per_width=t_aud_w,
    )


def _at_ref(
    samples: list[Mapping[str, Any]],
    ctx: ContextCosts | None,
    *,
    figure: str,
    drafter: bool = False,
    position: float | None = None,
) -> list[float]:
    """A figure's samples (already only the reference window's), each moved to the
    reference cache length with the fitted slope (its own ``position``, or the probe's
    fixed one)."""
    out = []
    for s in samples:
        if s["figure"] != figure:
            continue
        ms = float(s["ms"])
        if ctx is not None:
            pos = float(s.get("position", position if position is not None else ctx.ref_tokens))
            ms -= (
                ctx.drafter_ms(pos, ctx.ref_audio_s)
                if drafter
                else ctx.target_ms(pos, ctx.ref_audio_s)
            )
        out.append(ms)
    return out


def fit_profile(
    samples: list[Mapping[str, Any]],
    device: Mapping[str, Any],
    *,
    notes: str = "",
    created: str = "",
    ref_audio_s: float | None = None,
) -> CostProfile:
    ctx = fit_context(samples, ref_audio_s)
    all_samples = samples
    if (
        ctx is not None
    ):  # figures are quoted at the reference window; the short one only fed the slopes
        samples = [
            s
            for s in samples
            if float(s.get("audio_s", ref_audio_s)) == ref_audio_s
            or s["figure"] == "sources.drafter.startup"
        ]
    g = group(samples)
    idle, ratios = _verify_costs(samples, g, ctx)
    flat_step = _med(
        g, "sources.drafter.step", 0.0
    )  # over all positions: the concurrent ratio's baseline
    if (
        ctx is not None
    ):  # figures probed at a fixed or recorded cache length, moved to the reference
        _move_to_reference(g, samples, ctx)
    drafter = _drafter_costs(g)
    sources = _source_costs(g, all_samples, ctx, ref_audio_s, flat_step)
    target_step = _med(g, "target_step")
    if drafter is not None and g.get("loop_round"):
        g["loop"] = loop_residuals(samples, idle, drafter.step_ms, ctx, drafter.catch_up_ms)
    loop = max(0.0, _med(g, "loop", 0.0))
    profile = CostProfile(
        device=dict(device),
        target_step_ms=target_step,
        verify_idle_ms=idle,
        verify_concurrent_ratio=ratios,
        loop_ms=loop,
        align_ms=0.0,
        drafter=drafter,
        sources=sources,
        fit=_fit_record(g, all_samples, notes),
        created=created,
        context=ctx,
    )
    return apply_in_loop(profile, all_samples)


def _verify_costs(
    samples: list[Mapping[str, Any]], g: dict[str, list[float]], ctx: ContextCosts | None
) -> tuple[dict[int, float], dict[int, float]]:
    """Each width's idle verification cost (at the reference cache length when there is a
    context) and its concurrent/idle ratio."""
    idle = {
        int(k.split("K")[1]): float(median(v))
        for k, v in g.items()
        if k.startswith("verify.K") and v
    }
    flat_idle = dict(
        idle
    )  # medians over the sweep's offsets: the concurrent ratios compare like with like
    conc = {
        int(k.split("K")[1]): float(median(v))
        for k, v in g.items()
        if k.startswith("verify_concurrent.K") and v
    }
    if not idle:
        raise UserError("calibration has no verification samples; rerun `as2d calibrate`")
    ratios = {k: conc[k] / flat_idle[k] for k in idle if k in conc and flat_idle[k] > 0}
    if ctx is not None:  # each width's idle cost at the reference cache length
        moved: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            if s["figure"].startswith("verify.K") and not s.get("concurrent"):
                moved[int(s["width"])].append(
                    float(s["ms"])
                    - ctx.target_ms(
                        float(s.get("offset", ctx.ref_tokens)), ctx.ref_audio_s, int(s["width"])
                    )
                )
        idle = {k: float(median(v)) for k, v in moved.items()}
    if ratios and len(ratios) < len(idle):
        # Widths measured idle but not concurrently take the median measured ratio (D.2.4).
        fill = float(median(ratios.values()))
        ratios = {k: ratios.get(k, fill) for k in idle}
    elif not ratios:
        ratios = {k: 1.0 for k in idle}
    return idle, ratios


def _move_to_reference(
    g: dict[str, list[float]], samples: list[Mapping[str, Any]], ctx: ContextCosts
) -> None:
    """The drafter's, the sources' and the target step's figures moved to the reference
    cache length (in place)."""
    for fig in (
        "drafter.step",
        "drafter.catch_up",
        "drafter.paired",
        *[k for k in g if k.startswith("drafter.refresh.K")],
    ):
        if g.get(fig):
            g[fig] = _at_ref(samples, ctx, figure=fig, drafter=True, position=DRAFTER_PROBE_CACHE)
    for fig, is_drafter in (
        ("sources.drafter.step", True),
        ("sources.lookahead.step", True),
        ("target_step", False),
    ):
        if g.get(fig):
            g[fig] = _at_ref(samples, ctx, figure=fig, drafter=is_drafter)


def _drafter_costs(g: dict[str, list[float]]) -> DrafterCosts | None:
    """The paired drafter's costs, when it was measured."""
    if not g.get("drafter.step"):
        return None
    refresh = {
        int(k.split("K")[1]): float(median(v))
        for k, v in g.items()
        if k.startswith("drafter.refresh.K") and v
    }
    return DrafterCosts(
        step_ms=_med(g, "drafter.step"),
        catch_up_ms=_med(g, "drafter.catch_up"),
        paired_ms=_med(g, "drafter.paired"),
        row_ms=_med(g, "drafter.row"),
        refresh_ms=refresh,
    )


def _source_costs(
    g: dict[str, list[float]],
    all_samples: list[Mapping[str, Any]],
    ctx: ContextCosts | None,
    ref_audio_s: float | None,
    flat_step: float,
) -> dict[str, SourceCosts]:
    """The measured decoupled sources: the drafter source (its concurrent ratio measured),
    and the look-ahead and CTC sources, which run beside the target at that ratio."""
    sources: dict[str, SourceCosts] = {}
    if g.get("sources.drafter.step"):
        step = _med(g, "sources.drafter.step")
        step_c = _med(g, "sources.drafter.step_concurrent", flat_step)
        startup, startup_slope = (
            _startup(all_samples, "drafter", ref_audio_s) if ctx is not None else (None, 0.0)
        )
        sources["drafter"] = SourceCosts(
            "drafter",
            "autoregressive",
            step_ms_idle=step,
            publish_ms=_med(g, "sources.drafter.publish", 0.0),
            startup_ms=startup if startup is not None else _med(g, "sources.drafter.startup", 0.0),
            concurrent_ratio=step_c / flat_step if flat_step > 0 else 1.0,
            startup_ms_per_audio_s=startup_slope,
        )
    ratio = sources["drafter"].concurrent_ratio if "drafter" in sources else 1.0

    def beside_drafter(name: str, kind: str, unit: str) -> SourceCosts:
        """A source measured alone (its steps or chunks, publications, startup) that runs
        beside the target at the drafter source's concurrent ratio."""
        cost = _med(g, f"sources.{name}.{unit}")
        return SourceCosts(
            name,
            kind,
            step_ms_idle=cost if unit == "step" else 0.0,
            chunk_ms_idle=cost if unit == "chunk" else 0.0,
            publish_ms=_med(g, f"sources.{name}.publish", 0.0),
            startup_ms=_med(g, f"sources.{name}.startup", 0.0),
            concurrent_ratio=ratio,
        )

    # The drafter checking its look-ahead guesses: priced per forward (one or two tokens).
    if g.get("sources.lookahead.step"):
        sources["lookahead"] = beside_drafter("lookahead", "autoregressive", "step")
    if g.get("sources.ctc.chunk"):
        sources["ctc"] = beside_drafter("ctc", "chunked", "chunk")
    return sources


def _fit_record(g: dict[str, list[float]], all_samples: list[Mapping[str, Any]], notes: str) -> Fit:
    """How the profile was fitted, with the samples per figure."""
    episodes = any(s["figure"].startswith("loop.") for s in all_samples)
    return Fit(
        method="median of measured calls per figure (warm-ups excluded); concurrent/idle ratio per width = "
        "median concurrent / median idle, unclipped; widths without concurrent samples take the median ratio"
        + (
            "; then corrected by native episodes (in-loop costs: as2d_cli.calibration.in_loop)"
            if episodes
            else ""
        ),
        samples={k: tuple(v) for k, v in sorted(g.items()) if not k.startswith("loop.")},
        notes=notes,
    )


def _startup(
    samples: list[Mapping[str, Any]], source: str, ref_audio_s: float | None
) -> tuple[float | None, float]:
    """A source's startup at the reference audio length and its slope per audio second
    (0 when it was measured on one length only)."""
    by: dict[float, list[float]] = defaultdict(list)
    for s in samples:
        if s["figure"] == f"sources.{source}.startup" and "audio_s" in s:
            by[float(s["audio_s"])].append(float(s["ms"]))
    if ref_audio_s not in by:
        return None, 0.0
    ref = float(median(by[ref_audio_s]))
    others = [a for a in by if a != ref_audio_s]
    if not others:
        return ref, 0.0
    a = others[0]
    return ref, (ref - float(median(by[a]))) / (ref_audio_s - a)


def savings(profile: CostProfile) -> dict[int, float]:
    """Per-token verification saving R(K) = 1 − V(K)/(K·V(1)) (paper eq. 2), in percent."""
    v1 = profile.verify_idle_ms[1]
    return {k: 100.0 * (1 - v / (k * v1)) for k, v in sorted(profile.verify_idle_ms.items())}
