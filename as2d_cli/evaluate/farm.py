"""`as2d eval --native` on a farm of this host's phones: the replay part of every phone
first, one after the other (it needs no phone, and deployments it selects now for phones of
one model get distinct names), then the native runs of all phones at once, one process
per phone, never two on one phone. Each phone's results folder is the one
`as2d eval --phone P --native` writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from as2d_cli.evaluate.native import NativeSettings
from as2d_cli.evaluate.run import EvalSettings
from as2d_cli.execution.farm import PhoneOutcome, on_phone
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from device_agents.measurement import Measurement


@dataclass(frozen=True)
class EvalFarmOptions:
    """What every phone's evaluation uses (the `as2d eval` options): the replay part's
    settings (its phone replaced by each phone's), the native runs' and the measuring
    options."""

    settings: EvalSettings
    runs: NativeSettings = field(default_factory=NativeSettings)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    adb_port: int | None = None
    ship_back: bool = False  # a farm of eval runs on this host's phones only (see the CLI)
    replays: dict[str, Any] = field(default_factory=dict)  # phone -> its run_eval output


def replay_all(
    phones: list[str], opts: EvalFarmOptions, say: Callable[[str], None]
) -> EvalFarmOptions:
    """Every phone's replay part (``run_eval``), one after the other, in ``opts``."""
    from as2d_cli.evaluate.run import run_eval

    replays = {}
    for phone in phones:
        say(f"{phone}: replay")
        # each phone's own command line redoes its own evaluation
        one = dataclasses.replace(opts.settings, phone=phone, command=None)
        replays[phone] = run_eval(one, say=say)
    return dataclasses.replace(opts, replays=replays)


def eval_phone(opts: EvalFarmOptions, phone: str) -> PhoneOutcome:
    """One phone's native runs (a farm task) into the folder of its replay; its errors
    become its outcome."""
    from as2d_cli.evaluate.native import run_native_eval

    def work(m: Measurement, out: PhoneOutcome) -> None:
        res = opts.replays[phone]
        runs = dataclasses.replace(opts.runs, gate=m.gate)
        run_native_eval(phone, res, runs, measurement=m)
        out.ok, out.steps, out.message = True, opts.runs.windows, str(res.folder)

    return on_phone(phone, opts.measure, opts.adb_port, work)
