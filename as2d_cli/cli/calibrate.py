"""`as2d calibrate`: gated probe runs on a device, a fitted cost profile and the R(K) plot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from as2d_cli.cli import options
from as2d_cli.cli.paths import folder_out_option
from as2d_cli.cli.progress import progress_bar


def calibrate(
    phone: str = typer.Option(
        "local", "--phone", help="local, a known phone name, or an adb serial."
    ),
    quick: bool = typer.Option(
        False, "--quick", help="Fewer widths, offsets and repetitions (minutes, not tens)."
    ),
    window: Optional[str] = typer.Option(
        None, "--window", help="Calibration window (default: longest English dev window)."
    ),
    out: Path = typer.Option(
        Path("calibrations"),
        "--out",
        callback=folder_out_option,
        help="Folder for the profile, samples and plot.",
    ),
    rest: Optional[float] = options.rest(),
    interval: Optional[float] = options.interval(),
    settle: Optional[float] = options.settle(),
    models: Optional[Path] = options.models(),
    task: Optional[str] = options.task(),
    language: Optional[str] = options.language(),
    max_temp: Optional[float] = options.max_temp(),
    temp_sensor: Optional[str] = options.temp_sensor(),
    verifier_cores: Optional[str] = options.verifier_cores(),
    producer_cores: Optional[str] = options.producer_cores(),
    os_placement: bool = options.os_placement(),
) -> None:
    """Measure a device's costs and write an as2d.profile (resumes an interrupted run)."""
    from as2d_cli.calibration.run import calibrate as run
    from device_agents.measurement import prepare

    m = prepare(
        phone,
        rest_s=rest,
        interval_s=interval,
        settle_s=settle,
        max_temp_c=max_temp,
        temp_sensor=temp_sensor,
        verifier_cores=verifier_cores,
        producer_cores=producer_cores,
        os_placement=os_placement,
    )
    device, gate, cores = m.device, m.gate, m.placement.cores
    Console(stderr=True).print(f"calibrating {m.identity.describe()}; {m.placement.describe()}")
    with progress_bar(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ) as bar:
        bar_task = bar.add_task("starting", total=1.0)

        def progress(label: str, done: float, total: float) -> None:
            bar.update(bar_task, description=label, completed=done / total if total else 1.0)

        res = run(
            device,
            out_dir=out,
            quick=quick,
            window=window,
            progress=progress,
            gate=gate,
            cores=cores,
            models=models,
            task=task,
            language=language,
        )
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


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
