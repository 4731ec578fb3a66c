"""The local process pool: the default executor (one worker per usable CPU)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from as2d_cli.errors import UserError
from as2d_cli.execution.base import Batch, Executor, TaskFn
from native import BLAS_THREAD_VARS

# The shared data of the running map, set in the parent before forking (workers inherit
# it copy-on-write, nothing is pickled) or by the spawn initializer (pickled once per worker).
_SHARED: Any = None


def default_processes() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


# numpy's BLAS thread count changes results (multi-threaded sums round differently; the
# traces' log-mel features do): every worker runs one BLAS thread, as the CLI does
# (native.limit_blas_threads) and as Ray gives each one-CPU task (OMP_NUM_THREADS=1).


@contextmanager
def one_blas_thread_env() -> Iterator[None]:
    """While starting fresh interpreters: BLAS variables unset in this process read 1."""
    unset = [v for v in BLAS_THREAD_VARS if v not in os.environ]
    os.environ.update({v: "1" for v in unset})
    try:
        yield
    finally:
        for v in unset:
            os.environ.pop(v, None)


# Ctrl-C reaches every process of the terminal's process group. Workers ignore it: the
# parent alone stops the map (terminating its workers), so an interruption is one line
# from the parent instead of a traceback from every worker.


def _hold_ctrl_c(hold: bool, spawn: bool) -> Callable[[], None]:
    """While workers start, a Ctrl-C is held, not lost and not raised midway. SIGINT is
    blocked in this thread, so forked and spawned workers start with it blocked (pending in
    them until :func:`_quiet` ignores it); and in the main thread Python's handler only
    notes it, for another thread of this process may take the signal, and raising
    KeyboardInterrupt from wherever the start then is (a fork hook swallows it; a worker
    reading its start-up data prints a traceback) would lose it. The returned function ends
    the hold: the handler back, SIGINT unblocked, and a held Ctrl-C raised again there."""
    if not hold:
        return lambda: None
    if spawn:  # starting it later would unblock SIGINT here before the workers are up
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    held: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if main else None
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def release() -> None:
        if main:
            signal.signal(signal.SIGINT, signal.SIG_DFL if old is None else old)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending one: raised now
        if held:
            signal.raise_signal(signal.SIGINT)  # the one another thread took, to its own handler

    return release


def _quiet() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Started with SIGINT blocked (the parent's hold): a Ctrl-C pending meanwhile is dropped here.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _init(shared: Any, ctrl_c: bool = False) -> None:
    global _SHARED
    if not ctrl_c:
        _quiet()
    _SHARED = shared


def _call(job: tuple[TaskFn, Any]) -> Any:
    fn, task = job
    return fn(_SHARED, task)


class LocalPool(Executor):
    """``processes`` workers on this host (default: every usable CPU); one worker, or one
    task, runs in this process."""

    def __init__(self, processes: int | None = None) -> None:
        if processes is not None and processes < 1:
            raise UserError(f"--processes {processes}: give at least 1")
        self._processes = processes or default_processes()

    @property
    def workers(self) -> int:
        return self._processes

    def describe(self) -> str:
        n = self._processes
        return f"{n} local process{'es' if n != 1 else ''}"

    def _map(self, batch: Batch) -> Iterator[Any]:
        global _SHARED
        fn, shared, tasks = batch.fn, batch.shared, batch.tasks
        n = min(self._processes, len(tasks))
        if n <= 1:
            for t in tasks:
                yield fn(shared, t)
            return
        forked = batch.fork and "fork" in mp.get_all_start_methods()
        quiet = not batch.ctrl_c
        release = _hold_ctrl_c(quiet, spawn=not forked)
        try:
            if forked:
                _SHARED = shared
                pool = mp.get_context("fork").Pool(n, initializer=_quiet if quiet else None)
            else:
                with one_blas_thread_env():
                    pool = mp.get_context("spawn").Pool(
                        n, initializer=_init, initargs=(shared, batch.ctrl_c)
                    )
        except BaseException:
            release()
            if forked:
                _SHARED = None
            raise
        finished = False
        try:
            release()  # a Ctrl-C while the workers started is raised here: they are stopped
            # imap keeps task order; chunksize 1 keeps every worker busy to the end.
            yield from pool.imap(_call, [(fn, t) for t in tasks])
            finished = True
        finally:
            # Workers that finished exit on their own; only an abandoned map kills them.
            if finished:
                pool.close()
            else:
                pool.terminate()
            pool.join()
            if forked:
                _SHARED = None
