"""The executor seam: ``map(fn, shared, tasks)`` runs ``fn(shared, task)`` for every task
and yields the results in task order.

``fn`` is a module-level function (workers import it by name) and a pure function of its
arguments, so where it runs — this process, a local worker, a Ray node — cannot change a
result, and a task re-run after a lost worker gives the same answer. ``shared`` is what
every task reads (traces, a profile, model files): an executor moves it to each worker
once, never once per task. Results come back in task order, so callers write them
incrementally in a fixed order whatever the number of workers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

TaskFn = Callable[[Any, Any], Any]  # (shared, task) -> result


@dataclass(frozen=True)
class Batch:
    """One :meth:`Executor.map` call, as an executor runs it (the tasks listed)."""

    fn: TaskFn
    shared: Any
    tasks: list[Any]
    fork: bool
    resources: Sequence[dict[str, float]] | None
    ctrl_c: bool = False  # workers get Ctrl-C themselves (see Executor.map)


class Executor(ABC):
    """Where fanned-out work runs. Use it as a context manager: ``close`` releases the
    workers (and a Ray instance the executor started)."""

    #: workers' filesystems may differ from this host's: ship files by value, not by path
    remote: bool = False

    @property
    @abstractmethod
    def workers(self) -> int:
        """How many tasks can run at once."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the user: where the work runs."""

    def map(
        self,
        fn: TaskFn,
        shared: Any,
        tasks: Sequence[Any],
        *,
        fork: bool = True,
        resources: Sequence[dict[str, float]] | None = None,
        ctrl_c: bool = False,
    ) -> Iterator[Any]:
        """``fn(shared, task)`` for each task, yielded in task order. ``fork=False``: the
        local pool must start fresh interpreters (work that holds native sessions).
        ``resources[i]``: custom resources task i needs on a cluster (a phone:
        ``{"phone:SERIAL": 1}``); the local pool has one host and ignores them.

        Ctrl-C stops the map from this process: local workers ignore it and are ended, so
        an interruption is the caller's one line, not a traceback per worker. ``ctrl_c``:
        local workers get it too, for work that must stop what it started itself (a
        phone's runner) before it ends."""
        yield from self._map(Batch(fn, shared, list(tasks), fork, resources, ctrl_c))

    @abstractmethod
    def _map(self, batch: Batch) -> Iterator[Any]:
        """:meth:`map` on this executor's workers."""

    def has_resource(self, name: str) -> bool:
        """Whether some worker offers the custom resource ``name`` (one host: always)."""
        return True

    def close(self) -> None:  # noqa: B027 - a hook: most executors have nothing to release
        """Release the workers."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
