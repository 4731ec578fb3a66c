"""Catalog sweeps: every window × source × budget under As²d, fanned out over processes.

The sweep is the selection and oracle workhorse (paper D.2.6, D.4.3). Work is split into
window chunks; each worker builds every source's producer timeline for its windows once
(it is the same for every budget, see :mod:`as2d_cli.replay.producer`) and replays every
budget against it, returning only episode times. Workers are forked so the traces are
inherited, not pickled (on platforms without fork they are pickled once per chunk).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import WindowTrace
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for
from as2d_cli.engine.methods import DEFAULT_BATCH, DEFAULT_THRESHOLD, MethodSpec

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


# Set in the parent before forking; workers read it (fork shares it copy-on-write).
_STATE: dict = {}


def _chunk_job(args: tuple[int, int]) -> tuple:
    lo, hi = args
    windows: Sequence[WindowTrace] = _STATE["windows"]
    return (
        lo,
        *_run_chunk(
            windows[lo:hi],
            _STATE["profile"],
            _STATE["sources"],
            _STATE["budgets"],
            _STATE["threshold"],
            _STATE["batch"],
            _STATE["reuse"],
        ),
    )


def _chunk_job_pickled(args: tuple) -> tuple:
    lo, windows, profile, sources, budgets, threshold, batch, reuse = args
    return (lo, *_run_chunk(windows, profile, sources, budgets, threshold, batch, reuse))


def _run_chunk(windows, profile, sources, budgets, threshold, batch, reuse=True):
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
    preps = [
        [
            Prepared(
                profile, MethodSpec("as2d", budget=b, source=s, threshold=threshold, batch=batch)
            )
            for b in budgets
        ]
        for s in sources
    ]
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


def default_processes() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def sweep(
    windows: Sequence[WindowTrace],
    profile: CostProfile,
    sources: Sequence[str],
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    *,
    threshold: float | None = DEFAULT_THRESHOLD,
    batch: int = DEFAULT_BATCH,
    processes: int | None = None,
    reuse: bool = True,
) -> CatalogTimes:
    """Replay As²d for every window × source × budget; ``processes`` defaults to the CPUs
    this process may use (1 runs in-process)."""
    if not windows:
        raise UserError("no windows to sweep; check the trace file and the split")
    if not sources or not budgets:
        raise UserError("the catalog is empty; give at least one source and one budget")
    budgets = sorted(set(int(b) for b in budgets))
    if budgets[0] < 1:
        raise UserError(f"budgets must be >= 1, got {budgets[0]}")
    # Check every configuration's widths and sources once, in the parent: a missing width
    # or source fails here with one line, before any worker starts.
    for s in sources:
        for b in budgets:
            Prepared(
                profile, MethodSpec("as2d", budget=b, source=s, threshold=threshold, batch=batch)
            ).table(s)
    procs = processes if processes is not None else default_processes()
    W = len(windows)
    n_chunks = 1 if procs <= 1 else min(W, procs * 8)
    bounds = [(W * i // n_chunks, W * (i + 1) // n_chunks) for i in range(n_chunks)]
    bounds = [b for b in bounds if b[1] > b[0]]
    S, B = len(sources), len(budgets)
    times = np.zeros((W, S, B), dtype=np.int64)
    rounds = np.zeros((W, S, B), dtype=np.int64)
    used: list[list[str]] = [[] for _ in range(W)]
    simulated = [0]

    def collect(lo: int, t: np.ndarray, r: np.ndarray, u: list[list[str]], n: int) -> None:
        times[lo : lo + len(t)] = t
        rounds[lo : lo + len(r)] = r
        used[lo : lo + len(u)] = u
        simulated[0] += n

    if procs <= 1 or len(bounds) == 1:
        collect(
            0, *_run_chunk(list(windows), profile, list(sources), budgets, threshold, batch, reuse)
        )
    elif "fork" in mp.get_all_start_methods():
        _STATE.update(
            windows=list(windows),
            profile=profile,
            sources=list(sources),
            budgets=budgets,
            threshold=threshold,
            batch=batch,
            reuse=reuse,
        )
        try:
            with mp.get_context("fork").Pool(procs) as pool:
                for lo, *rest in pool.imap_unordered(_chunk_job, bounds):
                    collect(lo, *rest)
        finally:
            _STATE.clear()
    else:  # pragma: no cover - platforms without fork
        jobs = [
            (lo, list(windows[lo:hi]), profile, list(sources), budgets, threshold, batch, reuse)
            for lo, hi in bounds
        ]
        with mp.get_context("spawn").Pool(procs) as pool:
            for lo, *rest in pool.imap_unordered(_chunk_job_pickled, jobs):
                collect(lo, *rest)
    return CatalogTimes(
        window_ids=[w.id for w in windows],
        datasets=[w.dataset for w in windows],
        tokens=np.array([w.n_tokens for w in windows], dtype=np.int64),
        sources=list(sources),
        budgets=budgets,
        times=times,
        rounds=rounds,
        used=used,
        simulated_rounds=simulated[0],
    )
