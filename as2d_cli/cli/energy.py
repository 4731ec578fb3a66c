"""`as2d energy --phone P`: request energy from Perfetto battery counters with USB
disconnected (paper D.6.1); `--from-run DIR` analyses a pulled run folder again;
`--collect DIR` fetches a run the phone kept (it did not come back in time)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from as2d_cli.cli import options
from as2d_cli.cli.groups import MEASURE, PLACEMENT, PROMPT, grouped, variant
from as2d_cli.cli.paths import file_in_option, folder_in_option
from as2d_cli.energy.prepare import EnergyRequests, EnergySettings, EnergyTiming
from as2d_cli.errors import Interrupted, UserError
from as2d_cli.models.prompting import PromptSpec
from as2d_cli.reporting import Progress
from device_agents.measurement import MeasureOptions


def _requests(
    methods: str = typer.Option(
        "as2d,target-only", "--methods", help="Methods in measurement order (comma-separated)."
    ),
    request_cmd: str | None = typer.Option(
        None,
        "--request-cmd",
        help="On-device command for one request; {method} {phase} {index} {run_dir} are substituted, and {min_s}/{min_ms}: how long it must hold its load at least (a method's last warm-up: one gauge period plus one poll; else 0). It must print 'AS2D_REQUEST body_tokens=N' (optionally origin_boot_ns/target_eos_boot_ns/end_boot_ns).",
    ),
    method_cmd: list[str] = typer.Option(
        [],
        "--method-cmd",
        help="METHOD=COMMAND: a request command for one method (repeatable).",
    ),
    bundle: Path | None = typer.Option(
        None,
        "--bundle",
        help="Run the native runner's requests from this bundle archive (`as2d bundle build`), deployed to the phone once.",
    ),
    window: str | None = typer.Option(
        None, "--window", help="Corpus window the native requests transcribe (with --bundle)."
    ),
    native_arg: list[str] = typer.Option(
        [],
        "--native-arg",
        help="Extra argument for the native request, e.g. --native-arg=--budget --native-arg=3 (repeatable).",
    ),
    push: list[Path] = options.path(
        [],
        "--push",
        file_in_option,
        "Helper file pushed into the run directory first (repeatable).",
    ),
    models: Path | None = options.models(
        "With --bundle: the model pair the requests run (the bundle must carry it: `as2d bundle build --models PAIR`).",
    ),
) -> EnergyRequests:
    """What each request runs (the request options as one EnergyRequests; the pair loaded
    once, here)."""
    from as2d_cli.models.model_pair import load_pair

    return EnergyRequests(
        methods,
        request_cmd,
        tuple(method_cmd),
        bundle,
        window,
        tuple(native_arg),
        tuple(push),
        None if models is None else load_pair(models, check_hashes=False),
    )


def _timing(
    poll_ms: int = options.count(250, "--poll-ms", help="Battery poll period (ms)."),
    warmups: int = options.count(1, "--warmups", minimum=0, help="Warm-up requests per method."),
    repeats: int = options.count(1, "--repeats", help="Formal requests per method."),
    request_budget_s: float = options.positive_seconds(
        120.0, "--request-budget-s", help="Longest a request may take; sizes the bounded trace."
    ),
    settle_s: float = options.seconds(
        3.0, "--settle-s", help="Idle time before the first request."
    ),
    gap_s: float = options.seconds(
        0.0,
        "--gap-s",
        help="Idle time between requests (0: back to back, so only a method's warm-up meets the gauge's lag).",
    ),
    tail_s: float = options.seconds(3.0, "--tail-s", help="Idle time after the last request."),
    discharge_wait_s: int = options.count(
        300,
        "--discharge-wait-s",
        minimum=0,
        help="How long the phone waits for USB to be pulled (seconds).",
    ),
) -> EnergyTiming:
    """The episode's pacing (the timing options as one EnergyTiming)."""
    return EnergyTiming(
        poll_ms, warmups, repeats, request_budget_s, settle_s, gap_s, tail_s, discharge_wait_s
    )


