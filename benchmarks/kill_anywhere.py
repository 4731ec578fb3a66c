"""Kill anywhere, many times: `as2d traces build`, `as2d stream`, `as2d energy` (against
emulated phones) and `as2d eval --native` started as real processes and stopped with
SIGINT or SIGKILL at points drawn from a seeded generator — far more points than the
test suite's tests/test_kill_anywhere.py, whose harnesses (and checks) this loops — then
resumed or checked as the tests do. Each command's rounds are independent; a check that
fails is counted and printed, and the script goes on.

    python benchmarks/kill_anywhere.py [--rounds 4] [--seed 45] [--only traces,stream,energy,native]

Prints, per command, the rounds, how every stopped run ended (signal, point and exit code;
"unheeded" when a Ctrl-C reached a command that still ran to its end) and the failed
checks; the exit code is 1 when any check failed. About 30 s per round on 2 cores
(traces ~15 s, stream ~10 s, energy ~10 s, native ~20 s; streams and energy runs go in
parallel).
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import test_kill_anywhere as kill  # noqa: E402  (the harnesses and checks of the tests)

SIGNALS = [signal.SIGINT, signal.SIGKILL]


def _traces(rng: random.Random, tmp: Path, _phones: Any) -> list[str]:
    stops: list[tuple[signal.Signals, int | None, float]] = [
        (signal.SIGKILL, 0, rng.uniform(0.0, 1.0))  # the pool starting (Ctrl-C: see the README)
    ]
    for _ in range(rng.randint(2, 6)):
        n = None if rng.random() < 0.15 else rng.randint(1, 3)
        stops.append((rng.choice(SIGNALS), n, rng.uniform(0.0, 1.2)))
    summary = kill.traces_until_done(tmp, stops, group=rng.random() < 0.75)
    return list(summary["outcomes"])


def _stream(rng: random.Random, tmp: Path, _phones: Any) -> list[str]:
    names = ["INCOMPLETE", "blocks.jsonl", "blocks.csv", "table.md", "stream.png"]
    stops = []
    for _ in range(4):
        name = rng.choice(names)
        n = rng.randint(1, 6) if name == "blocks.jsonl" else 1
        stops.append((rng.choice(SIGNALS), name, n, rng.uniform(0.0, 1.0)))
    how = kill.streams_stopped(tmp, stops, group=rng.random() < 0.75)
    return [f"{s[0].name}@{s[1]}≥{s[2]}+{s[3]:.2f}s: {h}" for s, h in zip(stops, how)]


def _energy(rng: random.Random, tmp: Path, phones: Callable[..., Any]) -> list[str]:
    points = ["folder", "plan.json", "phone_run.json", "launched", "episode.tsv", "table.md"]
    stops = [(rng.choice(SIGNALS), rng.choice(points), rng.uniform(0.0, 2.5)) for _ in range(3)]
    made = [kill.energy_phone(phones) for _ in stops]
    how = kill.energies_stopped(tmp, made, stops)  # the phones stop with the benchmark
    return [f"{s[0].name}@{s[1]}+{s[2]:.2f}s: {h}" for s, h in zip(stops, how)]


def _native(rng: random.Random, tmp: Path, _phones: Any) -> list[str]:
    stops = [
        (rng.choice(SIGNALS), rng.randint(1, 5), rng.uniform(0.0, 0.5))
        for _ in range(rng.randint(1, 4))
    ]
    summary = kill.native_until_done(tmp, stops)
    return list(summary["outcomes"])


def _calibrate(rng, tmp: Path, phones):  # type: ignore[no-untyped-def]
    """Calibration steps killed at random points (the slow test that drives them)."""
    import subprocess

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-m",
            "slow",
            "-p",
            "no:cacheprovider",
            "tests/test_measurement_conditions.py",
            "-k",
            "random_points",
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise AssertionError(res.stdout.strip().splitlines()[-1] if res.stdout else res.stderr)
    yield "calibrate: every step committed once"


COMMANDS = {
    "traces": _traces,
    "stream": _stream,
    "energy": _energy,
    "native": _native,
    "calibrate": _calibrate,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per command")
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--only", default=",".join(COMMANDS), help="commands, comma-separated")
    a = ap.parse_args()
    only = [c.strip() for c in a.only.split(",") if c.strip()]
    bad = [c for c in only if c not in COMMANDS]
    if bad:
        ap.error(f"unknown command(s) {', '.join(bad)}; choose from {', '.join(COMMANDS)}")
    rng = random.Random(a.seed)
    results: dict[str, collections.Counter] = {}
    failures: list[str] = []
    with kill.emulated_phones() as phones:
        for name in only:
            count: collections.Counter = collections.Counter()
            t0 = time.monotonic()
            for r in range(a.rounds):
                with tempfile.TemporaryDirectory(prefix=f"kill-{name}-") as tmp:
                    try:
                        for outcome in COMMANDS[name](rng, Path(tmp), phones):
                            count[_kind(outcome)] += 1
                        count["rounds passed"] += 1
                    except Exception as exc:  # noqa: BLE001 - a failed check: count it, go on
                        count["rounds FAILED"] += 1
                        line = traceback.format_exception_only(type(exc), exc)[-1].strip()
                        failures.append(f"{name} round {r}: {line[:400]}")
                        print(f"  {name} round {r} failed: {line}", file=sys.stderr)
            results[name] = count
            print(f"{name}: {a.rounds} round(s) in {time.monotonic() - t0:.0f} s", flush=True)
    print()
    for name, count in results.items():
        print(f"## {name}")
        for kind, n in sorted(count.items()):
            print(f"  {n:4d}  {kind}")
    if failures:
        print("\nfailed checks:")
        for f in failures:
            print(f"  {f}")
    return 1 if failures else 0


def _kind(outcome: str) -> str:
    """An outcome without its point's numbers and paths, to count alike ones together:
    `SIGKILL: exit -9`, `SIGINT: interrupted`, `SIGKILL: collected`, …"""
    sig = outcome.split("@", 1)[0] if "@" in outcome else "no signal"
    if "ended first" in outcome:
        return f"{sig}: ended before its point"
    if "unheeded" in outcome:
        return f"{sig}: unheeded, ran to its end"
    if ": " in outcome:
        tail = outcome.split(": ", 1)[1]
        tail = re.sub(r"/\S+", "…", tail)  # folders and run directories
        tail = re.sub(r" \(\d+ blocks\)", "", tail)[:110]
    else:
        tail = "exit " + outcome.rsplit("→", 1)[-1]
    return f"{sig}: {tail}"


if __name__ == "__main__":
    sys.exit(main())
