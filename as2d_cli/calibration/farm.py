"""A phone farm: calibrate several phones at once, one worker per phone, never two
measurements on one phone at a time (the farm itself: :mod:`as2d_cli.execution.farm`).

Locally every phone gets its own process (a local pool of as many workers as phones, one
task per phone, so a phone's steps run one after another in its process). On Ray every
phone is a custom resource of the node it is attached to, ``{"phone:SERIAL": 1}``: its
task runs on that node and holds the phone's one unit, so Ray never places two of them
together. Each phone's files land in ``<out>/<name>-<serial>/`` (one folder per phone);
on Ray the node calibrates into its own folder (``<tmp>/as2d-farm/``, where an interrupted
phone resumes) and the finished files come back to this host's ``<out>``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.execution import Executor
from as2d_cli.execution.farm import PhoneOutcome, on_phone, run_farm
from as2d_cli.formats.layout import companion
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from device_agents.measurement import Measurement


@dataclass(frozen=True)
class FarmOptions:
    """What every phone's calibration uses (the `as2d calibrate` options)."""

    out_dir: str
    quick: bool = False
    window: str | None = None
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    models: str | None = None
    prompt: PromptSpec | None = None
    adb_port: int | None = None
    plan: Any = None  # a list of calibration Steps (tests); None: the quick or full plan
    ship_back: bool = False  # the worker's disk is not this host's: return the files


def calibrate_phone(opts: FarmOptions, phone: str) -> PhoneOutcome:
    """One phone's whole calibration (a farm task): its errors become its outcome, so one
    failing phone never stops the others."""
    from as2d_cli.calibration.run import CalibrationSettings, calibrate
    from as2d_cli.models.model_pair import load_pair

    def work(m: Measurement, out: PhoneOutcome) -> None:
        base = Path(tempfile.gettempdir()) / "as2d-farm" if opts.ship_back else Path(opts.out_dir)
        folder = base / m.identity.key
        settings = CalibrationSettings(
            out_dir=folder,
            quick=opts.quick,
            window=opts.window,
            gate=m.gate,
            cores=m.placement.cores,
            plan=opts.plan,
            # loaded once in this worker's process (a Ray node reads its own copy)
            pair=None
            if opts.models is None
            else load_pair(opts.models, check_hashes=False, prompt=opts.prompt),
        )
        res = calibrate(m.device, settings)
        out.ok, out.steps, out.resumed = True, res.steps, res.resumed_steps
        made = sorted(p for p in folder.glob(companion(res.profile_path, "*").name) if p.is_file())
        if opts.ship_back:
            out.files = {f"{m.identity.key}/{p.name}": p.read_bytes() for p in made}
            out.message = f"{m.identity.key}/{res.profile_path.name}"
        else:
            out.written = [str(p) for p in made]
            out.message = str(res.profile_path)

    return on_phone(phone, opts.measure, opts.adb_port, work)


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