@grouped(
    requests=_requests,
    prompt=PROMPT,
    timing=_timing,
    measure=variant(MEASURE, drop=("settle", *PLACEMENT)),
)
def energy(
    phone: str | None = options.phone(
        None, "Phone to measure: a known name (see `as2d devices`) or a serial."
    ),
    requests: EnergyRequests = EnergyRequests(),
    prompt: PromptSpec = PromptSpec(),
    timing: EnergyTiming = EnergyTiming(),
    connection: str = typer.Option(
        "usb",
        "--connection",
        help="usb (unplug/replug) or wireless (adb over Wi-Fi, no cable).",
    ),
    baseline: str = typer.Option(
        "target-only", "--baseline", help="Method the others are compared with."
    ),
    out: Path = options.out_folder(
        Path("results"), "Results folder (a fresh energy/<time>-<phone>/ is made inside)."
    ),
    adb_port: int | None = options.adb_port(),
    from_run: Path | None = options.path(
        None, "--from-run", folder_in_option, "Analyse an existing run folder instead of measuring."
    ),
    collect: Path | None = typer.Option(
        None,
        "--collect",
        help="Fetch the run a phone kept (it left and did not come back in time, or the host was interrupted) into this run folder and analyse it.",
    ),
    measure: MeasureOptions = MeasureOptions(),
    quiet: bool = options.quiet(),
) -> None:
    """Measure request energy (J, W, J/token) from battery current × voltage, unplugged."""
    from as2d_cli.cli.progress import Steps

    with Steps("energy", quiet=quiet, count=False) as steps:
        held: list[str] = []  # what a Ctrl-C left: said once, as the command's last line

        def say(msg: str) -> None:
            if msg.startswith("Interrupted"):
                held.append(msg)
                return
            steps.note(f">>> {msg}", always=True)  # the protocol's instructions, even quiet

        if from_run is not None or collect is not None:
            path = _again(from_run, collect, baseline or None, adb_port, say)
        else:
            if not phone:
                raise UserError(
                    "pass --phone (see `as2d devices`), --from-run DIR or --collect DIR"
                )
            requests = _with_prompt(requests, prompt)
            settings = EnergySettings(
                phone, connection, baseline or None, out, adb_port, requests, timing, measure
            )
            path = _measure(settings, say, steps.update, held)
    typer.echo((path.parent / "table.md").read_text(), nl=False)
    typer.echo(f"results: {path}")


def _with_prompt(requests: EnergyRequests, prompt: PromptSpec) -> EnergyRequests:
    """The requests with the prompt options, checked against the pair they run (the
    bundled pair without --models) before any device is touched."""
    import dataclasses

    if prompt.empty:
        return requests
    folder = None if requests.pair is None else requests.pair.directory
    pair = options.model_pair(folder, prompt)
    return dataclasses.replace(requests, pair=pair if folder is not None else None, prompt=prompt)


def _given(*allowed: str) -> list[str]:
    """Options set on the command line, other than ``allowed``."""
    import importlib

    ctx = None
    for where in ("typer._click.globals", "click.globals"):  # typer ≥ 0.17 vendors click
        try:
            ctx = importlib.import_module(where).get_current_context(silent=True)
        except ImportError:
            continue
        if ctx is not None:
            break
    if ctx is None:
        return []
    found = []
    for p in ctx.command.params:
        if p.name in allowed or getattr(p, "param_type_name", "") != "option":
            continue
        source = ctx.get_parameter_source(p.name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            found.append(p.opts[0])
    return found


def _again(
    from_run: Path | None,
    collect: Path | None,
    baseline: str | None,
    adb_port: int | None,
    say: Callable[[str], None],
) -> Path:
    """--from-run (a pulled folder analysed again) or --collect (the run a phone kept)."""
    from as2d_cli.energy import protocol

    if from_run is not None and collect is not None:
        raise UserError(
            "pass --from-run DIR (analyse a pulled folder) or --collect DIR "
            "(fetch what the phone kept), not both"
        )
    if from_run is not None:
        extra = _given("from_run", "baseline")
        if extra:
            raise UserError(
                f"--from-run analyses a folder that was already measured; "
                f"{', '.join(extra)} cannot apply to it — drop "
                f"{'it' if len(extra) == 1 else 'them'}"
            )
        return protocol.reanalyse(from_run, baseline=baseline, say=say)
    assert collect is not None
    extra = _given("collect", "baseline", "adb_port")
    if extra:
        raise UserError(
            f"--collect fetches the run a phone kept and analyses it as it "
            f"was planned; {', '.join(extra)} cannot apply to it — drop "
            f"{'it' if len(extra) == 1 else 'them'}"
        )
    if not collect.is_dir():
        raise UserError(
            f"--collect {collect}: no such folder; pass the run folder the "
            "interrupted `as2d energy` named"
        )
    return protocol.collect(collect, baseline=baseline, say=say, adb_port=adb_port)


def _measure(
    settings: EnergySettings, say: Callable[[str], None], progress: Progress, held: list[str]
) -> Path:
    """The measurement itself; a Ctrl-C ends with what the protocol said it left."""
    from as2d_cli.energy import protocol
    from as2d_cli.energy.prepare import prepare_run

    run = prepare_run(settings, say)
    run.progress = progress
    try:
        return protocol.run_energy(run, say)
    except KeyboardInterrupt:
        if not held:
            raise
        tail = held[-1].removeprefix("Interrupted")
        sep = ";" if tail.startswith(":") else ""
        what = tail.lstrip(":").strip().rstrip(".")
        raise Interrupted(f"as2d energy interrupted{sep} {what}") from None


def register(app: typer.Typer) -> None:
    app.command("energy")(energy)
