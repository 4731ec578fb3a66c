"""Fixed-configuration selection and the hindsight oracle (paper 4.3, D.2.6, D.4.3).

Selection replays As²d over the source × budget catalog on the development split, ranks
configurations by pooled TPS (Σ tokens / Σ time), and confirms the chosen one on the
validation split (it is *retained* when its validation TPS is within ``tolerance`` of
the best validation configuration). The catalog may also span As²d settings: every
source × budget under each (confidence stop, publication batch, history candidates) asked
for. History candidates (engine/history.py, the toolkit's extension) are searched both
ways by default, so the selection decides whether a deployment uses them; the paper's
alignment rules or a catalog of the paper's sources only search without them
(:func:`default_history`). A source that cannot serve a window's language runs the
trace's default source at the same budget (D.4.3). Test outcomes never enter it.

The oracle picks, per window and with hindsight, the (source, budget) pair with the
least episode time under the chosen setting, paying nothing for the choice; its gap to a
fixed configuration is 100·(1 − TPS_selected / TPS_oracle), both pooled over the same
windows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from as2d_cli.engine.methods import HISTORY, MethodSpec
from as2d_cli.errors import UserError
from as2d_cli.execution import Executor
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import TraceSet, WindowTrace
from as2d_cli.replay.sweep import AS2D, DEFAULT_BUDGETS, CatalogTimes, sweep
from as2d_cli.stats.compare import oracle_gap

DEFAULT_TOLERANCE = 0.01
# The toolkit's own sources beside the paper's (an autoregressive drafter, a CTC recognizer):
# a catalog asked for none of them reproduces the paper's source set.
EXTENSION_SOURCES = ("lookahead", HISTORY)


def default_history(align: str, sources: Sequence[str] | None) -> list[bool]:
    """The history axis a selection searches when none is asked for: without and with
    history candidates (the selection on dev decides), except when the paper is reproduced —
    its alignment rules (``align`` ``paper``) or only the paper's sources asked for
    (``sources`` given, none of :data:`EXTENSION_SOURCES`) — where it is without only."""
    if align == "paper":
        return [False]
    if sources is not None and not any(s in EXTENSION_SOURCES for s in sources):
        return [False]
    return [False, True]


class _Configured:
    """A configuration's catalog coordinates and As²d settings, read from its spec."""

    spec: MethodSpec

    @property
    def source(self) -> str:
        assert self.spec.source is not None
        return self.spec.source

    @property
    def budget(self) -> int:
        assert self.spec.budget is not None
        return self.spec.budget

    @property
    def threshold(self) -> float | None:
        return self.spec.threshold

    @property
    def batch(self) -> int:
        return self.spec.batch

    @property
    def align(self) -> str:
        return self.spec.align

    @property
    def history(self) -> bool:
        return self.spec.history


@dataclass(frozen=True)
class Ranked(_Configured):
    spec: MethodSpec  # one configuration: a setting of the catalog at a source and budget
    tps: float

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "budget": self.budget,
            "tps": self.tps,
            "threshold": self.threshold,
            "batch": self.batch,
            "history": self.history,
        }


def rank_settings(cats: Sequence[tuple[MethodSpec, CatalogTimes]]) -> list[Ranked]:
    """Every configuration of every setting's catalog by pooled TPS, best first (ties:
    smaller budget, then without history candidates, then the earlier setting, then the
    catalog's source order — the cheaper, simpler configuration wins a tie)."""
    rows: list[tuple[float, int, bool, int, int, Ranked]] = []
    for k, (setting, cat) in enumerate(cats):
        tps = cat.pooled_tps()
        for s, source in enumerate(cat.sources):
            for b, budget in enumerate(cat.budgets):
                t = float(tps[s, b])
                spec = replace(setting, source=source, budget=budget)
                rows.append((-t, budget, setting.history, k, s, Ranked(spec, t)))
    rows.sort(key=lambda r: r[:5])
    return [r[5] for r in rows]


def rank(cat: CatalogTimes, setting: MethodSpec = AS2D) -> list[Ranked]:
    """Every configuration of one catalog by pooled TPS, best first (:func:`rank_settings`)."""
    return rank_settings([(setting, cat)])


@dataclass
class OracleResult:
    tps_selected: float
    tps_oracle: float
    gap_percent: float
    choices: list[tuple[str, str, int]]  # per window: (window id, source used, budget)
    same_as_selected: int  # windows whose oracle choice is the selected configuration

    def to_json(self, per_window: bool = False) -> dict:
        d: dict[str, Any] = {
            "tps_selected": self.tps_selected,
            "tps_oracle": self.tps_oracle,
            "gap_percent": self.gap_percent,
            "windows": len(self.choices),
            "same_as_selected": self.same_as_selected,
        }
        if per_window:
            d["choices"] = [{"window": w, "source": s, "budget": b} for w, s, b in self.choices]
        return d


