"""`as2d eval`: fixed-configuration evaluation of every method on the test split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_in_option, folder_out_option

if TYPE_CHECKING:
    from as2d_cli.evaluate.farm import EvalFarmOptions


def eval_(
    ctx: typer.Context,
    phone: list[str] = typer.Option(
        ["k70"],
        "--phone",
        help="Device whose cost profile prices the replay (k70, local, a serial…); with "
        "--native, repeat it to evaluate a farm of this host's phones at once (one process per phone).",
    ),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        callback=file_in_option,
        help="Cost profile (default: found for --phone in calibrations/).",
    ),
    traces: Path | None = typer.Option(
        None, "--traces", help="Trace file or folder (default: the bundled traces)."
    ),
    deployment: Path | None = typer.Option(
        None,
        "--deployment",
        callback=file_in_option,
        help="Fixed configuration (default: the newest chosen on this profile and these traces; selected now if none).",
    ),
    allow_implausible: bool = options.allow_implausible(),
    accept_unvalidated: bool = typer.Option(
        False,
        "--accept-unvalidated",
        help="Use a deployment that failed its own checks — NOT retained on the val split, never "
        "checked there, or selected on fewer dev windows than the minimum (refused otherwise); "
        "results.json records it and why.",
    ),
    allow_unconfirmed: bool = typer.Option(
        False,
        "--allow-unconfirmed",
        help="The older name of --accept-unvalidated (the same override).",
    ),
    align: str | None = options.align("a deployment selected under them is used, or selected now."),
    split: str = typer.Option("test", "--split", help="Split to evaluate."),
    calibrations: Path = typer.Option(
        Path("calibrations"),
        "--calibrations",
        callback=folder_out_option,
        help="Where profiles and deployments live.",
    ),
    results: Path = typer.Option(
        Path("results"),
        "--results",
        callback=folder_out_option,
        help="Folder for the results (a new subfolder per run).",
    ),
    native: bool = typer.Option(
        False,
        "--native",
        help="Also run the methods natively on the device and check replay agreement.",
    ),
    windows: int = options.count(20, "--windows", help="Native: test windows to run."),
    repeats: int = options.count(
        5,
        "--repeats",
        help="Native: measured interleaved repetitions per window and "
        "method (a window's agreement takes their median, D.3).",
    ),
    warmup: int = options.count(
        1,
        "--warmup",
        minimum=0,
        help="Native: unmeasured warm-up passes over the windows first.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results document as JSON."),
    rest: float | None = options.rest(
        "Native: gate rest in seconds before each window (default: the device's)."
    ),
    interval: float | None = options.interval(
        "Native: seconds between the gate's checks (default: the device's)."
    ),
    settle: float | None = options.settle(
        "Native: once before measuring, seconds the host must have been quiet (local default 20; 0 skips)."
    ),
    models: Path | None = options.models(
        "A model pair folder (`as2d models import`): its traces (PAIR/traces), a profile measured with it, and native runs of it."
    ),
    task: str | None = options.task(),
    language: str | None = options.language(),
    question: str | None = options.question(),
    prompt: str | None = options.prompt_text(),
    max_temp: float | None = options.max_temp(),
    temp_sensor: str | None = options.temp_sensor(),
    verifier_cores: str | None = options.verifier_cores(),
    producer_cores: str | None = options.producer_cores(),
    os_placement: bool = options.os_placement(),
    append: Path | None = typer.Option(
        None,
        "--append",
        metavar="RUN_DIR",
        help="Native: resume the interrupted native evaluation in this results folder: runs only what it lacks, then builds the tables from all its runs (give the run's own options; other settings are refused).",
    ),
    ray: str | None = options.ray(),
    figure_format: str = options.figure_format(),
    quiet: bool = options.quiet(),
) -> None:
    """Replay every method with one fixed configuration; optionally run them natively too."""
    spec = options.prompt_spec(task, language, question, prompt, models)  # refused before any work
    from as2d_cli.evaluate.run import run_eval
    from device_agents.measurement import MeasureOptions, prepare

    measure = MeasureOptions(
        rest_s=rest,
        interval_s=interval,
        settle_s=settle,
        max_temp_c=max_temp,
        temp_sensor=temp_sensor,
        verifier_cores=verifier_cores,
        producer_cores=producer_cores,
        os_placement=os_placement,
    )
    if len(phone) > 1:
        from as2d_cli.evaluate.farm import EvalFarmOptions

        _farm(
            phone,
            native=native,
            refused=[
                (flag, given)
                for flag, given in (
                    ("--ray", ray is not None),
                    ("--append", append is not None),
                    ("--profile", profile is not None),
                    ("--deployment", deployment is not None),
                    ("--json", as_json),
                )
                if given
            ],
            opts=EvalFarmOptions(
                out_dir=str(results),
                calibrations=str(calibrations),
                traces=None if traces is None else str(traces),
                split=split,
                windows=windows,
                repeats=repeats,
                warmup=warmup,
                measure=measure,
                models=None if models is None else str(models),
                prompt=spec,
                allow_unconfirmed=allow_unconfirmed or accept_unvalidated,
                allow_implausible=allow_implausible,
                align=align,
            ),
        )
        return
    phone_ = phone[0]

    m = None
    if native:  # the device, its placement and gate: resolved once, before anything runs
        m = prepare(phone_, measure)

    from as2d_cli.cli.progress import Steps
    from as2d_cli.evaluate.native_record import EvalRun
    from as2d_cli.evaluate.run import EvalOutput

    out: EvalRun | EvalOutput  # both name the results folder, file and table
    native_out = None
    with Steps("eval", quiet=quiet) as steps:
        if (
            append is not None
        ):  # the interrupted run's replay results stand; its native part goes on
            from as2d_cli.evaluate.native_record import reopen_eval

            out = reopen_eval(append, native=native, profile=profile, deployment=deployment)
        else:
            from as2d_cli.execution import open_executor

            with open_executor(ray) as executor:  # the oracle sweep (and a selection made now)
                out = run_eval(
                    phone_,
                    profile=profile,
                    traces=traces,
                    deployment=deployment,
                    split=split,
                    calibrations=calibrations,
                    results=results,
                    say=steps.note,
                    models=models,
                    prompt=spec,
                    allow_unconfirmed=allow_unconfirmed,
                    accept_unvalidated=accept_unvalidated,
                    allow_implausible=allow_implausible,
                    align=align,
                    executor=executor,
                    command=_command_line(ctx),
                    # a found profile of another device (or a synthetic one) is refused first
                    native=None if m is None else m.identity,
                    figure_format=figure_format,
                    progress=steps.update,
                )
        if native:
            from as2d_cli.evaluate.native import run_native_eval

            assert m is not None
            native_out = run_native_eval(
                phone_,
                out,
                windows=windows,
                repeats=repeats,
                warmup=warmup,
                say=steps.note,
                gate=m.gate,
                models=models,
                prompt=spec,
                append=append is not None,
                measurement=m,
                progress=steps.update,
            )
    if as_json:
        doc = json.loads(out.results.read_text())
        if native_out is not None:
            doc["native"] = json.loads(native_out.results.read_text())["results"]
        typer.echo(json.dumps(doc))
        return
    typer.echo(out.table, nl=False)
    if native_out is not None:
        typer.echo("")
        typer.echo(native_out.table, nl=False)
    typer.echo(
        f"\nresults in {out.folder}/ (results.json, table.txt, tables.md, per_window.csv/.parquet, summary.csv, the tables' CSVs, figures)"
    )


def _command_line(ctx: typer.Context) -> str:
    """This command as given (each option the user set, in its long form): what an
    interrupted evaluation's folder names as the command that redoes it."""
    import shlex

    parts = ["as2d", "eval"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is None or source.name.startswith("DEFAULT") or not param.opts:
            continue
        value = ctx.params.get(param.name or "")
        opt = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            parts += [opt] if value else []
        else:
            for v in value if isinstance(value, (list, tuple)) else [value]:
                parts += [opt, str(v)]
    return shlex.join(parts)


def _farm(
    phones: list[str], *, native: bool, refused: list[tuple[str, bool]], opts: EvalFarmOptions
) -> None:
    """Several phones evaluated natively at once, then the farm summary table."""
    from as2d_cli.errors import DeviceError, UserError
    from as2d_cli.evaluate.farm import eval_phone, replay_all
    from as2d_cli.execution import LocalPool
    from as2d_cli.execution.farm import check_phones, farm_table, run_farm

    if not native:
        raise UserError(
            "several --phone values evaluate a farm natively; add --native (a replay needs no "
            "phone: pass each phone's --phone on its own)"
        )
    if refused and refused[0][0] == "--ray":
        raise UserError(
            "--ray with several --phone: an eval farm runs on this host's phones, one process "
            "each; drop --ray"
        )
    if refused:
        raise UserError(
            f"{refused[0][0]} applies to one phone's evaluation; evaluate that phone on its own"
        )
    if "local" in phones:
        raise UserError(
            "--phone local measures this host, which the farm's other workers share; "
            "evaluate it on its own"
        )
    err = Console(stderr=True, highlight=False)
    check_phones(phones, remote=False)  # before the replays: a phone given twice
    from as2d_cli.evaluate.run import check_native_profile
    from device_agents.identity import identify
    from device_agents.registry import resolve_phone

    for p in phones:  # each phone's own profile (a farm takes no --profile), before anything runs
        check_native_profile(
            p,
            identify(resolve_phone(p)),
            calibrations=Path(opts.calibrations),
            models=None if opts.models is None else Path(opts.models),
            prompt=opts.prompt,
        )
    opts = replay_all(phones, opts, lambda s: typer.echo(s, err=True))
    outcomes = run_farm(
        phones,
        eval_phone,
        opts,
        LocalPool(len(phones)),
        on_start=lambda: err.print(
            f"evaluating {len(phones)} phones natively, one process each: {', '.join(phones)}"
        ),
    )
    Console(highlight=False, soft_wrap=True).print(
        farm_table(outcomes, count="windows", made="results")
    )
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise DeviceError(
            f"{len(failed)} of {len(outcomes)} phones failed (first: {failed[0].phone}: "
            f"{failed[0].message}); the others' results are written"
        )


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
