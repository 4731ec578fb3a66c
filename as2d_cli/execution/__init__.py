"""Where fanned-out work runs: one executor interface (:mod:`.base`), the local process
pool (:mod:`.local`, the default) and Ray (:mod:`.ray_executor`, imported only for
``--ray``). Trace building, catalog sweeps (selection, oracle) and phone farms use it."""

from __future__ import annotations

from as2d_cli.execution.base import Executor, TaskFn
from as2d_cli.execution.local import LocalPool, default_processes


def open_executor(
    ray: str | None = None,
    processes: int | None = None,
    resources: dict[str, float] | None = None,
) -> Executor:
    """The executor a command's ``--ray`` / ``--processes`` ask for; ``resources``: the
    custom resources of a ``--ray local`` node (its phones)."""
    if ray is None:
        return LocalPool(processes)
    from as2d_cli.execution.ray_executor import RayExecutor

    return RayExecutor(ray, processes, resources=resources)


__all__ = ["Executor", "LocalPool", "TaskFn", "default_processes", "open_executor"]