def oracle(cat: CatalogTimes, source: str, budget: int) -> OracleResult:
    """Per-window hindsight oracle over the catalog versus the fixed (source, budget)."""
    if source not in cat.sources or budget not in cat.budgets:
        raise UserError(
            f"configuration {source}/budget {budget} is not in the catalog ({', '.join(cat.sources)} × budgets {cat.budgets[0]}–{cat.budgets[-1]})"
        )
    s, b = cat.sources.index(source), cat.budgets.index(budget)
    W = len(cat.window_ids)
    flat = cat.times.reshape(W, -1)
    # Ties between configurations go to the first in catalog order (deterministic).
    best = flat.argmin(axis=1)
    t_oracle = flat[np.arange(W), best]
    t_sel = cat.times[:, s, b]
    tokens = int(cat.tokens.sum())
    tps_sel = tokens / (int(t_sel.sum()) / 1e9)
    tps_or = tokens / (int(t_oracle.sum()) / 1e9)
    B = len(cat.budgets)
    choices = [
        (cat.window_ids[i], cat.used[i][best[i] // B], cat.budgets[best[i] % B]) for i in range(W)
    ]
    same = int(np.sum(t_oracle == t_sel))
    return OracleResult(tps_sel, tps_or, oracle_gap(tps_sel, tps_or), choices, same)


@dataclass
class Selection(_Configured):
    spec: MethodSpec  # the chosen configuration: source, budget and As²d's settings
    dev: dict
    val: dict | None
    ranking: list[Ranked]
    catalog: dict
    excluded_sources: dict[str, str] = field(default_factory=dict)

    @property
    def retained(self) -> bool | None:
        return None if self.val is None else bool(self.val["retained"])

    def to_json(self, top: int = 10) -> dict:
        return {
            "source": self.source,
            "budget": self.budget,
            "threshold": self.threshold,
            "batch": self.batch,
            "align": self.align,
            "history": self.history,
            "max_width": self.budget + 1,
            "catalog": self.catalog,
            "excluded_sources": self.excluded_sources,
            "dev": self.dev,
            "val": self.val,
            "ranking": [r.to_json() for r in self.ranking[:top]],
        }


def catalog_sources(
    traces: TraceSet, profile: CostProfile, requested: Sequence[str] | None
) -> tuple[list[str], dict[str, str]]:
    """The sources to search: those requested, else every trace source the profile has
    costs for (the others are reported as excluded, never silently dropped)."""
    declared = list(traces.sources)
    if requested:
        for s in requested:
            if s not in traces.sources:
                raise UserError(
                    f"source {s!r} is not in the traces (they declare {', '.join(declared) or 'none'}); pick one of those"
                )
            profile.source(s)  # refuses a source the profile has no costs for
        return list(requested), {}
    usable = [s for s in declared if s in profile.sources]
    excluded = {s: "no costs in the profile" for s in declared if s not in profile.sources}
    if not usable:
        raise UserError(
            f"{profile.path}: has costs for none of the trace's sources ({', '.join(declared)}); calibrate one of them first"
        )
    return usable, excluded


def _feasible(profile: CostProfile, sources: Sequence[str], budget: int) -> bool:
    """A budget b can ask for any width 1..b+1 next to a busy or idle producer: every one
    must be measured, idle and concurrent (D.2.1); otherwise it leaves the catalog."""
    from as2d_cli.errors import FormatError
    from as2d_cli.replay.driver import Prepared

    try:
        for s in sources:
            Prepared(profile, MethodSpec("as2d", budget=budget, source=s)).table(s)
    except FormatError:
        return False
    return True


def feasible_budgets(
    profile: CostProfile, sources: Sequence[str], budgets: Sequence[int]
) -> list[int]:
    """The budgets (ascending) whose every width 1..b+1 the profile measured, idle and
    concurrent next to each source: the catalog's budget axis."""
    return [b for b in sorted(set(int(x) for x in budgets)) if _feasible(profile, sources, b)]


@dataclass(frozen=True)
class _Sweeps:
    """The sweeps of one selection: every setting's catalog on a split."""

    profile: CostProfile
    sources: list[str]
    budgets: list[int]
    settings: list[MethodSpec]
    processes: int | None
    executor: Executor | None
    progress: Callable[[str, int, int], None] | None
    total: int  # sweeps in the whole selection (progress)

    def run(
        self, split: str, windows: list[WindowTrace], done: int
    ) -> list[tuple[MethodSpec, CatalogTimes]]:
        """One sweep per setting; ``done``: the sweeps before these (progress)."""
        out = []
        both = len({st.history for st in self.settings}) > 1
        for i, st in enumerate(self.settings):
            if self.progress is not None:
                label = (
                    f", threshold {st.threshold}, batch {st.batch}"
                    if len(self.settings) > 1
                    else ""
                ) + (f", history {'on' if st.history else 'off'}" if both else "")
                self.progress(f"{split}{label}", done + i, self.total)
            cat = sweep(
                windows,
                self.profile,
                self.sources,
                self.budgets,
                setting=st,
                processes=self.processes,
                executor=self.executor,
            )
            out.append((st, cat))
        return out


def select_budget(
    traces: TraceSet,
    profile: CostProfile,
    *,
    sources: Sequence[str] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    settings: Sequence[MethodSpec] = (AS2D,),
    splits: tuple[str, str] = ("dev", "val"),
    tolerance: float = DEFAULT_TOLERANCE,
    processes: int | None = None,
    executor: Executor | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Selection:
    """Rank the catalog on the development split, check retention on the validation split
    (``splits``; skipped with a note when the traces hold no validation windows). The
    catalog is every source × budget under each of ``settings`` (As²d with its threshold,
    batch, alignment and history candidates: one, or a grid from
    ``engine.methods.spec_grid``, the history axis from :func:`default_history`); the chosen
    configuration, its setting included, is the selection (and so the deployment). The
    sweeps run on ``executor`` (default: a local pool of ``processes``);
    ``progress(label, done, total)`` hears of each one as it starts."""
    dev_split, val_split = splits
    dev = [w for w in traces.windows if w.split == dev_split]
    if not dev:
        have = sorted({w.split for w in traces.windows})
        raise UserError(
            f"the traces hold no {dev_split!r} windows (splits: {', '.join(have) or 'none'}); pass development traces"
        )
    budgets = sorted(set(int(b) for b in budgets))
    srcs, excluded = catalog_sources(traces, profile, sources)
    usable_budgets = feasible_budgets(profile, srcs, budgets)
    if not usable_budgets:
        raise UserError(
            f"{profile.path}: none of budgets {budgets[0]}–{budgets[-1]} has its width measured (profile max K{profile.max_width}); lower --budgets"
        )
    grid = list(dict.fromkeys(settings))
    val = [w for w in traces.windows if w.split == val_split]
    sweeps = _Sweeps(
        profile,
        srcs,
        usable_budgets,
        grid,
        processes,
        executor,
        progress,
        len(grid) * (2 if val else 1),
    )
    cats = sweeps.run(dev_split, dev, 0)
    ranking = rank_settings(cats)
    best = ranking[0]
    cat = next(
        c for st, c in cats if replace(st, source=best.source, budget=best.budget) == best.spec
    )
    dev_info = {
        "split": dev_split,
        "windows": len(dev),
        "tokens": int(cat.tokens.sum()),
        "tps": best.tps,
        "oracle": oracle(cat, best.source, best.budget).to_json(),
    }
    val_info = _validation(sweeps.run(val_split, val, len(grid)), best, tolerance) if val else None
    if val_info is not None:
        val_info = {"split": val_split, "windows": len(val), **val_info}
    described = {
        "sources": srcs,
        "budgets": usable_budgets,
        "thresholds": list(dict.fromkeys(st.threshold for st in grid)),
        "batches": list(dict.fromkeys(st.batch for st in grid)),
        "history": list(dict.fromkeys(st.history for st in grid)),
        "configurations": len(srcs) * len(usable_budgets) * len(grid),
        "dropped_budgets": [b for b in budgets if b not in usable_budgets],
        "ranking": "pooled TPS on the development split",
    }
    return Selection(best.spec, dev_info, val_info, ranking, described, excluded)


def _validation(
    vcats: list[tuple[MethodSpec, CatalogTimes]], best: Ranked, tolerance: float
) -> dict[str, Any]:
    """Where the chosen configuration ranks among every setting's on validation, and whether
    it is retained (within ``tolerance`` of the best there)."""
    vrank = rank_settings(vcats)
    chosen = next(r for r in vrank if r.spec == best.spec)
    vbest = vrank[0]
    return {
        "tokens": int(vcats[0][1].tokens.sum()),
        "tps": chosen.tps,
        "rank": vrank.index(chosen) + 1,
        "best": vbest.to_json(),
        "retention": chosen.tps / vbest.tps,
        "tolerance": tolerance,
        "retained": chosen.tps >= (1.0 - tolerance) * vbest.tps,
    }


def windows_of(traces: TraceSet, split: str | None) -> list[WindowTrace]:
    if split is None:
        return list(traces.windows)
    ws = [w for w in traces.windows if w.split == split]
    if not ws:
        have = sorted({w.split for w in traces.windows})
        raise UserError(
            f"the traces hold no {split!r} windows (splits: {', '.join(have) or 'none'}); pick one of those with --split"
        )
    return ws
