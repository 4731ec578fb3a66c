"""How steady is this machine's speed? The noise floor of replay-vs-native agreement.

A frozen profile can agree with native runs only as well as the device keeps its speed
between calibration and evaluation. This runs the same target-only request (a development
window) back to back for ``--seconds`` on the target core and prints the pooled TPS of
every ``--block`` seconds, then the spread between blocks: the signed TPS difference
between consecutive blocks and between the first and every later block.

    python benchmarks/host_drift.py --seconds 180 --block 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--block", type=float, default=20.0, help="seconds per block")
    ap.add_argument(
        "--window", default=None, help="a corpus window id (default: the calibration window)"
    )
    a = ap.parse_args()

    import native

    native.limit_blas_threads()  # as the runner does, before numpy is imported
    from as2d_cli.calibration.run import calibration_windows
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.launch.host import default_cores
    from native.request import load_models, run_request

    wid = a.window or calibration_windows()[0]
    audio = load_corpus().get(wid).load_audio()
    models = load_models()
    tc, _ = default_cores()
    spec = {"method": "target-only", "max_tokens": None, "events": False}
    run_request(models, audio, spec, target_cores=tc)  # warm-up
    blocks: list[float] = []
    end = time.time() + a.seconds
    while time.time() < end:
        tokens, secs, t0 = 0, 0.0, time.time()
        while time.time() - t0 < a.block:
            r = run_request(models, audio, spec, target_cores=tc)
            tokens += r["n_tokens"]
            secs += r["time_ms"] / 1e3
        blocks.append(tokens / secs)
        print(
            f"{time.strftime('%H:%M:%S')}  block {len(blocks):2d}: {blocks[-1]:8.1f} TPS",
            flush=True,
        )
    if len(blocks) < 2:
        print("too few blocks; raise --seconds")
        return 1
    step = [100 * (b / a_ - 1) for a_, b in zip(blocks, blocks[1:])]
    first = [100 * (b / blocks[0] - 1) for b in blocks[1:]]
    print(
        f"{wid}: {len(blocks)} blocks of {a.block:.0f} s, TPS {min(blocks):.1f}–{max(blocks):.1f} "
        f"(max/min {max(blocks) / min(blocks):.3f})"
    )
    print(
        f"consecutive blocks: mean |change| {statistics.mean(abs(x) for x in step):.2f} %, "
        f"largest {max(step, key=abs):+.2f} %"
    )
    print(
        f"against the first block: mean |change| {statistics.mean(abs(x) for x in first):.2f} %, "
        f"largest {max(first, key=abs):+.2f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
