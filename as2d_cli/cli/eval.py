"""`as2d eval`: fixed-configuration evaluation of every method on the test split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.groups import MEASURE, PROMPTS, grouped, variant
from as2d_cli.cli.paths import file_in_option
from as2d_cli.evaluate.settings import EvalSettings, NativeSettings
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from as2d_cli.evaluate.native import NativeEvalOutput
    from as2d_cli.evaluate.native_record import EvalRun
    from as2d_cli.evaluate.run import EvalOutput


_DEPLOYMENT = options.path(
    None,
    "--deployment",
    file_in_option,
    "Fixed configuration (default: the newest chosen on this profile and these traces; selected now if none).",
)

_ACCEPT = typer.Option(
    False,
    "--accept-unvalidated",
    help="Use a deployment that failed its own checks — NOT retained on the val split, never "
    "checked there, or selected on fewer dev windows than the minimum (refused otherwise); "
    "results.json records it and why.",
)

_UNCONFIRMED = typer.Option(
    False,
    "--allow-unconfirmed",
    help="The older name of --accept-unvalidated (the same override).",
)

_NATIVE = typer.Option(
    False,
    "--native",
    help="Also run the methods natively on the device and check replay agreement.",
)

_APPEND = typer.Option(
    None,
    "--append",
    metavar="RUN_DIR",
    help="Native: resume the interrupted native evaluation in this results folder: runs only what it lacks, then builds the tables from all its runs (give the run's own options; other settings are refused).",
)


def _native_runs(
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
) -> NativeSettings:
    """The native runs' counts (``--windows``, ``--repeats``, ``--warmup``)."""
    return NativeSettings(windows, repeats, warmup)


EVAL_MEASURE = variant(
    MEASURE,
    help={
        "rest": "Native: gate rest in seconds before each window (default: the device's).",
        "interval": "Native: seconds between the gate's checks (default: the device's).",
        "settle": "Native: once before measuring, seconds the host must have been quiet (local "
        "default 20; 0 skips).",
    },
)


@grouped(runs=_native_runs, measure=EVAL_MEASURE, prompts=PROMPTS)
def eval_(
    ctx: typer.Context,
    phone: list[str] = options.phones(
        "Device whose cost profile prices the replay: local (the default: a profile "
        "calibrated here), k70 (the shipped profile), another phone's name or serial; with "
        "--native, repeat it to evaluate a farm of this host's phones at once (one process per phone).",
    ),
    profile: Path | None = options.profile(
        help="Cost profile (default: found for --phone in calibrations/)."
    ),
    traces: Path | None = options.traces(
        help="Trace file or folder (default: the bundled traces)."
    ),
    deployment: Path | None = _DEPLOYMENT,
    allow_implausible: bool = options.allow_implausible(),
    accept_unvalidated: bool = _ACCEPT,
    allow_unconfirmed: bool = _UNCONFIRMED,
    align: str | None = options.align("a deployment selected under them is used, or selected now."),
    split: str = typer.Option("test", "--split", help="Split to evaluate."),
    calibrations: Path = options.calibrations(),
    results: Path = options.results(),
    native: bool = _NATIVE,
    runs: NativeSettings = NativeSettings(),
    as_json: bool = options.as_json("Print the results document as JSON."),
    measure: MeasureOptions = MeasureOptions(),
    models: Path | None = options.models(
        "A model pair folder (`as2d models import`): its traces (PAIR/traces), a profile measured with it, and native runs of it."
    ),
    prompts: tuple[PromptSpec, ...] = (),
    append: Path | None = _APPEND,
    ray: str | None = options.ray(),
    figure_format: str = options.figure_format(),
    quiet: bool = options.quiet(),
) -> None:
    """Replay every method with one fixed configuration; optionally run them natively too."""
    import dataclasses

    if len(prompts) > 1:  # --task all: each task in turn, then the per-task table
        _all_tasks(ctx, phone, models, prompts, calibrations, results, figure_format, quiet)
        return
    pair = options.model_pair(models, prompts[0])  # loaded once; refused before any work
    settings = EvalSettings(
        phone[0],
        profile=profile,
        traces=traces,
        deployment=deployment,
        split=split,
        calibrations=calibrations,
        results=results,
        pair=pair,
        allow_unconfirmed=allow_unconfirmed,
        accept_unvalidated=accept_unvalidated,
        allow_implausible=allow_implausible,
        align=align,
        figure_format=figure_format,
        command=_command_line(ctx),
    )
    runs = dataclasses.replace(runs, pair=pair)
    if len(phone) > 1:
        _farm(phone, settings, runs, measure, native=native, refused=_farm_refused(ctx))
        return
    out, native_out = _run(settings, runs if native else None, measure, append, ray, quiet)
    _print(out, native_out, as_json)


