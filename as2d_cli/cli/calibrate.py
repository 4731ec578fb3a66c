"""`as2d calibrate`: gated probe runs on a device, a fitted cost profile and the R(K) plot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.groups import MEASURE, PROMPT, grouped
from as2d_cli.cli.progress import Steps
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from as2d_cli.calibration.farm import FarmOptions
    from as2d_cli.calibration.run import CalibrationSettings


@grouped(measure=MEASURE, prompt=PROMPT)
def calibrate(
    phone: list[str] = options.phones(
        "local (the default), a known phone name, or an adb serial; repeat it to calibrate "
        "a farm of phones concurrently (one worker per phone).",
    ),
    quick: bool = typer.Option(
        False, "--quick", help="Fewer widths, offsets and repetitions (minutes, not tens)."
    ),
    window: str | None = typer.Option(
        None, "--window", help="Calibration window (default: longest English dev window)."
    ),
    out: Path = options.out_folder(
        Path("calibrations"), "Folder for the profile, samples and plot."
    ),
    measure: MeasureOptions = MeasureOptions(),
    models: Path | None = options.models(),
    prompt: PromptSpec = PromptSpec(),
    ray: str | None = options.ray(),
    quiet: bool = options.quiet(),
) -> None:
    """Measure a device's costs and write an as2d.profile (resumes an interrupted run)."""
    from as2d_cli.calibration.run import CalibrationSettings

    pair = options.model_pair(models, prompt)  # loaded once; refused before any work
    if len(phone) > 1 or ray is not None:
        from as2d_cli.calibration.farm import FarmOptions

        # each worker loads the pair in its own process (a Ray node from its own disk)
        models_ = None if models is None else str(models)
        opts = FarmOptions(str(out), quick, window, measure, models_, prompt)
        _farm(phone, ray, opts)
        return
    settings = CalibrationSettings(out, quick, window, pair=pair)
    _one(phone[0], settings, measure, quiet)


def _one(phone: str, settings: CalibrationSettings, measure: MeasureOptions, quiet: bool) -> None:
    """One device: prepared once, calibrated, its files and timing printed."""
    import dataclasses

    from as2d_cli.calibration.run import calibrate as run
    from device_agents.measurement import prepare

    m = prepare(phone, measure)
    settings = dataclasses.replace(settings, gate=m.gate, cores=m.placement.cores)
    with Steps("calibrate", quiet=quiet, count=False) as steps:
        steps.note(f"calibrating {m.identity.describe()}; {m.placement.describe()}")
        res = run(m.device, settings, progress=steps.update)
    c = Console()
    if res.resumed_steps:
        c.print(f"resumed: {res.resumed_steps} of {res.steps} steps came from the interrupted run")
    c.print(f"profile  {res.profile_path}")
    c.print(f"samples  {res.samples_path}")
    c.print(f"R(K)     {res.plot_path}")
    first = res.gates[0]["observations"][0] if res.gates and res.gates[0]["observations"] else None
    if first is not None and first["check"] == "settle":
        c.print(f"settle   {first['message']}")
    c.print(f"took {res.seconds:.0f} s")


def _farm(phones: list[str], ray: str | None, opts: FarmOptions) -> None:
    """Several phones at once: one worker per phone, then the farm summary table."""
    from as2d_cli.calibration.farm import calibrate_farm
    from as2d_cli.errors import DeviceError, UserError
    from as2d_cli.execution import open_executor
    from as2d_cli.execution.farm import farm_table, phone_resource

    if "local" in phones and len(phones) > 1:
        raise UserError(
            "--phone local measures this host, which the farm's other workers share; "
            "calibrate it on its own"
        )
    err = Console(stderr=True, highlight=False)
    node = {phone_resource(p): 1.0 for p in phones} if ray == "local" else None
    # Locally, and on a local Ray instance, one worker per phone: they wait on the phones.
    with open_executor(ray, len(phones) if ray in (None, "local") else None, node) as ex:
        outcomes = calibrate_farm(
            phones,
            opts,
            ex,
            on_start=lambda: err.print(
                f"calibrating {len(phones)} phones on {ex.describe()}: {', '.join(phones)}"
            ),
        )
    Console(highlight=False, soft_wrap=True).print(farm_table(outcomes))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise DeviceError(
            f"{len(failed)} of {len(outcomes)} phones failed (first: {failed[0].phone}: "
            f"{failed[0].message}); the others' profiles are written; rerun with the failed "
            "phones' --phone to resume them"
        )


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
