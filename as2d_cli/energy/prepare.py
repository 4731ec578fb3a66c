"""Everything `as2d energy` checks and sets up before it measures: the options that cannot
measure are refused before any device is touched, the phone is checked (perfetto, traced,
battery status) before anything is pushed or the user is asked to unplug, and the
bundle's native request command is deployed. Returns the run for :func:`protocol.run_energy`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from as2d_cli.energy.protocol import EnergyRun, check_measurable, check_windows, window_ids
from as2d_cli.errors import UserError


def prepare_run(
    phone: str,
    *,
    connection: str,
    methods: str,
    request_cmd: str | None,
    method_cmd: Sequence[str],
    bundle: Path | None,
    window: str | None,
    native_arg: Sequence[str],
    push: Sequence[Path],
    poll_ms: int,
    warmups: int,
    repeats: int,
    request_budget_s: float,
    settle_s: float,
    gap_s: float,
    tail_s: float,
    discharge_wait_s: int,
    baseline: str | None,
    out: Path,
    adb_port: int | None,
    models: Path | None,
    say: Callable[[str], None],
    rest_s: float | None = None,
    interval_s: float | None = None,
    max_temp_c: float | None = None,
    temp_sensor: str | None = None,
) -> EnergyRun:
    """The energy run the options describe, or one clear error line."""
    from device_agents.identity import identify

    # Everything that cannot measure is refused before any device is touched.
    check_measurable(phone, connection)
    if bundle is not None and (request_cmd or method_cmd):
        raise UserError(
            "--bundle runs the native requests itself; drop --request-cmd "
            "and --method-cmd (or drop --bundle)"
        )
    windows = window_ids(window)
    if windows and bundle is None:
        raise UserError(
            "--window names the corpus window the bundle's native requests "
            "transcribe; your --request-cmd/--method-cmd does not read it — "
            "drop --window or pass --bundle"
        )
    if bundle is not None and not windows:
        raise UserError(
            "--bundle needs --window: the corpus window the requests "
            "transcribe (see `as2d corpus list`)"
        )
    check_windows(windows)
    if len(windows) > 1:
        raise UserError(
            f"--window: one window per run (got {', '.join(windows)}); run "
            "`as2d energy` once per window"
        )
    if bundle is None and not request_cmd and not method_cmd:
        raise UserError(
            "pass --bundle ARCHIVE --window ID to run the native runner's "
            "requests, or --request-cmd for your own request command"
        )
    if bundle is not None and not bundle.is_file():
        raise UserError(f"--bundle {bundle}: no such file; build it with `as2d bundle build`")
    cmds: list[tuple[str, str]] = []
    for item in method_cmd:
        name, sep, cmd = item.partition("=")
        if not sep or not name or not cmd:
            raise UserError(f"--method-cmd {item!r} must be METHOD=COMMAND")
        cmds.append((name.strip(), cmd))
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    missing = [m for m in names if not request_cmd and bundle is None and m not in dict(cmds)]
    if missing:
        raise UserError(
            f"no request command for {', '.join(missing)}; pass --request-cmd "
            "or --method-cmd METHOD=COMMAND for each"
        )
    from as2d_cli.energy.episode_script import EpisodePlan
    from as2d_cli.energy.perfetto_capture import preflight
    from device_agents.registry import resolve_phone

    # With --bundle the request command is known after deployment; "true" stands in
    # for the checks of everything else before touching the phone.
    plan = EpisodePlan(
        methods=names,
        request_cmd=request_cmd or ("true" if bundle else ""),
        method_cmds=tuple(cmds),
        formal_repeats=repeats,
        warmups=warmups,
        settle_s=settle_s,
        gap_s=gap_s,
        tail_s=tail_s,
        request_budget_s=request_budget_s,
        discharge_wait_s=discharge_wait_s,
    )
    plan.validate()
    device = resolve_phone(phone, adb_port)
    # perfetto, traced and the battery status, before anything is pushed (the bundle
    # too) and before the user is asked to unplug.
    preflight(device)
    if bundle is not None:
        from as2d_cli.bundle.deploy import deploy
        from as2d_cli.energy.bundle_request import bundle_request_template

        say(f"deploying {bundle.name} to {device.serial} (once per bundle)")
        deployed = deploy(device, bundle)
        extra = list(native_arg)
        if models is not None:
            from as2d_cli.bundle.build import pair_folder

            rel = pair_folder(models)
            if f"app/{rel}/models.json" not in (deployed.manifest.get("project") or {}).get(
                "assets", []
            ):
                raise UserError(
                    f"--bundle {bundle.name} does not carry the pair {models}; build it with "
                    f"`as2d bundle build --models {models}`"
                )
            extra += ["--models", "package:" + rel.removeprefix("as2d_cli/")]
        plan = dataclasses.replace(
            plan, request_cmd=bundle_request_template(deployed, windows[0], extra)
        )
        plan.validate()
    facts: dict = {}
    try:
        facts = {"facts": device.facts().to_dict()}
    except Exception as exc:  # noqa: BLE001 - facts are context, never a reason to stop
        facts = {"facts_error": str(exc)}
    from device_agents.gating import GateConfig

    gate = GateConfig.for_device(device)
    changes: dict = {
        k: v
        for k, v in (("rest_s", rest_s), ("interval_s", interval_s), ("temp_sensor", temp_sensor))
        if v is not None
    }
    if max_temp_c is not None:
        changes["max_temp_c"] = None if max_temp_c == 0 else max_temp_c
    run = EnergyRun(
        device=device,
        plan=plan,
        results_root=out,
        phone_label=identify(device).name,
        poll_ms=poll_ms,
        connection=connection,
        baseline=baseline,
        push_files=list(push),
        phone_facts=facts,
        preflight_done=True,
        gate=dataclasses.replace(gate, **changes),
    )
    return run
