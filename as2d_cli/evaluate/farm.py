"""`as2d eval --native` on a farm of this host's phones: the replay part of every phone
first, one after the other (it needs no phone, and deployments it selects now for phones of
one model get distinct names), then the native runs of all phones at once, one process
per phone, never two on one phone. Each phone's results folder is the one
`as2d eval --phone P --native` writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.execution.farm import PhoneOutcome, on_phone
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from device_agents.measurement import Measurement


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
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    models: str | None = None
    prompt: PromptSpec | None = None
    allow_unconfirmed: bool = False
    allow_implausible: bool = False
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
            prompt=opts.prompt,
            allow_unconfirmed=opts.allow_unconfirmed,
            allow_implausible=opts.allow_implausible,
            align=opts.align,
        )
    return dataclasses.replace(opts, replays=replays)


def eval_phone(opts: EvalFarmOptions, phone: str) -> PhoneOutcome:
    """One phone's native runs (a farm task) into the folder of its replay; its errors
    become its outcome."""
    from as2d_cli.evaluate.native import run_native_eval

    models = None if opts.models is None else Path(opts.models)

    def work(m: Measurement, out: PhoneOutcome) -> None:
        res = opts.replays[phone]
        run_native_eval(
            phone,
            res,
            windows=opts.windows,
            repeats=opts.repeats,
            warmup=opts.warmup,
            gate=m.gate,
            models=models,
            prompt=opts.prompt,
            measurement=m,
        )
        out.ok, out.steps, out.message = True, opts.windows, str(res.folder)

    return on_phone(phone, opts.measure, opts.adb_port, work)
