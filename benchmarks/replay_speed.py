"""Replay speed: simulated rounds per second, and the wall time of the paper-size catalog
sweep (688 windows × 3 sources × 24 budgets = 49,536 As²d episodes) on synthetic traces
of the paper's size (~137 tokens per window). Goal: under 60 s on a 2-core machine,
using both cores.

    python benchmarks/replay_speed.py [--processes N] [--windows 688]

Everything is measured in this one run; nothing is compared with a stored figure.
"""

from __future__ import annotations

import argparse
import os
import time

from as2d_cli.engine.methods import MethodSpec
from as2d_cli.replay.driver import Prepared, replay_window
from as2d_cli.replay.sweep import DEFAULT_BUDGETS, default_processes, sweep
from as2d_cli.synthetic import synthetic_profile, synthetic_traces

GOAL_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--processes", type=int, default=None, help="worker processes (default: usable CPUs)"
    )
    ap.add_argument(
        "--windows", type=int, default=688, help="windows to sweep (default: the paper's 688)"
    )
    args = ap.parse_args()

    t0 = time.perf_counter()
    ts = synthetic_traces(drafter=False)
    windows = list(ts.windows)[: args.windows]
    prof = synthetic_profile()
    tokens = sum(w.n_tokens for w in windows)
    print(
        f"traces: {len(windows)} windows, {tokens} tokens ({tokens / len(windows):.1f}/window), "
        f"made in {time.perf_counter() - t0:.1f} s"
    )

    # 1. Single-process simulated rounds per second (As²d, qwen, budget 7, no interval records).
    prep = Prepared(prof, MethodSpec("as2d", budget=7, source="qwen"))
    t0 = time.perf_counter()
    rounds = sum(replay_window(w, prep, detail=False).rounds for w in windows)
    dt = time.perf_counter() - t0
    print(
        f"one process, As2d qwen/budget 7: {rounds} rounds in {dt:.2f} s = {rounds / dt:,.0f} simulated rounds/s"
    )

    # 2. The full catalog sweep over processes.
    procs = args.processes if args.processes is not None else default_processes()
    sources = ["qwen", "parakeet", "sensevoice"]
    t0 = time.perf_counter()
    cat = sweep(windows, prof, sources, DEFAULT_BUDGETS, processes=procs)
    wall = time.perf_counter() - t0
    episodes = len(windows) * len(sources) * len(DEFAULT_BUDGETS)
    print(
        f"sweep: {len(windows)} windows × {len(sources)} sources × {len(DEFAULT_BUDGETS)} budgets = {episodes} episodes, "
        f"{cat.n_rounds:,} rounds ({cat.simulated_rounds:,} simulated, the rest reused from saturated budgets), "
        f"{procs} processes: {wall:.1f} s wall ({cat.simulated_rounds / wall:,.0f} simulated rounds/s overall)"
    )
    scaled = wall * 688 / len(windows)
    verdict = "MEETS" if scaled < GOAL_S else "MISSES"
    print(
        f"goal: 688-window sweep under {GOAL_S:.0f} s — {verdict} ({scaled:.1f} s"
        f"{' scaled from ' + str(len(windows)) + ' windows' if len(windows) != 688 else ''}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    best = max(
        (
            (s, b, float(cat.pooled_tps()[i, j]))
            for i, s in enumerate(cat.sources)
            for j, b in enumerate(cat.budgets)
        ),
        key=lambda x: x[2],
    )
    print(
        f"(best pooled configuration on these synthetic traces: {best[0]}/budget {best[1]} at {best[2]:.2f} TPS)"
    )


if __name__ == "__main__":
    main()
