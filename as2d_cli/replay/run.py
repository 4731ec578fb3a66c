"""Method runners: replay a set of windows under one method and summarise it (D.1.3).

Standard SD runs each fixed width K separately; its summary is the mean over K of the
per-K pooled TPS, and its per-window figure the mean of that window's per-K TPS values
(the CDF and slowdown counts use the per-window figure). Every other method has one
configuration. Pooled TPS = Σ tokens / Σ time over the windows pooled (A.3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from as2d_cli.engine.methods import (
    MethodOptions,
    MethodSpec,
    expand,
)
from as2d_cli.errors import UserError
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import WindowTrace
from as2d_cli.replay.driver import Prepared, WindowReplay, replay_window
from as2d_cli.stats.compare import TIE, sd_summary, sd_window_tps, slowdown
from as2d_cli.stats.pooled import Outcome, pooled_tps

__all__ = ["TIE", "MethodRun", "outcomes", "pooled", "run_method", "slowdowns"]


def outcomes(rows: Sequence[WindowReplay]) -> list[Outcome]:
    """The statistics module's view of replayed windows (tokens, time)."""
    return [Outcome.from_ns(r.window, r.dataset, r.tokens, r.time_ns) for r in rows]


def pooled(rows: Sequence[WindowReplay]) -> float | None:
    """Pooled TPS of ``rows`` (None when they hold no decode time at all)."""
    if not rows or sum(r.time_ns for r in rows) <= 0:
        return None
    return pooled_tps(outcomes(rows))


@dataclass
class MethodRun:
    """One method's replay: ``runs[i]`` holds every window under ``specs[i]``."""

    method: str
    specs: list[MethodSpec]
    runs: list[list[WindowReplay]]

    @property
    def windows(self) -> list[WindowReplay]:
        return self.runs[0]

    @property
    def is_sd(self) -> bool:
        return self.method == "sd"

    def _by_k(self, dataset: str | None = None) -> dict[int, list[Outcome]]:
        return {
            spec.k: outcomes([r for r in rows if dataset is None or r.dataset == dataset])  # type: ignore[misc]
            for spec, rows in zip(self.specs, self.runs)
        }

    def pooled_tps(self, dataset: str | None = None) -> float | None:
        """Pooled TPS (SD: the mean over K of the per-K pooled TPS, D.1.3)."""
        rows = [r for r in self.runs[0] if dataset is None or r.dataset == dataset]
        if not rows or sum(r.time_ns for r in rows) <= 0:
            return None
        if self.is_sd:
            ks = [s.k for s in self.specs]
            return sd_summary(self._by_k(dataset), ks)["all"]  # type: ignore[arg-type]
        return pooled_tps(outcomes(rows))

    def window_tps(self) -> list[float | None]:
        """Per-window TPS (SD: the mean of that window's per-K TPS). None for a window with
        no decode time (its only token came from prefill): tokens/s is undefined there."""
        timed = [all(rows[i].time_ns > 0 for rows in self.runs) for i in range(len(self.runs[0]))]
        if self.is_sd:
            ks = [s.k for s in self.specs]
            by_k = {
                s.k: outcomes([r for r, ok in zip(rows, timed) if ok])
                for s, rows in zip(self.specs, self.runs)
            }
            vals = sd_window_tps(by_k, ks) if any(timed) else {}  # type: ignore[arg-type]
        else:
            vals = {o.window: o.tps for o, ok in zip(outcomes(self.runs[0]), timed) if ok}
        return [vals[r.window] if ok else None for r, ok in zip(self.runs[0], timed)]

    def datasets(self) -> list[str]:
        return list(dict.fromkeys(r.dataset for r in self.runs[0]))

    def summary(self) -> dict:
        per_config = []
        for spec, rows in zip(self.specs, self.runs):
            hist: Counter = Counter()
            for r in rows:
                hist.update(r.width_histogram)
            toks = sum(r.tokens for r in rows)
            prop = sum(r.proposed for r in rows)
            acc = sum(r.accepted for r in rows)
            decoded = sum(r.tokens - 1 for r in rows)
            per_config.append(
                {
                    "config": spec.label,
                    "windows": len(rows),
                    "tokens": toks,
                    "time_ms": sum(r.time_ns for r in rows) / 1e6,
                    "tps": pooled(rows),
                    "rounds": sum(r.rounds for r in rows),
                    "draft_forwards": sum(r.draft_forwards for r in rows),
                    "paired_forwards": sum(r.paired_forwards for r in rows),
                    "proposed": prop,
                    "accepted": acc,
                    "acceptance": acc / prop if prop else 0.0,
                    "coverage": acc / decoded if decoded else 0.0,
                    "width_histogram": {str(k): v for k, v in sorted(hist.items())},
                    "accounting_ms": {
                        k: sum(getattr(r, k) for r in rows) / 1e6 for k in ("D", "V", "O", "H")
                    },
                }
            )
        return {
            "method": self.method,
            "tps": self.pooled_tps(),
            "tps_by_dataset": {d: self.pooled_tps(d) for d in self.datasets()},
            "configs": per_config,
        }


def run_method(
    windows: Sequence[WindowTrace],
    profile: CostProfile,
    method: str,
    options: MethodOptions = MethodOptions(),
    *,
    detail: bool = True,
) -> MethodRun:
    if not windows:
        raise UserError("no windows to replay; check the trace file and the split")
    specs = expand(method, profile.max_width, options)
    preps = [Prepared(profile, s) for s in specs]  # widths/sources/costs checked before any window
    for prep in preps:
        if prep.spec.decoupled:
            prep.table(prep.spec.source)  # type: ignore[arg-type]
    runs = [[replay_window(w, prep, detail=detail) for w in windows] for prep in preps]
    return MethodRun(method, specs, runs)


def slowdowns(method_tps: Sequence[float | None], base_tps: Sequence[float | None]) -> dict:
    """Windows faster/slower than the baseline (ties within 1e-9), with the median and
    maximum TPS loss (percent) among the slower ones (D.4.5), via the statistics module.
    Windows without a TPS (a one-token output) are counted apart as ``undefined``."""
    keep = [
        i for i, (m, b) in enumerate(zip(method_tps, base_tps)) if m is not None and b is not None
    ]
    undefined = len(method_tps) - len(keep)
    if not keep:
        return {
            "faster": 0,
            "slower": 0,
            "ties": 0,
            "undefined": undefined,
            "median_loss_percent": None,
            "max_loss_percent": None,
        }
    sl = slowdown({str(i): method_tps[i] for i in keep}, {str(i): base_tps[i] for i in keep})  # type: ignore[misc]
    return {
        "faster": sl.faster,
        "slower": sl.slower,
        "ties": sl.ties,
        "undefined": undefined,
        "median_loss_percent": sl.median_loss_pct,
        "max_loss_percent": sl.max_loss_pct,
    }
