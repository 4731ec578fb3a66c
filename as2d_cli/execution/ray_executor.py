"""Ray as the executor: ``--ray ADDRESS`` joins a running cluster, ``--ray local`` starts
a private Ray instance on this host. Ray is imported here only, and only when asked for.

The shared data is put in Ray's object store once per map (``ray.put``); each task gets a
reference to it and a worker deserializes it once, on its first task of that map. Tasks
are retried by Ray when a worker or node is lost (``max_retries``); a task is a pure
function of its inputs, so a retry gives the result the lost attempt would have, and
results are collected by task index, never appended twice.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from as2d_cli.errors import As2dError, UserError
from as2d_cli.execution.base import Batch, Executor, TaskFn

INSTALL_HINT = "pip install -e '.[cluster]'"
MAX_RETRIES = 3  # attempts after a lost worker or node before the run fails
IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: keeps workers busy, bounds driver memory


class ClusterError(As2dError):
    """The Ray cluster failed a task for good (workers lost more than MAX_RETRIES times)."""


def import_ray() -> Any:
    """Ray, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed; run {INSTALL_HINT}") from None
    return ray


CONNECT_TIMEOUT_S = 10.0


@contextmanager
def _stderr_to(file: IO[bytes]) -> Iterator[None]:
    """File descriptor 2 (where Ray's C++ core writes) goes to ``file`` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _reachable(address: str) -> None:
    """Refuse an address nothing listens on, in seconds (``ray.init`` retries for minutes)."""
    import socket

    hostport = address.removeprefix("ray://")
    if address == "auto" or ":" not in hostport:
        return  # Ray resolves these itself
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise UserError(
            f"--ray {address}: nothing answers there ({exc}); start the cluster's head with "
            "`ray start --head` and pass its address, or pass --ray local"
        ) from None


# One worker's copy of the running map's shared data: (object ref hex, value).
_SHARED: dict[str, Any] = {}


def as2d_task(fn: TaskFn, box: list[Any], task: Any) -> Any:
    """Run one task on a Ray worker. ``box`` holds the shared data's reference (boxed so
    Ray does not resolve and deserialize it again for every task)."""
    ref = box[0]
    if _SHARED.get("key") != ref.hex():
        import ray

        _SHARED.clear()
        _SHARED.update(key=ref.hex(), value=ray.get(ref))
    return fn(_SHARED["value"], task)


class RayExecutor(Executor):
    """Tasks on a Ray cluster. ``address`` is ``local`` (start Ray here with ``processes``
    CPUs, default every usable one, and the custom ``resources`` of this node, e.g. its
    phones) or a cluster address (``HOST:6379``, ``ray://HOST:10001``); when this process
    already joined a cluster (``ray.init`` by the caller) that one is used."""

    remote = True

    def __init__(
        self,
        address: str,
        processes: int | None = None,
        max_retries: int = MAX_RETRIES,
        resources: dict[str, float] | None = None,
    ) -> None:
        from as2d_cli.execution.local import default_processes

        ray = import_ray()
        self._ray = ray
        self._max_retries = max_retries
        self._owned = False
        self.address = address
        if not ray.is_initialized():
            if address == "local":
                ray.init(
                    num_cpus=processes or default_processes(),
                    resources=resources or None,
                    include_dashboard=False,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                )
            else:
                if processes is not None:
                    raise UserError(
                        f"--processes with --ray {address}: the cluster's CPUs set the workers; "
                        "drop --processes (it sizes only --ray local)"
                    )
                _reachable(address)
                # Ray's core logs every failed attempt to fd 2 for ~20 s: kept aside, so a
                # failure is one line (and a token problem says so).
                with tempfile.TemporaryFile() as log, _stderr_to(log):
                    try:
                        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
                        failure = None
                    except (ConnectionError, RuntimeError, ValueError) as exc:
                        failure = exc
                    log.seek(0)
                    said = log.read().decode(errors="replace")
                if failure is not None:
                    first = str(failure).strip().splitlines()[0] if str(failure).strip() else ""
                    hint = "start it with `ray start --head` or pass --ray local"
                    if "InvalidAuthToken" in said or "Unauthenticated" in said:
                        hint = (
                            "the cluster uses token authentication: put its token (~/.ray/auth_token "
                            "on the head) on this host and set RAY_AUTH_MODE=token"
                        )
                    raise UserError(
                        f"--ray {address}: cannot join that Ray cluster "
                        f"({first or type(failure).__name__}); {hint}"
                    ) from None
            self._owned = True

    @property
    def workers(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def describe(self) -> str:
        nodes = sum(1 for n in self._ray.nodes() if n.get("Alive"))
        where = "a local Ray instance" if self.address == "local" else f"Ray at {self.address}"
        return f"{where}: {nodes} node{'s' if nodes != 1 else ''}, {self.workers} CPUs"

    def _map(self, batch: Batch) -> Iterator[Any]:
        """As :meth:`Executor.map`; ``resources[i]``: custom resources task i needs (a
        phone: ``{"phone:SERIAL": 1}``), so Ray places it on the node that has them and
        never runs two such tasks at once beyond the resource's count."""
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=self._max_retries, retry_exceptions=False)(
            as2d_task
        )
        fn, tasks, resources = batch.fn, batch.tasks, batch.resources
        box = [ray.put(batch.shared)]  # once per map, whatever the number of tasks
        pending: deque[Any] = deque()
        window = self.workers * IN_FLIGHT_PER_WORKER
        nxt = 0

        def submit(i: int) -> Any:
            if resources is not None and resources[i]:
                return remote.options(resources=dict(resources[i])).remote(fn, box, tasks[i])
            return remote.remote(fn, box, tasks[i])

        try:
            while nxt < len(tasks) or pending:
                while nxt < len(tasks) and len(pending) < window:
                    pending.append(submit(nxt))
                    nxt += 1
                yield self._get(pending.popleft())
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes: host, address, state, CPUs and the phones attached (custom
        resources ``phone:…``; ``busy`` those a task holds now)."""
        free = self._ray.available_resources()
        out = []
        for n in self._ray.nodes():
            res = n.get("Resources", {})
            phones = sorted(k.split(":", 1)[1] for k in res if k.startswith("phone:"))
            out.append(
                {
                    "host": n.get("NodeManagerHostname", ""),
                    "address": n.get("NodeManagerAddress", ""),
                    "alive": bool(n.get("Alive")),
                    "cpus": int(res.get("CPU", 0)),
                    "phones": phones,
                    "busy": [p for p in phones if free.get(f"phone:{p}", 0) < res[f"phone:{p}"]],
                }
            )
        return sorted(out, key=lambda d: (d["host"], d["address"]))

    def has_resource(self, name: str) -> bool:
        return self._ray.cluster_resources().get(name, 0) > 0

    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None  # the task's own error, as the local pool raises it
            raise
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
            raise ClusterError(
                f"a Ray task failed after {self._max_retries} retries ({type(exc).__name__}); "
                "check the cluster's nodes (`ray status`) and run the command again"
            ) from None

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
            self._owned = False
