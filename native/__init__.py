"""The native runner: real models, real time, the same engine as the replay.

``python -m native.runner`` speaks JSON lines (commands in, events out); see
docs/runner-protocol.md. :mod:`as2d_cli.launch.host` launches it locally or on a device.
Sustained streaming (paper D.6.2, docs/streaming.md) is ``stream_*``: :mod:`stream_clock`
(real or virtual time), :mod:`stream_pacer` (the blocks, their arrival and context epochs),
:mod:`stream_source` (the resident source worker's epochs), :mod:`stream_loop` (the serial
target path over every block).
"""

import os

# One BLAS thread, set by every entry point before anything imports numpy. numpy's OpenBLAS otherwise starts a
# worker per core, and after each BLAS call (the log-mel of every request and every CTC
# chunk) the worker busy-waits on whichever core is free: with the other core busy (the
# producer) it time-shares a core with the target — measured 1.9x slower target steps,
# and 1.10x with this setting. ONNX Runtime sets its own thread counts per session.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_blas_threads() -> None:
    """One BLAS thread for numpy in this process (unless the environment says otherwise).
    Call it before numpy is first imported: the runner's, the CLI's and the benchmarks'
    entry points do."""
    for var in BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")