def _all_tasks(
    ctx: typer.Context,
    phone: list[str],
    models: Path | None,
    prompts: tuple[PromptSpec, ...],
    calibrations: Path,
    results: Path,
    figure_format: str,
    quiet: bool,
) -> None:
    """``--task all``: the pair's three tasks replayed, one folder, the per-task table."""
    from as2d_cli.cli.progress import Steps
    from as2d_cli.errors import UserError
    from as2d_cli.evaluate.tasks import run_eval_tasks
    from as2d_cli.execution import open_executor

    p = ctx.params
    given = [
        flag
        for flag, g in (
            ("--native", p["native"]),
            ("--append", p["append"] is not None),
            ("--traces", p["traces"] is not None),
            ("--deployment", p["deployment"] is not None),
            ("--json", p["as_json"]),
        )
        if g
    ]
    if given:
        raise UserError(
            f"{given[0]} applies to one task's evaluation; with --task all each task takes its "
            "own traces and deployment: evaluate that task alone (--task transcribe, translate "
            "or answer)"
        )
    if len(phone) > 1:
        raise UserError("--task all prices one device: pass one --phone")
    if models is None:
        raise UserError(
            "--task all evaluates an audio language model's three tasks; pass --models PAIR "
            "(e.g. --models audio-llm)"
        )
    pairs = [options.model_pair(models, spec) for spec in prompts]  # each refused up front
    if pairs[0].kind() != "audio-llm-onnx":
        raise UserError(
            f"--task all evaluates an audio language model's three tasks; the pair in {models} "
            f"is a {pairs[0].model_type()} pair: pass one --task"
        )
    command = _command_line(ctx)
    settings = [
        EvalSettings(
            phone[0],
            profile=p["profile"],
            split=p["split"],
            calibrations=calibrations,
            results=results,
            pair=pair,
            accept_unvalidated=p["accept_unvalidated"],
            allow_unconfirmed=p["allow_unconfirmed"],
            allow_implausible=p["allow_implausible"],
            align=p["align"],
            figure_format=figure_format,
            command=command,
        )
        for pair in pairs
    ]
    with open_executor(p["ray"]) as executor, Steps("eval", quiet=quiet) as steps:
        out = run_eval_tasks(settings, say=steps.note, executor=executor, progress=steps.update)
    typer.echo(out.table, nl=False)
    typer.echo(
        f"\nresults in {out.folder}/ (tasks.json, table.txt, table3.csv; each task's own "
        f"evaluation folder: {', '.join(f'{t}/' for t in out.tasks)})"
    )


def _farm_refused(ctx: typer.Context) -> list[str]:
    """The options given that apply to one phone's evaluation only (a farm refuses them)."""
    p = ctx.params
    given = (
        ("--ray", p["ray"] is not None),
        ("--append", p["append"] is not None),
        ("--profile", p["profile"] is not None),
        ("--deployment", p["deployment"] is not None),
        ("--json", p["as_json"]),
    )
    return [flag for flag, g in given if g]


def _run(
    settings: EvalSettings,
    runs: NativeSettings | None,
    measure: MeasureOptions,
    append: Path | None,
    ray: str | None,
    quiet: bool,
) -> tuple[EvalRun | EvalOutput, NativeEvalOutput | None]:
    """One phone: the replay part (or the interrupted run reopened), then the native part."""
    import dataclasses

    from as2d_cli.cli.progress import Steps
    from device_agents.measurement import prepare

    # the device, its placement and gate: resolved once, before anything runs
    m = None if runs is None else prepare(settings.phone, measure)
    out: EvalRun | EvalOutput  # both name the results folder, file and table
    with Steps("eval", quiet=quiet) as steps:
        if (
            append is not None
        ):  # the interrupted run's replay results stand; its native part goes on
            from as2d_cli.evaluate.native_record import reopen_eval

            out = reopen_eval(
                append,
                native=runs is not None,
                profile=settings.profile,
                deployment=settings.deployment,
            )
        else:
            from as2d_cli.evaluate.run import run_eval
            from as2d_cli.execution import open_executor

            with open_executor(ray) as executor:  # the oracle sweep (and a selection made now)
                out = run_eval(
                    settings,
                    say=steps.note,
                    executor=executor,
                    # a found profile of another device (or a synthetic one) is refused first
                    native=None if m is None else m.identity,
                    progress=steps.update,
                )
        if runs is None or m is None:
            return out, None
        from as2d_cli.evaluate.native import run_native_eval

        runs = dataclasses.replace(runs, gate=m.gate, append=append is not None)
        native_out = run_native_eval(
            settings.phone, out, runs, say=steps.note, measurement=m, progress=steps.update
        )
    return out, native_out


def _print(out: EvalRun | EvalOutput, native_out: NativeEvalOutput | None, as_json: bool) -> None:
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
    phones: list[str],
    settings: EvalSettings,
    runs: NativeSettings,
    measure: MeasureOptions,
    *,
    native: bool,
    refused: list[str],
) -> None:
    """Several phones evaluated natively at once, then the farm summary table."""
    from as2d_cli.errors import DeviceError
    from as2d_cli.evaluate.farm import EvalFarmOptions, eval_phone, replay_all
    from as2d_cli.execution import LocalPool
    from as2d_cli.execution.farm import farm_table, run_farm

    _check_farm(phones, settings, native=native, refused=refused)
    err = Console(stderr=True, highlight=False)
    opts = EvalFarmOptions(settings, runs, measure)
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


def _check_farm(
    phones: list[str], settings: EvalSettings, *, native: bool, refused: list[str]
) -> None:
    """A farm's refusals, each phone's own profile among them, before anything runs."""
    from as2d_cli.errors import UserError
    from as2d_cli.evaluate.run import check_native_profile
    from as2d_cli.execution.farm import check_phones
    from device_agents.identity import identify
    from device_agents.registry import resolve_phone

    if not native:
        raise UserError(
            "several --phone values evaluate a farm natively; add --native (a replay needs no "
            "phone: pass each phone's --phone on its own)"
        )
    if refused and refused[0] == "--ray":
        raise UserError(
            "--ray with several --phone: an eval farm runs on this host's phones, one process "
            "each; drop --ray"
        )
    if refused:
        raise UserError(
            f"{refused[0]} applies to one phone's evaluation; evaluate that phone on its own"
        )
    if "local" in phones:
        raise UserError(
            "--phone local measures this host, which the farm's other workers share; "
            "evaluate it on its own"
        )
    check_phones(phones, remote=False)  # before the replays: a phone given twice
    for p in phones:  # each phone's own profile (a farm takes no --profile)
        check_native_profile(
            p,
            identify(resolve_phone(p)),
            calibrations=settings.calibrations,
            pair=settings.pair,
        )


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
