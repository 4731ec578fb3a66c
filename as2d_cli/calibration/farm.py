"""A phone farm: calibrate several phones at once, one worker per phone, never two
measurements on one phone at a time.

Locally every phone gets its own process (a local pool of as many workers as phones, one
task per phone, so a phone's steps run one after another in its process). On Ray every
phone is a custom resource of the node it is attached to, ``{"phone:SERIAL": 1}``: its
task runs on that node and holds the phone's one unit, so Ray never places two of them
together. Each phone's files land in ``<out>/<name>-<serial>/`` (one folder per phone);
on Ray the node calibrates into its own folder (``<tmp>/as2d-farm/``, where an interrupted
phone resumes) and the finished files come back to this host's ``<out>``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from as2d_cli.errors import As2dError, UserError
from as2d_cli.execution import Executor

PHONE_RESOURCE = "phone:"  # + the --phone value: the resource a node offers per attached phone


def phone_resource(phone: str) -> str:
    return PHONE_RESOURCE + phone


@dataclass(frozen=True)
class FarmOptions:
    """What every phone's calibration uses (the `as2d calibrate` options)."""

    out_dir: str
    quick: bool = False
    window: str | None = None
    rest_s: float | None = None
    interval_s: float | None = None
    settle_s: float | None = None
    max_temp_c: float | None = None
    temp_sensor: str | None = None
    verifier_cores: str | None = None
    producer_cores: str | None = None
    os_placement: bool = False
    models: str | None = None
    task: str | None = None
    language: str | None = None
    adb_port: int | None = None
    plan: Any = None  # a list of calibration Steps (tests); None: the quick or full plan
    ship_back: bool = False  # the worker's disk is not this host's: return the files


@dataclass
class PhoneOutcome:
    """One phone's calibration, as the farm summary shows it."""

    phone: str
    ok: bool
    message: str  # the profile's path, or the one-line error
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


def calibrate_phone(opts: FarmOptions, phone: str) -> PhoneOutcome:
    """One phone's whole calibration (a farm task): its errors become its outcome, so one
    failing phone never stops the others."""
    from as2d_cli.calibration.run import calibrate
    from device_agents.measurement import prepare

    started = time.time()
    out = PhoneOutcome(phone, False, "", host=socket.gethostname(), started=started)
    try:
        m = prepare(
            phone,
            adb_port=opts.adb_port,
            rest_s=opts.rest_s,
            interval_s=opts.interval_s,
            settle_s=opts.settle_s,
            max_temp_c=opts.max_temp_c,
            temp_sensor=opts.temp_sensor,
            verifier_cores=opts.verifier_cores,
            producer_cores=opts.producer_cores,
            os_placement=opts.os_placement,
        )
        out.device = f"{m.identity.name} {m.identity.serial}"
        base = Path(tempfile.gettempdir()) / "as2d-farm" if opts.ship_back else Path(opts.out_dir)
        folder = base / m.identity.key
        res = calibrate(
            m.device,
            out_dir=folder,
            quick=opts.quick,
            window=opts.window,
            gate=m.gate,
            cores=m.placement.cores,
            plan=opts.plan,
            models=None if opts.models is None else Path(opts.models),
            task=opts.task,
            language=opts.language,
        )
        out.ok, out.steps, out.resumed = True, res.steps, res.resumed_steps
        stem = res.profile_path.name.removesuffix(".profile.yaml")
        made = sorted(p for p in folder.glob(f"{stem}.*") if p.is_file())
        if opts.ship_back:
            out.files = {f"{m.identity.key}/{p.name}": p.read_bytes() for p in made}
            out.message = f"{m.identity.key}/{res.profile_path.name}"
        else:
            out.written = [str(p) for p in made]
            out.message = str(res.profile_path)
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


def calibrate_farm(
    phones: Sequence[str],
    opts: FarmOptions,
    executor: Executor,
    on_start: Callable[[], None] | None = None,
) -> list[PhoneOutcome]:
    """Calibrate ``phones`` concurrently on ``executor`` (a local pool with one worker per
    phone, or Ray with each phone a node resource); outcomes in the order given. Files a
    remote node made are written into ``opts.out_dir`` here, never over an existing file.
    ``on_start`` is called once the phones are checked, before any measurement."""
    return run_farm(phones, calibrate_phone, opts, executor, on_start)


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
    # Fresh interpreters: each phone's process holds its own adb connections and runner.
    for o in executor.map(task, opts, list(phones), fork=False, resources=resources):
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
