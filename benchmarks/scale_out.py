"""Scale-out: the paper-size catalog sweep (688 windows × 3 sources × 24 budgets, synthetic
traces as replay_speed.py makes them) and a four-phone budget search, each run serially,
on the local process pool and on a local Ray instance with 2 workers, as ratios measured
in this one run; plus Ray's overhead per task and the sizes Ray moves once per run.

    python benchmarks/scale_out.py [--windows 688] [--search-windows 160] [--workers 2] [--farm]

Every configuration gives identical catalog times (checked here); only wall time differs.
``--farm`` adds a phone farm: two emulated phones (one model, own serials) calibrated with
the quick plan one after the other, then at once (one process per phone). Emulated phones
compute on this host's CPUs, so on a 2-core host the farm ratio is a floor: real phones
compute on their own.
"""

from __future__ import annotations

import native

native.limit_blas_threads()  # as the CLI: one BLAS thread here and in every worker

import argparse
import logging
import os
import pickle
import statistics
import time
from typing import Any

import numpy as np

from as2d_cli.execution import LocalPool
from as2d_cli.formats.trace import TraceSet
from as2d_cli.replay.selection import select_budget
from as2d_cli.replay.sweep import DEFAULT_BUDGETS, CatalogTimes, sweep
from as2d_cli.synthetic import synthetic_profile, synthetic_traces

SOURCES = ["qwen", "parakeet", "sensevoice"]
# Four phones' profiles: the paper's phones calibrated to different widest K (docs/phones.md).
PHONE_WIDTHS = {"k70": 25, "mi14": 21, "mi11pro": 17, "note9pro": 15}


def _noop(shared: Any, task: int) -> int:
    return task


