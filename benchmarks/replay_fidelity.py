"""Does the replay predict the As²d / target-only ratio the device gives? Rounds of
`as2d calibrate --phone local` then `as2d eval --phone local --native --windows N` on the
profile just measured, each round in its own folder.

    python benchmarks/replay_fidelity.py [--rounds 3] [--windows 20] [--out DIR] [--quick]

Prints, per round, As²d / target-only as the replay predicts it and as the native runs
gave it (with the per-pass range), replay ÷ native, and the five factors that error is the
product of (docs/evaluation.md, "The ratio both give"); then the median round's replay ÷
native. Goal: within 5 % (0.95–1.05) in the median round on a quiet host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from as2d_cli.evaluate.replay_gap import RATIO_FACTORS  # noqa: E402

AS2D = [sys.executable, "-m", "as2d_cli.cli.main"]


def _run(args: list[str], log: Path) -> None:
    with log.open("w") as f:
        code = subprocess.call(AS2D + args, stdout=f, stderr=subprocess.STDOUT)
    if code != 0:
        raise SystemExit(f"error: `as2d {' '.join(args)}` failed ({code}); see {log}")


def one_round(folder: Path, windows: int, quick: bool) -> dict:
    """Calibrate, evaluate natively on that profile, return the native summary's ratio."""
    cal, res = folder / "cal", folder / "res"
    _run(
        ["calibrate", "--phone", "local", "--out", str(cal)] + (["--quick"] if quick else []),
        folder / "calibrate.log",
    )
    profile = next(cal.glob("*.profile.yaml"))
    _run(
        [
            "eval", "--phone", "local", "--native", "--windows", str(windows),
            "--profile", str(profile), "--calibrations", str(cal), "--results", str(res),
        ],
        folder / "eval.log",
    )  # fmt: skip
    doc = json.loads(next(res.glob("*/native.json")).read_text())
    ratio = doc["results"]["summary"].get("as2d_ratio")
    if not ratio:
        raise SystemExit(f"error: {res} has no As²d / target-only ratio; see {folder / 'eval.log'}")
    return ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="calibrate --quick")
    ap.add_argument(
        "--out", type=Path, default=Path(f"replay-fidelity-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.rounds < 1 or a.windows < 1:
        print("error: --rounds and --windows must be at least 1", file=sys.stderr)
        return 2
    if a.out.exists():
        print(
            f"error: {a.out} exists (earlier rounds are never overwritten); name another folder",
            file=sys.stderr,
        )
        return 2
    rounds = []
    for r in range(a.rounds):
        folder = a.out / f"round{r + 1}"
        folder.mkdir(parents=True)
        t0 = time.time()
        c = one_round(folder, a.windows, a.quick)
        rounds.append(c)
        lo, hi = c["native_range"]
        print(
            f"round {r + 1} ({time.time() - t0:.0f} s): replay {c['replay']:.3f}×, native "
            f"{c['native']:.3f}× (passes {lo:.3f}–{hi:.3f}×); replay ÷ native {c['replay_over_native']:.3f}",
            flush=True,
        )
        f = c.get("factors")
        if f:
            print(
                "  factors (effect on the ratio): "
                + ", ".join(
                    f"{k} {f['factors'][k]:.3f} ({100 * (f['factors'][k] - 1):+.1f} %)"
                    for k, _ in RATIO_FACTORS
                ),
                flush=True,
            )
    med = statistics.median(c["replay_over_native"] for c in rounds)
    print(
        f"median round: replay ÷ native {med:.3f} ({'within' if abs(med - 1) <= 0.05 else 'outside'} 5 %)"
    )
    if a.json:
        a.json.write_text(
            json.dumps({"rounds": rounds, "median_replay_over_native": med}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
