"""Fit a cost profile from raw calibration samples: medians, measured widths only.

Each figure is the median of its measured samples (warm-ups excluded by the runner).
Concurrent/idle verification ratios are per width, median concurrent over median idle, not
clipped. A source's own concurrent ratio is its median step time while the target runs
verifier sweeps over its median step time alone. Nothing unmeasured gets a value: a width
without samples is absent from the profile.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any, Iterable, Mapping

from as2d_cli.errors import UserError
from as2d_cli.formats.profile import CostProfile, DrafterCosts, Fit, SourceCosts


def loop_residuals(samples: Iterable[Mapping[str, Any]], verify_ms: Mapping[int, float], draft_ms: float) -> list[float]:
    """Per serial round: wall time minus its drafter forwards and its verification, each at
    the fitted (median) cost — the work the profile does not already charge."""
    return [float(s["ms"]) - s["forwards"] * draft_ms - verify_ms[int(s["width"])]
            for s in samples if s["figure"] == "loop_round" and int(s["width"]) in verify_ms]


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
        raise UserError(f"calibration has no samples for {key!r}; rerun `as2d calibrate` (it resumes) to measure it")
    return float(median(v))


def fit_profile(samples: list[Mapping[str, Any]], device: Mapping[str, Any], *, notes: str = "",
                created: str = "") -> CostProfile:
    g = group(samples)
    idle = {int(k.split("K")[1]): float(median(v)) for k, v in g.items() if k.startswith("verify.K") and v}
    conc = {int(k.split("K")[1]): float(median(v)) for k, v in g.items() if k.startswith("verify_concurrent.K") and v}
    if not idle:
        raise UserError("calibration has no verification samples; rerun `as2d calibrate`")
    ratios = {k: conc[k] / idle[k] for k in idle if k in conc and idle[k] > 0}
    if ratios and len(ratios) < len(idle):
        # Widths measured idle but not concurrently take the median measured ratio (D.2.4).
        fill = float(median(ratios.values()))
        ratios = {k: ratios.get(k, fill) for k in idle}
    elif not ratios:
        ratios = {k: 1.0 for k in idle}
    refresh = {int(k.split("K")[1]): float(median(v)) for k, v in g.items() if k.startswith("drafter.refresh.K") and v}
    drafter = None
    if g.get("drafter.step"):
        drafter = DrafterCosts(step_ms=_med(g, "drafter.step"), catch_up_ms=_med(g, "drafter.catch_up"),
                               paired_ms=_med(g, "drafter.paired"), row_ms=_med(g, "drafter.row"), refresh_ms=refresh)
    sources: dict[str, SourceCosts] = {}
    if g.get("sources.drafter.step"):
        step = _med(g, "sources.drafter.step")
        step_c = _med(g, "sources.drafter.step_concurrent", step)
        sources["drafter"] = SourceCosts("drafter", "autoregressive", step_ms_idle=step,
                                         publish_ms=_med(g, "sources.drafter.publish", 0.0),
                                         startup_ms=_med(g, "sources.drafter.startup", 0.0),
                                         concurrent_ratio=step_c / step if step > 0 else 1.0)
    if g.get("sources.ctc.chunk"):
        sources["ctc"] = SourceCosts("ctc", "chunked", chunk_ms_idle=_med(g, "sources.ctc.chunk"),
                                     publish_ms=_med(g, "sources.ctc.publish", 0.0),
                                     startup_ms=_med(g, "sources.ctc.startup", 0.0),
                                     concurrent_ratio=sources["drafter"].concurrent_ratio if "drafter" in sources else 1.0)
    target_step = _med(g, "target_step")
    if drafter is not None and g.get("loop_round"):
        g["loop"] = loop_residuals(samples, idle, drafter.step_ms)
    loop = max(0.0, _med(g, "loop", 0.0))
    fit = Fit(method="median of measured calls per figure (warm-ups excluded); concurrent/idle ratio per width = "
                     "median concurrent / median idle, unclipped; widths without concurrent samples take the median ratio",
              samples={k: tuple(v) for k, v in sorted(g.items())}, notes=notes)
    return CostProfile(device=dict(device), target_step_ms=target_step, verify_idle_ms=idle,
                       verify_concurrent_ratio=ratios, loop_ms=loop, align_ms=0.0, drafter=drafter,
                       sources=sources, fit=fit, created=created)


def savings(profile: CostProfile) -> dict[int, float]:
    """Per-token verification saving R(K) = 1 − V(K)/(K·V(1)) (paper eq. 2), in percent."""
    v1 = profile.verify_idle_ms[1]
    return {k: 100.0 * (1 - v / (k * v1)) for k, v in sorted(profile.verify_idle_ms.items())}
