"""Method runners: replay a set of windows under one method and summarise it (D.1.3).

Standard SD runs each fixed width K separately; its summary is the mean over K of the
per-K pooled TPS, and its per-window figure the mean of that window's per-K TPS values
(the CDF and slowdown counts use the per-window figure). Every other method has one
configuration. Pooled TPS = Σ tokens / Σ time over the windows pooled (A.3).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from as2d_cli.errors import UserError
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import WindowTrace
from as2d_cli.replay.driver import Prepared, WindowReplay, replay_window
from as2d_cli.replay.methods import MethodSpec, expand

TIE = 1e-9  # a TPS ratio within 1e-9 of 1 is a tie (D.4.5)


def pooled(rows: Sequence[WindowReplay]) -> float | None:
    t = sum(r.time_ns for r in rows)
    return sum(r.tokens for r in rows) / (t / 1e9) if t > 0 else None


@dataclass
class MethodRun:
    """One method's replay: ``runs[i]`` holds every window under ``specs[i]``."""

    method: str
    specs: list[MethodSpec]
    runs: list[list[WindowReplay]]

    @property
    def windows(self) -> list[WindowReplay]:
        return self.runs[0]

    def pooled_tps(self, dataset: str | None = None) -> float | None:
        """Pooled TPS (SD: the mean of the per-K pooled TPS)."""
        vals = []
        for rows in self.runs:
            sel = [r for r in rows if dataset is None or r.dataset == dataset]
            v = pooled(sel)
            if v is None:
                return None
            vals.append(v)
        return sum(vals) / len(vals)

    def window_tps(self) -> list[float | None]:
        """Per-window TPS (SD: the mean of that window's per-K TPS)."""
        out: list[float | None] = []
        for i in range(len(self.runs[0])):
            vals = [rows[i].tps for rows in self.runs]
            out.append(None if any(v is None for v in vals) else sum(vals) / len(vals))  # type: ignore[misc]
        return out

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
            per_config.append({
                "config": spec.label,
                "windows": len(rows),
                "tokens": toks,
                "time_ms": sum(r.time_ns for r in rows) / 1e6,
                "tps": pooled(rows),
                "rounds": sum(r.rounds for r in rows),
                "proposed": prop,
                "accepted": acc,
                "acceptance": acc / prop if prop else 0.0,
                "coverage": acc / decoded if decoded else 0.0,
                "width_histogram": {str(k): v for k, v in sorted(hist.items())},
                "accounting_ms": {k: sum(getattr(r, k) for r in rows) / 1e6 for k in ("D", "V", "O", "H")},
            })
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
    *,
    budget: int | None = None,
    source: str | None = None,
    k: int | None = None,
    default_source: str | None = None,
    default_budget: int = 7,
    detail: bool = True,
) -> MethodRun:
    if not windows:
        raise UserError("no windows to replay; check the trace file and the split")
    specs = expand(method, budget=budget, source=source, k=k, profile_max_width=profile.max_width,
                   default_source=default_source, default_budget=default_budget)
    preps = [Prepared(profile, s) for s in specs]  # widths/sources/costs checked before any window
    for prep in preps:
        if prep.spec.decoupled:
            prep.table(prep.spec.source)  # type: ignore[arg-type]
    runs = [[replay_window(w, prep, detail=detail) for w in windows] for prep in preps]
    return MethodRun(method, specs, runs)


def slowdowns(method_tps: Sequence[float | None], base_tps: Sequence[float | None]) -> dict:
    """Windows faster/slower than the baseline (ties within 1e-9), with the median and
    maximum TPS loss (percent) among the slower ones (D.4.5). Windows without a TPS
    (a one-token output) are counted apart."""
    faster = slower = ties = undefined = 0
    losses: list[float] = []
    for m, b in zip(method_tps, base_tps):
        if m is None or b is None:
            undefined += 1
            continue
        r = m / b
        if abs(r - 1.0) <= TIE:
            ties += 1
        elif r < 1.0:
            slower += 1
            losses.append(100.0 * (1.0 - r))
        else:
            faster += 1
    losses.sort()
    med = None
    if losses:
        n = len(losses)
        med = losses[n // 2] if n % 2 else (losses[n // 2 - 1] + losses[n // 2]) / 2
    return {"faster": faster, "slower": slower, "ties": ties, "undefined": undefined,
            "median_loss_percent": med, "max_loss_percent": losses[-1] if losses else None}
