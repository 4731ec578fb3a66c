"""Catalog sweeps: every window × source × budget under As²d, fanned out over processes.

The sweep is the selection and oracle workhorse (paper D.2.6, D.4.3). Work is split into
window chunks; each worker builds every source's producer timeline for its windows once
(it is the same for every budget, see :mod:`as2d_cli.replay.producer`) and replays every
budget against it, returning only episode times. Chunks run on an executor
(:mod:`as2d_cli.execution`): the local pool forks, so workers inherit the traces; Ray puts
them in its object store once. Either way the result does not depend on where or in how
many chunks the windows ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from as2d_cli.engine.methods import MethodSpec
from as2d_cli.errors import UserError
from as2d_cli.execution import Executor, LocalPool
from as2d_cli.execution import default_processes as default_processes
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import WindowTrace
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for

DEFAULT_BUDGETS = tuple(range(1, 25))


@dataclass
class CatalogTimes:
    """Episode times (ns) of every window under every (source, budget) of a catalog.

    ``times[w, s, b]``; ``used[w][s]`` is the source actually run on window w for the
    requested ``sources[s]`` (the language fallback, D.4.3); ``rounds`` likewise."""

    window_ids: list[str]
    datasets: list[str]
    tokens: np.ndarray  # int64 [W]
    sources: list[str]
    budgets: list[int]
    times: np.ndarray  # int64 [W, S, B]
    rounds: np.ndarray  # int64 [W, S, B]
    used: list[list[str]]
    simulated_rounds: int = 0  # rounds actually simulated (saturated budgets reuse a run)

    def pooled_tps(self) -> np.ndarray:
        """Pooled TPS of every (source, budget): Σ tokens / Σ time over the windows."""
        tot = self.times.sum(axis=0)  # [S, B]
        return self.tokens.sum() / (tot / 1e9)

    @property
    def n_rounds(self) -> int:
        return int(self.rounds.sum())


AS2D = MethodSpec("as2d")  # the catalog's default setting: As²d's own defaults


@dataclass(frozen=True)
class _Catalog:
    """What every chunk reads: shipped to each worker once (see the executor)."""

    windows: Sequence[WindowTrace]
    profile: CostProfile
    sources: list[str]
    budgets: list[int]
    setting: MethodSpec  # As²d's settings (threshold, batch, alignment) for every cell
    reuse: bool


def _chunk_task(cat: _Catalog, bounds: tuple[int, int]) -> tuple:
    lo, hi = bounds
    return _run_chunk(
        cat.windows[lo:hi], cat.profile, cat.sources, cat.budgets, cat.setting, cat.reuse
    )


def _grid(
    profile: CostProfile, sources: Sequence[str], budgets: Sequence[int], setting: MethodSpec
) -> list[list[Prepared]]:
    """``setting``'s prepared configurations, one row per source, one column per budget."""
    return [
        [Prepared(profile, replace(setting, budget=b, source=s)) for b in budgets] for s in sources
    ]


def _run_chunk(
    windows: Sequence[WindowTrace],
    profile: CostProfile,
    sources: Sequence[str],
    budgets: Sequence[int],
    setting: MethodSpec,
    reuse: bool = True,
) -> tuple:
    """Times, rounds and used sources for ``windows``; budgets ascending.

    Budget saturation (exact, not an approximation): a budget b only ever cuts a round's
    chain at b candidates. If no round of the b-run offered b candidates, every chain was
    cut by readiness, confidence, or the output budget instead, so any larger budget makes
    the same chains, the same target calls at the same widths and the same times: the
    larger budgets reuse that run (``tests/test_replay_sweep.py`` checks it against
    replaying every budget)."""
    S, B = len(sources), len(budgets)
    times = np.zeros((len(windows), S, B), dtype=np.int64)
    rounds = np.zeros((len(windows), S, B), dtype=np.int64)
    simulated = 0
    used: list[list[str]] = []
    preps = _grid(profile, sources, budgets, setting)
    for i, w in enumerate(windows):
        row: list[str] = []
        for j, s in enumerate(sources):
            tl = timeline_for(w, preps[j][0], s)
            row.append(tl[0])
            saturated = False
            for k in range(B):
                if saturated:
                    times[i, j, k] = times[i, j, k - 1]
                    rounds[i, j, k] = rounds[i, j, k - 1]
                    continue
                r = replay_window(w, preps[j][k], detail=False, timeline=tl)
                times[i, j, k] = r.time_ns
                rounds[i, j, k] = r.rounds
                simulated += r.rounds
                widest = max(r.width_histogram, default=1)
                saturated = reuse and widest - 1 < budgets[k]
        used.append(row)
    return times, rounds, used, simulated


def sweep(
    windows: Sequence[WindowTrace],
    profile: CostProfile,
    sources: Sequence[str],
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    *,
    setting: MethodSpec = AS2D,
    processes: int | None = None,
    reuse: bool = True,
    executor: Executor | None = None,
) -> CatalogTimes:
    """Replay As²d under ``setting`` (its threshold, batch and alignment) for every window ×
    source × budget on ``executor`` (default: a local pool of ``processes``, every usable
    CPU; 1 runs in-process)."""
    if not windows:
        raise UserError("no windows to sweep; check the trace file and the split")
    if not sources or not budgets:
        raise UserError("the catalog is empty; give at least one source and one budget")
    budgets = sorted(set(int(b) for b in budgets))
    if budgets[0] < 1:
        raise UserError(f"budgets must be >= 1, got {budgets[0]}")
    # Check every configuration's widths and sources once, in the parent: a missing width
    # or source fails here with one line, before any worker starts.
    for s, row in zip(sources, _grid(profile, sources, budgets, setting)):
        for prep in row:
            prep.table(s)
    ex = executor if executor is not None else LocalPool(processes)
    W = len(windows)
    n_chunks = 1 if ex.workers <= 1 else min(W, ex.workers * 8)
    bounds = [(W * i // n_chunks, W * (i + 1) // n_chunks) for i in range(n_chunks)]
    bounds = [b for b in bounds if b[1] > b[0]]
    S, B = len(sources), len(budgets)
    times = np.zeros((W, S, B), dtype=np.int64)
    rounds = np.zeros((W, S, B), dtype=np.int64)
    used: list[list[str]] = [[] for _ in range(W)]
    simulated = 0
    shared = _Catalog(list(windows), profile, list(sources), budgets, setting, reuse)
    results: Any = ex.map(_chunk_task, shared, bounds)
    for (lo, _), (t, r, u, n) in zip(bounds, results):
        times[lo : lo + len(t)] = t
        rounds[lo : lo + len(r)] = r
        used[lo : lo + len(u)] = u
        simulated += n
    return CatalogTimes(
        window_ids=[w.id for w in windows],
        datasets=[w.dataset for w in windows],
        tokens=np.array([w.n_tokens for w in windows], dtype=np.int64),
        sources=list(sources),
        budgets=budgets,
        times=times,
        rounds=rounds,
        used=used,
        simulated_rounds=simulated,
    )