def _same(a: CatalogTimes, b: CatalogTimes) -> bool:
    return bool(np.array_equal(a.times, b.times) and np.array_equal(a.rounds, b.rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--windows", type=int, default=688, help="sweep windows (paper: 688)")
    ap.add_argument(
        "--search-windows", type=int, default=160, help="windows of each phone's dev+val search"
    )
    ap.add_argument("--workers", type=int, default=2, help="pool processes and Ray CPUs")
    ap.add_argument("--tasks", type=int, default=400, help="no-op tasks for the overhead")
    ap.add_argument("--farm", action="store_true", help="also time a two-phone farm")
    args = ap.parse_args()
    if args.farm:
        farm()
    import ray

    from as2d_cli.execution.ray_executor import RayExecutor
    from as2d_cli.models.model_pair import DEFAULT_DIR
    from as2d_cli.tracegen.build import pair_files

    ts = synthetic_traces(drafter=False)
    windows = list(ts.windows)[: args.windows]
    prof = synthetic_profile()
    print(
        f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; ray {ray.__version__}"
    )
    t0 = time.perf_counter()
    ex_ray = RayExecutor("local", args.workers)
    ray_start = time.perf_counter() - t0
    pool = LocalPool(args.workers)
    serial = LocalPool(1)
    print(
        f"ray.init of a local instance ({args.workers} CPUs): {ray_start:.1f} s (once per command)"
    )

    # Sizes Ray moves once per run (ray.put), not per task.
    catalog_bytes = len(pickle.dumps(windows, protocol=5)) + len(pickle.dumps(prof, protocol=5))
    pair_bytes = sum(len(v) for v in pair_files(DEFAULT_DIR).values())
    print(
        f"object store, once per run: {len(windows)} windows' traces + profile "
        f"{catalog_bytes / 1e6:.1f} MB (sweep); the bundled pair's files {pair_bytes / 1e6:.1f} MB "
        "(traces build)"
    )

    executors = {"serial": serial, "local pool": pool, "local ray": ex_ray}
    _time_sweep(windows, prof, executors)
    _time_search(args.search_windows, executors)
    _time_overhead(args.tasks, pool, ex_ray, min(len(windows), args.workers * 8))
    ex_ray.close()


def _ratios(wall: dict[str, float]) -> str:
    return (
        f"  ratios: serial/pool {wall['serial'] / wall['local pool']:.2f}×, "
        f"serial/ray {wall['serial'] / wall['local ray']:.2f}×, "
        f"ray/pool {wall['local ray'] / wall['local pool']:.2f}×"
    )


def _time_sweep(windows: list, prof: Any, executors: dict[str, Any]) -> None:
    """1. The paper-size sweep on each executor: its wall time and identical results."""
    wall: dict[str, float] = {}
    cats: dict[str, CatalogTimes] = {}
    for name, ex in executors.items():
        t0 = time.perf_counter()
        cats[name] = sweep(windows, prof, SOURCES, DEFAULT_BUDGETS, executor=ex)
        wall[name] = time.perf_counter() - t0
    episodes = len(windows) * len(SOURCES) * len(DEFAULT_BUDGETS)
    same = all(_same(cats["serial"], c) for c in cats.values())
    print(
        f"sweep {len(windows)} × {len(SOURCES)} × {len(DEFAULT_BUDGETS)} = {episodes} episodes: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items())
        + f"; identical times: {same}"
    )
    print(_ratios(wall) + " (wall of the same sweep)")


def _time_search(search_windows: int, executors: dict[str, Any]) -> None:
    """2. A four-phone search: select-budget (dev ranking, val retention) per phone profile."""
    half = search_windows / 2 / 688
    dev = synthetic_traces(seed=11, scale=half, drafter=False, split="dev")
    val = synthetic_traces(seed=12, scale=half, drafter=False, split="val")
    search = dev.windows + val.windows
    sub = TraceSet(dev.provenance, dev.eos_id, dev.sources, dev.default_source, search)
    swall: dict[str, float] = {}
    picks: dict[str, list[tuple[str, int]]] = {}
    for name, ex in executors.items():
        t0 = time.perf_counter()
        picks[name] = []
        for _, widest in PHONE_WIDTHS.items():
            sel = select_budget(sub, synthetic_profile(widest), executor=ex)
            picks[name].append((sel.source, sel.budget))
        swall[name] = time.perf_counter() - t0
    print(
        f"four-phone search ({len(search)} dev+val windows, {', '.join(PHONE_WIDTHS)}): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in swall.items())
        + f"; same choices: {len({tuple(p) for p in picks.values()}) == 1}"
    )
    print(_ratios(swall))


def _time_overhead(tasks: int, pool: Any, ex_ray: Any, chunks: int) -> None:
    """3. Overhead per task: no-op tasks, so all of the time is the executor's."""
    per: dict[str, list[float]] = {"local pool": [], "local ray": []}
    for _ in range(3):
        for name, ex in (("local pool", pool), ("local ray", ex_ray)):
            t0 = time.perf_counter()
            list(ex.map(_noop, None, list(range(tasks))))
            per[name].append((time.perf_counter() - t0) / tasks * 1e3)
    med = {k: statistics.median(v) for k, v in per.items()}
    print(
        f"overhead per task ({tasks} no-op tasks, median of 3, incl. pool start): "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in med.items())
        + f"; ray/pool {med['local ray'] / med['local pool']:.1f}×"
        + f"; sweep tasks: {chunks} chunks"
    )


def farm() -> None:
    """Two emulated phones calibrated (quick plan) one after the other, then as a farm."""
    import tempfile
    from pathlib import Path

    from as2d_cli.calibration.farm import FarmOptions, calibrate_farm
    from as2d_cli.execution.farm import farm_table
    from device_agents.adbserver import PrivateAdbServer
    from device_agents.emulator.python import enable_python
    from device_agents.emulator.session import EmulatorSession
    from device_agents.measurement import MeasureOptions

    server = PrivateAdbServer().start()
    sessions = []
    try:
        for i in (1, 2):
            s = EmulatorSession(private_server=False, adb_port=server.port, serial=f"farm{i}")
            sessions.append(s.start())
            enable_python(s.phone)
        serials = [s.serial for s in sessions]
        wall = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, ex in (("one after the other", LocalPool(1)), ("farm", LocalPool(2))):
                opts = FarmOptions(
                    out_dir=str(Path(tmp) / name.replace(" ", "-")),
                    quick=True,
                    measure=MeasureOptions(rest_s=0.0, interval_s=0.05, settle_s=0.0),
                    adb_port=server.port,
                )
                t0 = time.perf_counter()
                outcomes = calibrate_farm(serials, opts, ex)
                wall[name] = time.perf_counter() - t0
                print(farm_table(outcomes))
                if not all(o.ok for o in outcomes):
                    raise SystemExit("a farm phone failed; see the table above")
        print(
            "farm of 2 emulated k70 (quick plan): "
            + ", ".join(f"{k} {v:.0f} s" for k, v in wall.items())
            + f"; ratio {wall['one after the other'] / wall['farm']:.2f}×"
        )
    finally:
        for s in sessions:
            s.stop()
        server.stop()


if __name__ == "__main__":
    logging.getLogger("ray").setLevel(logging.ERROR)
    main()
