"""Everything `as2d energy` checks and sets up before it measures: the options that cannot
measure are refused before any device is touched, the phone is checked (perfetto, traced,
battery status) before anything is pushed or the user is asked to unplug, and the
bundle's native request command is deployed. Returns the run for :func:`protocol.run_energy`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import UserError
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:  # the protocol is heavy: imported when a run is prepared, not with the CLI
    from as2d_cli.energy.protocol import EnergyRun
    from as2d_cli.models.model_pair import ModelPair


@dataclass(frozen=True)
class EnergyRequests:
    """What each request runs: ``methods`` in measurement order (comma-separated), by one
    ``request_cmd``, a command per method (``method_cmd``: METHOD=COMMAND), or the native
    runner of a ``bundle`` archive on corpus ``window`` (with ``native_arg``, the model
    ``pair`` the bundle carries and its ``prompt`` settings: task, language, question,
    instruction); ``push``: helper files pushed into the run directory first."""

    methods: str = "as2d,target-only"
    request_cmd: str | None = None
    method_cmd: tuple[str, ...] = ()
    bundle: Path | None = None
    window: str | None = None
    native_arg: tuple[str, ...] = ()
    push: tuple[Path, ...] = ()
    pair: ModelPair | None = None
    prompt: PromptSpec = PromptSpec()


@dataclass(frozen=True)
class EnergyTiming:
    """The episode's pacing: battery poll period, warm-ups and formal requests per method,
    the idle times around them and how long the phone waits to be unplugged."""

    poll_ms: int = 250
    warmups: int = 1
    repeats: int = 1
    request_budget_s: float = 120.0
    settle_s: float = 3.0
    gap_s: float = 0.0
    tail_s: float = 3.0
    discharge_wait_s: int = 300


@dataclass(frozen=True)
class EnergySettings:
    """One energy measurement, as the `as2d energy` options describe it (built once)."""

    phone: str
    connection: str = "usb"
    baseline: str | None = None
    out: Path = Path("results")
    adb_port: int | None = None
    requests: EnergyRequests = field(default_factory=EnergyRequests)
    timing: EnergyTiming = field(default_factory=EnergyTiming)
    measure: MeasureOptions = field(default_factory=MeasureOptions)  # the gate's options


def prepare_run(s: EnergySettings, say: Callable[[str], None]) -> EnergyRun:
    """The energy run the settings describe, or one clear error line."""
    from as2d_cli.energy.perfetto_capture import preflight
    from as2d_cli.energy.protocol import EnergyRun, check_measurable
    from device_agents.identity import identify
    from device_agents.measurement import gate_for
    from device_agents.registry import resolve_phone

    # Everything that cannot measure is refused before any device is touched.
    check_measurable(s.phone, s.connection)
    windows, cmds, names = _checked_requests(s.requests)
    plan = _plan(s, names, cmds)
    device = resolve_phone(s.phone, s.adb_port)
    # perfetto, traced and the battery status, before anything is pushed (the bundle
    # too) and before the user is asked to unplug.
    preflight(device)
    if s.requests.bundle is not None:
        plan = _bundle_plan(device, s.requests, windows[0], plan, say)
    facts: dict = {}
    try:
        facts = {"facts": device.facts().to_dict()}
    except Exception as exc:  # noqa: BLE001 - facts are context, never a reason to stop
        facts = {"facts_error": str(exc)}
    return EnergyRun(
        device=device,
        plan=plan,
        results_root=s.out,
        phone_label=identify(device).name,
        poll_ms=s.timing.poll_ms,
        connection=s.connection,
        baseline=s.baseline,
        push_files=list(s.requests.push),
        phone_facts=facts,
        preflight_done=True,
        gate=gate_for(device, s.measure),
    )


def _checked_requests(
    r: EnergyRequests,
) -> tuple[list[str], list[tuple[str, str]], tuple[str, ...]]:
    """The request options that cannot measure, refused: returns the window ids, the
    per-method commands and the method names."""
    from as2d_cli.energy.protocol import check_windows, window_ids

    if r.bundle is not None and (r.request_cmd or r.method_cmd):
        raise UserError(
            "--bundle runs the native requests itself; drop --request-cmd "
            "and --method-cmd (or drop --bundle)"
        )
    windows = window_ids(r.window)
    if windows and r.bundle is None:
        raise UserError(
            "--window names the corpus window the bundle's native requests "
            "transcribe; your --request-cmd/--method-cmd does not read it — "
            "drop --window or pass --bundle"
        )
    if r.bundle is not None and not windows:
        raise UserError(
            "--bundle needs --window: the corpus window the requests "
            "transcribe (see `as2d corpus list`)"
        )
    if not r.prompt.empty and r.bundle is None:
        raise UserError(
            "--task, --language, --question and --prompt set the bundle's native requests; "
            "your --request-cmd/--method-cmd carries its own — drop them or pass --bundle"
        )
    check_windows(windows)
    if len(windows) > 1:
        raise UserError(
            f"--window: one window per run (got {', '.join(windows)}); run "
            "`as2d energy` once per window"
        )
    if r.bundle is None and not r.request_cmd and not r.method_cmd:
        raise UserError(
            "pass --bundle ARCHIVE --window ID to run the native runner's "
            "requests, or --request-cmd for your own request command"
        )
    if r.bundle is not None and not r.bundle.is_file():
        raise UserError(f"--bundle {r.bundle}: no such file; build it with `as2d bundle build`")
    cmds: list[tuple[str, str]] = []
    for item in r.method_cmd:
        name, sep, cmd = item.partition("=")
        if not sep or not name or not cmd:
            raise UserError(f"--method-cmd {item!r} must be METHOD=COMMAND")
        cmds.append((name.strip(), cmd))
    names = tuple(m.strip() for m in r.methods.split(",") if m.strip())
    missing = [m for m in names if not r.request_cmd and r.bundle is None and m not in dict(cmds)]
    if missing:
        raise UserError(
            f"no request command for {', '.join(missing)}; pass --request-cmd "
            "or --method-cmd METHOD=COMMAND for each"
        )
    return list(windows), cmds, names


def _plan(s: EnergySettings, names: tuple[str, ...], cmds: list[tuple[str, str]]) -> Any:
    """The episode plan, validated before the phone is touched."""
    from as2d_cli.energy.episode_script import EpisodePlan

    t = s.timing
    # With --bundle the request command is known after deployment; "true" stands in
    # for the checks of everything else before touching the phone.
    plan = EpisodePlan(
        methods=names,
        request_cmd=s.requests.request_cmd or ("true" if s.requests.bundle else ""),
        method_cmds=tuple(cmds),
        formal_repeats=t.repeats,
        warmups=t.warmups,
        settle_s=t.settle_s,
        gap_s=t.gap_s,
        tail_s=t.tail_s,
        request_budget_s=t.request_budget_s,
        discharge_wait_s=t.discharge_wait_s,
    )
    plan.validate()
    return plan


def _bundle_plan(
    device: Any, r: EnergyRequests, window: str, plan: Any, say: Callable[[str], None]
) -> Any:
    """The bundle deployed (once per bundle) and its native request command in the plan."""
    from as2d_cli.bundle.deploy import deploy
    from as2d_cli.energy.bundle_request import bundle_request_template

    assert r.bundle is not None
    say(f"deploying {r.bundle.name} to {device.serial} (once per bundle)")
    deployed = deploy(device, r.bundle)
    extra = list(r.native_arg)
    if r.pair is not None:
        from as2d_cli.bundle.build import pair_folder

        rel, folder = pair_folder(r.pair), r.pair.directory
        if f"app/{rel}/models.json" not in (deployed.manifest.get("project") or {}).get(
            "assets", []
        ):
            raise UserError(
                f"--bundle {r.bundle.name} does not carry the pair {folder}; build it with "
                f"`as2d bundle build --models {folder}`"
            )
        extra += ["--models", deployed.carried(rel)]
    if not r.prompt.empty:
        extra += ["--prompt-spec", json.dumps(r.prompt.to_wire(), separators=(",", ":"))]
    plan = dataclasses.replace(plan, request_cmd=bundle_request_template(deployed, window, extra))
    plan.validate()
    return plan
