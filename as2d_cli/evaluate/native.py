"""`as2d eval --native`: the methods natively on the device, exactness, replay agreement.

Methods run window by window with a rotating order (and interleaved repetitions) so they
share machine conditions, gated before each window and watched by the 1 Hz core monitor
during its runs (``native_runs``); every finished run is recorded at once in the results
folder, so an interrupted evaluation resumes with ``--append`` (``native_record``). Every
output is compared with target-only on the same window: a difference is reported with its
first divergent position and both top-2 logit margins (Appendix F.6), never hidden.
Agreement follows D.3: the native-produced token trajectories (target tokens, the
source's published candidates, the serial drafts) are replayed with the frozen profile
(``native_replay``), and the signed TPS error 100·(TPS_replay/TPS_native − 1) is reported
per run; a window's error pools its repetitions (TPS over all its runs), and the table
gives the mean absolute per-window error and the pooled error (``native_stats``,
``native_render``). With a profile not measured on this device (synthetic, or another
device's: given explicitly with ``--profile``) the same figures are labelled an *expected
error*, not agreement (``summary.replay_vs_native``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from as2d_cli.errors import Interrupted
from as2d_cli.evaluate.inputs import profile_mismatch
from as2d_cli.evaluate.native_record import (
    GATES,
    MONITOR,
    RUNS,
    SETTINGS,
    EvalRun,
    NativeRecord,
    mark_native,
)
from as2d_cli.evaluate.native_render import (
    NATIVE_COLUMNS,
    render_native,
    write_native_outputs,
    write_native_table,
)
from as2d_cli.evaluate.native_replay import collect_runs, native_trace, price_rows, replay_native
from as2d_cli.evaluate.native_runs import (
    native_commands,
    native_settings,
    pick_windows,
    resume_command,
    run_windows,
)
from as2d_cli.evaluate.native_stats import (
    METHODS,
    comparison,
    divergence,
    host_per_pass,
    own_replay_times,
    summarize,
)
from as2d_cli.evaluate.settings import NativeSettings
from as2d_cli.formats.common import mark_complete, read_manifest
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.reporting import Progress, Say
from device_agents.gating import GateConfig
from device_agents.measurement import prepare

__all__ = [
    "METHODS",
    "NATIVE_COLUMNS",
    "NativeEvalOutput",
    "NativeSettings",
    "divergence",
    "native_commands",
    "native_trace",
    "pick_windows",
    "render_native",
    "replay_native",
    "run_native_eval",
    "summarize",
    "write_native_table",
]


@dataclass
class NativeEvalOutput:
    results: Path
    table: str
    summary: dict[str, Any]


def run_native_eval(
    phone: str,
    out: Any,
    s: NativeSettings,
    *,
    say: Say = lambda s: None,
    open_runner: Callable[..., Any] | None = None,
    measurement: Any = None,
    progress: Progress | None = None,
) -> NativeEvalOutput:
    """``out``: the replay part's output (``run_eval``), or with ``s.append`` the interrupted
    run's folder reopened (``native_record.reopen_eval``). ``measurement``: the device,
    identity, CPU placement and gate the command prepared once
    (device_agents.measurement.prepare; None: prepared here with the defaults).
    ``progress(label, done, total)`` hears of the settle wait and of each window's runs."""
    from as2d_cli.launch.host import open_runner as default_open_runner

    m = measurement or prepare(phone)
    run = EvalRun.of(out)
    profile = load_profile(run.profile_path)
    record, resume = _open_record(m, run, profile, s)
    tc, pc = m.placement.cores
    say(f"device {m.identity.describe()}; {m.placement.describe()}")
    runner_opts = {"pair": s.pair, "target_cores": tc, "producer_cores": pc}
    run_windows(
        m.device,
        record,
        s.gate or m.gate,
        open_runner=open_runner or default_open_runner,
        runner_opts=runner_opts,
        say=say,
        monitor_interval_s=s.monitor_interval_s,
        resume=resume,
        progress=progress,
    )
    return _finish(m, run, profile, record, resume)


def _open_record(m: Any, run: EvalRun, profile: Any, s: NativeSettings) -> tuple[Any, str]:
    """The run's native record, begun or (``append``) reopened after the refusals, and the
    command that resumes it; the folder is marked incomplete before its first native file."""
    device = m.device
    requested = native_settings(
        device,
        run,
        profile,
        windows=s.windows,
        repeats=s.repeats,
        warmup=s.warmup,
        pair=s.pair,
    )
    requested["placement"] = {k: v for k, v in m.placement.to_dict().items() if k != "clusters"}
    resume = resume_command(
        m.identity.phone_option,  # finds the phone again whatever its adb serial then
        run.folder,
        windows=s.windows,
        repeats=s.repeats,
        warmup=s.warmup,
        models=s.models,
        prompt=s.prompt,
        gate=s.gate or m.gate,
        default_gate=GateConfig.for_device(device),
        placement=m.placement,
    )
    if s.append:
        record = NativeRecord.resume(run.folder, requested)
        mark_native(run.folder, resume)
    else:
        NativeRecord.check_fresh(run.folder)
        mark_native(run.folder, resume)
        record = NativeRecord.start(run.folder, requested)
    return record, resume


def _finish(m: Any, run: EvalRun, profile: Any, record: Any, resume: str) -> NativeEvalOutput:
    """The summary and the native tables from every recorded run; the folder marked
    complete."""
    s = record.settings
    rows, warm = collect_runs(record.runs(), s["windows"], s["datasets"])
    price_rows(rows, profile)
    summary = summarize(rows, host_per_pass(record.monitor()), _own_runs(run.folder, s["windows"]))
    summary["warmup_divergences"] = warm
    # A synthetic profile or another device's (run with --profile given): an expected error.
    summary["replay_vs_native"] = comparison(profile_mismatch(profile, m.identity))
    files = {"settings": SETTINGS, "runs": RUNS, "gates": GATES, "monitor": MONITOR}
    try:
        # Replaced when a finishing cut short left some of them: the folder is still marked.
        path, table = write_native_outputs(
            run.folder,
            rows,
            summary,
            device=m.device,
            profile_path=run.profile_path,
            profile_device=dict(profile.device),
            settings=s,
            gates=record.gates(),
            sessions=record.session + 1,
            files=files,
        )
        if read_manifest(run.folder) is not None:
            mark_complete(run.folder)  # every file, with its size and sha256
    except KeyboardInterrupt:
        raise Interrupted(
            f"native evaluation interrupted while writing its tables; {record.kept()}; "
            f"finish it with `{resume}`"
        ) from None
    return NativeEvalOutput(path, table, summary)


def _own_runs(folder: Path, windows: list[str]) -> dict[str, dict[str, tuple[int, float]]] | None:
    """The replay part's own runs of the native windows (its per_window table in the same
    folder), for the ratio a profile-priced table reports; None when it is not there."""
    from as2d_cli.evaluate.tables import read_per_window

    path = folder / "per_window.csv"
    if not path.exists():
        return None
    return own_replay_times(read_per_window(path), windows)
