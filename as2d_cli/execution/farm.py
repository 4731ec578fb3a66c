"""A phone farm: one task per phone, run at once on an executor, never two measurements on
one phone at a time; the runner, the phone checks, each phone's outcome and the summary
table that `as2d calibrate` (:mod:`as2d_cli.calibration.farm`) and `as2d eval --native`
(:mod:`as2d_cli.evaluate.farm`) share.

Locally every phone gets its own process (a local pool of as many workers as phones, one
task per phone). On Ray every phone is a custom resource of the node it is attached to,
``{"phone:SERIAL": 1}``: its task runs on that node and holds the phone's one unit, so Ray
never places two of them together; files a node made come back by value (``ship_back``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import As2dError, UserError
from as2d_cli.execution.base import Executor

if TYPE_CHECKING:
    from device_agents.measurement import Measurement, MeasureOptions

PHONE_RESOURCE = "phone:"  # + the --phone value: the resource a node offers per attached phone


def phone_resource(phone: str) -> str:
    return PHONE_RESOURCE + phone


@dataclass
class PhoneOutcome:
    """One phone's farm task, as the farm summary shows it."""

    phone: str
    ok: bool
    message: str  # the file made (a profile's path, a results folder), or the one-line error
    device: str | None = None  # name and serial
    host: str = ""
    started: float = 0.0  # wall clock (s since the epoch) on the measuring host
    finished: float = 0.0
    steps: int = 0
    resumed: int = 0
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)  # shipped back
    written: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("files")
        return d


def on_phone(
    phone: str,
    measure: MeasureOptions,
    adb_port: int | None,
    work: Callable[[Measurement, PhoneOutcome], None],
) -> PhoneOutcome:
    """One phone's farm task: the phone prepared with ``measure``, then ``work(m, out)``
    fills its outcome. Its errors become its outcome, so one failing phone never stops the
    others."""
    from device_agents.measurement import prepare

    out = PhoneOutcome(phone, False, "", host=socket.gethostname(), started=time.time())
    try:
        m = prepare(phone, measure, adb_port=adb_port)
        out.device = f"{m.identity.name} {m.identity.serial}"
        work(m, out)
    except (As2dError, OSError) as exc:
        out.message = " ".join(str(exc).split()) or type(exc).__name__
    except Exception as exc:  # a bug on one phone must not stop the others' measurements
        out.message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    out.finished = time.time()
    return out


def check_phones(phones: Sequence[str], *, remote: bool, adb_port: int | None = None) -> None:
    """Refuse a farm that would measure one phone twice at once: a phone given twice, or
    (locally, where the phones can be resolved) two names for one phone."""
    seen: dict[str, str] = {}
    for p in phones:
        if p in seen:
            raise UserError(f"--phone {p} is given twice; a farm measures each phone once")
        seen[p] = p
    if remote:
        return
    from device_agents.identity import identify
    from device_agents.registry import resolve_phone

    keys: dict[str, str] = {}
    for p in phones:
        key = identify(resolve_phone(p, adb_port)).key
        if key in keys:
            raise UserError(
                f"--phone {keys[key]} and --phone {p} are the same phone ({key}); give it once"
            )
        keys[key] = p


def run_farm(
    phones: Sequence[str],
    task: Callable[[Any, str], PhoneOutcome],
    opts: Any,
    executor: Executor,
    on_start: Callable[[], None] | None = None,
) -> list[PhoneOutcome]:
    """``task(opts, phone)`` for every phone at once, one worker per phone; ``opts`` is a
    frozen dataclass with ``out_dir``, ``adb_port`` and ``ship_back``."""
    from as2d_cli.formats.common import write_atomic

    check_phones(phones, remote=executor.remote, adb_port=opts.adb_port)
    for p in phones:
        if executor.remote and not executor.has_resource(phone_resource(p)):
            raise UserError(
                f"--phone {p}: no Ray node offers the resource {phone_resource(p)!r}; start the "
                f"node the phone is attached to with `ray start --address HEAD:6379 --resources "
                f"'{{\"{phone_resource(p)}\": 1}}'` (see `as2d devices --ray ADDRESS`)"
            )
    if on_start is not None:
        on_start()
    opts = dataclasses.replace(opts, ship_back=executor.remote)
    resources = [{phone_resource(p): 1.0} for p in phones] if executor.remote else None
    outcomes: list[PhoneOutcome] = []
    # Fresh interpreters: each phone's process holds its own adb connections and runner,
    # and takes Ctrl-C itself to stop that runner and say what it kept.
    for o in executor.map(task, opts, list(phones), fork=False, resources=resources, ctrl_c=True):
        for rel, data in o.files.items():
            o.written.append(str(write_atomic(Path(opts.out_dir) / rel, data)))
        if o.ok and o.files:
            o.message = os.path.join(opts.out_dir, o.message)
        o.files = {}
        outcomes.append(o)
    return outcomes


def farm_table(
    outcomes: Sequence[PhoneOutcome], count: str = "steps", made: str = "profile"
) -> str:
    """The farm summary as plain text: one row per phone (golden-tested); ``count`` and
    ``made`` name the work counted and the file made (a calibration's steps and profile)."""
    t0 = min((o.started for o in outcomes), default=0.0)
    head = ["phone", "device", "host", "status", count, "start s", "minutes", f"{made} / error"]
    rows = [
        [
            o.phone,
            o.device or "-",
            o.host,
            "ok" if o.ok else "FAILED",
            f"{o.steps}" + (f" ({o.resumed} resumed)" if o.resumed else ""),
            f"{o.started - t0:.0f}",
            f"{(o.finished - o.started) / 60:.1f}",
            o.message,
        ]
        for o in outcomes
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    return "\n".join(lines)
