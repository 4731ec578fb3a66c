"""Does work on the producer's core slow the target? The price of overlap on this machine.

As²d overlaps the source (producer core) with the target's verification (target core);
it pays only if the target keeps its speed while the other core computes. This runs the
same target-only request through the real local runner back to back for ``--seconds``,
with a busy process pinned to the producer core that is stopped and continued on
alternate requests (paired, so the machine's own drift cancels), and prints the median
milliseconds per token with that core idle and busy, and their ratio.

``--blas-threads`` sets the runner's OPENBLAS_NUM_THREADS (the runner's default is 1):
with more, numpy's OpenBLAS worker busy-waits after every log-mel on the free core, and
time-shares the target's core as soon as the other one is busy (2026-12-01, 2-core AMD
EPYC VM: ratio 1.9 with 2 BLAS threads, 1.10 with 1).

    python benchmarks/core_interference.py --seconds 60 --load matmul
    python benchmarks/core_interference.py --blas-threads 2
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LOADS = {
    # compute-bound, cache-resident: shares nothing with the target but the core
    "matmul": "import numpy as np\na = np.random.rand(300, 300)\nwhile True: a @ a",
    # memory-bound: streams 64 MB, competing for the memory system and the shared cache
    "stream": "import numpy as np\na = np.random.rand(8_000_000)\nb = np.empty_like(a)\nwhile True: np.copyto(b, a)",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--load", choices=sorted(LOADS), default="matmul")
    ap.add_argument("--window", default="test-read-005", help="a corpus window id")
    ap.add_argument(
        "--blas-threads",
        default=None,
        help="the runner's OPENBLAS_NUM_THREADS (default: the runner's, 1)",
    )
    a = ap.parse_args()

    from as2d_cli.launch.host import LocalRunner, default_cores

    tc, pc = default_cores()
    if pc is None:
        print("needs two CPUs (target core and producer core)", file=sys.stderr)
        return 2
    env = {"OPENBLAS_NUM_THREADS": a.blas_threads} if a.blas_threads else None
    runner = LocalRunner(env=env)
    hello = runner.call({"op": "hello"})
    runner.call({"op": "load", "target_cores": tc, "producer_cores": pc})
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os\nos.sched_setaffinity(0, {set(pc)!r})\n" + LOADS[a.load],
        ],
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )
    idle: list[float] = []
    loaded: list[float] = []
    try:
        time.sleep(2.0)  # the load process has started computing
        req = {"op": "decode", "window": a.window, "method": "target-only", "events": False}
        runner.call(req)  # warm-up
        end = time.time() + a.seconds
        i = 0
        while time.time() < end:
            on = i % 2 == 1
            busy.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            time.sleep(0.05)  # let the change settle
            res = runner.call(req)
            (loaded if on else idle).append(res["time_ms"] / res["n_tokens"])
            i += 1
    finally:
        busy.kill()
        runner.close()
    if not idle or not loaded:
        print("no requests finished; raise --seconds", file=sys.stderr)
        return 1
    mi, mb = statistics.median(idle), statistics.median(loaded)
    print(
        f"runner OPENBLAS_NUM_THREADS={hello.get('blas_threads')}  load {a.load} on core(s) {pc}  "
        f"target on {tc}  window {a.window}"
    )
    print(f"requests: {len(idle)} with the producer core idle, {len(loaded)} busy")
    print(f"median ms/token: idle {mi:.3f}  busy {mb:.3f}  ratio busy/idle {mb / mi:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
