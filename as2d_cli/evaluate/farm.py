"""`as2d eval --native` on a farm of this host's phones: the replay part of every phone
first, one after the other (it needs no phone, and deployments it selects now for phones of
one model get distinct names), then the native runs of all phones at once, one process
per phone, never two on one phone. Each phone's results folder is the one
`as2d eval --phone P --native` writes."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from as2d_cli.calibration.farm import PhoneOutcome


@dataclass(frozen=True)
class EvalFarmOptions:
    """What every phone's evaluation uses (the `as2d eval` options)."""

    out_dir: str  # --results
    calibrations: str = "calibrations"
    traces: str | None = None
    split: str = "test"
    windows: int = 20
    repeats: int = 5
    warmup: int = 1
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
    allow_unconfirmed: bool = False
    align: str | None = None
    adb_port: int | None = None
    ship_back: bool = False  # a farm of eval runs on this host's phones only (see the CLI)
    replays: dict[str, Any] = field(default_factory=dict)  # phone -> its run_eval output


def replay_all(
    phones: list[str], opts: EvalFarmOptions, say: Callable[[str], None]
) -> EvalFarmOptions:
    """Every phone's replay part (``run_eval``), one after the other, in ``opts``."""
    import dataclasses

    from as2d_cli.evaluate.run import run_eval

    replays = {}
    for phone in phones:
        say(f"{phone}: replay")
        replays[phone] = run_eval(
            phone,
            traces=None if opts.traces is None else Path(opts.traces),
            split=opts.split,
            calibrations=Path(opts.calibrations),
            results=Path(opts.out_dir),
            say=say,
            models=None if opts.models is None else Path(opts.models),
            task=opts.task,
            language=opts.language,
            allow_unconfirmed=opts.allow_unconfirmed,
            align=opts.align,
        )
    return dataclasses.replace(opts, replays=replays)


def eval_phone(opts: EvalFarmOptions, phone: str) -> PhoneOutcome:
    """One phone's native runs (a farm task) into the folder of its replay; its errors
    become its outcome."""
    from as2d_cli.errors import As2dError
    from as2d_cli.evaluate.native import run_native_eval
    from device_agents.measurement import prepare

    out = PhoneOutcome(phone, False, "", host=socket.gethostname(), started=time.time())
    models = None if opts.models is None else Path(opts.models)
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
        res = opts.replays[phone]
        run_native_eval(
            phone,
            res,
            windows=opts.windows,
            repeats=opts.repeats,
            warmup=opts.warmup,
            gate=m.gate,
            models=models,
            task=opts.task,
            language=opts.language,
            measurement=m,
        )
        out.ok, out.steps, out.message = True, opts.windows, str(res.folder)
    except (As2dError, OSError) as exc:
        out.message = " ".join(str(exc).split()) or type(exc).__name__
    except Exception as exc:  # a bug on one phone must not stop the others' measurements
        out.message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    out.finished = time.time()
    return out
