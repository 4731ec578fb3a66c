"""Running a native evaluation's windows on the device, and resuming it.

Methods run window by window with a rotating order, pass after pass (warm-up passes
first), so they share machine conditions. Before each window's runs in a pass the device's
gate runs; during them the 1 Hz core monitor samples the device and the host's CPU times
are read before and after. Each finished run is appended to the run's records
(:mod:`native_record`) at once, so an interruption — Ctrl-C, a device error, a core going
offline — keeps it, and ``--append`` runs only what is missing."""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.engine.methods import DEFAULT_SD_K, MethodSpec
from as2d_cli.errors import DeviceError
from as2d_cli.evaluate.native_record import GATES, MONITOR, RUNS, EvalRun, NativeRecord
from as2d_cli.evaluate.native_stats import METHODS
from as2d_cli.formats import registry
from as2d_cli.formats.deployment import as2d_settings
from as2d_cli.models.prompting import PromptSpec
from as2d_cli.reporting import Progress, Say, settle_waiting

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

NATIVE_RUN_SCHEMA, NATIVE_RUN_VERSION = registry.name_version("as2d.native-run")


def pick_windows(ids: list[str], datasets: dict[str, str], n: int) -> list[str]:
    """``n`` windows spread round-robin over the datasets, in trace order."""
    by: dict[str, list[str]] = defaultdict(list)
    for i in ids:
        by[datasets[i]].append(i)
    out: list[str] = []
    while len(out) < min(n, len(ids)):
        for d in sorted(by):
            if by[d] and len(out) < n:
                out.append(by[d].pop(0))
    return out


def native_commands(dep: Any, asp_cap_: int) -> dict[str, dict[str, Any]]:
    """The decode settings of each natively run method in MethodSpec's wire form: the
    deployment's As²d (source, budget, threshold, batch, alignment) and the baselines'
    defaults."""
    specs = (
        MethodSpec("target-only"),
        MethodSpec("sd", k=DEFAULT_SD_K),
        MethodSpec("asp", budget=asp_cap_),
        MethodSpec("as2d", **as2d_settings(dep)),
    )
    return {s.method: s.to_wire() for s in specs}


def native_settings(
    device: Any,
    run: EvalRun,
    profile: Any,
    *,
    windows: int,
    repeats: int,
    warmup: int,
    pair: ModelPair | None,
) -> dict[str, Any]:
    """What this command would measure (``native.settings.json``; compared on --append) with
    the model ``pair`` (None: the bundled one)."""
    from as2d_cli.engine.methods import asp_cap
    from as2d_cli.formats.common import sha256_file
    from device_agents.identity import identify

    pair_id = (
        {"name": "bundled", "task": None, "language": None} if pair is None else pair.identity()
    )
    picks = pick_windows(run.window_ids, run.datasets, windows)
    dep = run.deployment
    ident = {
        k: v for k, v in identify(device).to_dict().items() if k != "connection"
    }  # not how it is reached
    return {
        "schema": NATIVE_RUN_SCHEMA,
        "version": NATIVE_RUN_VERSION,
        "windows": picks,
        "datasets": {w: run.datasets[w] for w in picks},
        "window_count": windows,
        "repeats": repeats,
        "warmup": warmup,
        "methods": list(METHODS),
        "commands": native_commands(dep, asp_cap(profile.max_width)),
        "deployment": {
            "path": str(Path(run.deployment_path).resolve()),
            "sha256": sha256_file(run.deployment_path),
            **as2d_settings(dep),
        },
        "profile": {
            "path": str(Path(run.profile_path).resolve()),
            "sha256": sha256_file(run.profile_path),
        },
        "pair": pair_id,
        "device": ident,
    }


def resume_command(
    phone: str,
    folder: Path,
    *,
    windows: int,
    repeats: int,
    warmup: int,
    models: Path | None,
    prompt: PromptSpec | None,
    gate: Any,
    default_gate: Any,
    placement: Any = None,
) -> str:
    """The command that resumes this run: its own settings and ``--append FOLDER``."""
    parts = [
        "as2d",
        "eval",
        "--phone",
        phone,
        "--native",
        "--windows",
        str(windows),
        "--repeats",
        str(repeats),
        "--warmup",
        str(warmup),
    ]
    spec = prompt or PromptSpec()
    for opt, val in (
        ("--models", models),
        ("--task", spec.task),
        ("--language", spec.language),
        ("--question", spec.question),
        ("--prompt", spec.text),
    ):
        if val is not None:
            parts += [opt, shlex.quote(str(val))]
    for opt, name in (("--rest", "rest_s"), ("--interval", "interval_s"), ("--settle", "settle_s")):
        if getattr(gate, name) != getattr(default_gate, name):
            parts += [opt, f"{getattr(gate, name):g}"]
    if gate.max_temp_c != default_gate.max_temp_c:
        parts += ["--max-temp", f"{gate.max_temp_c or 0:g}"]
    if gate.temp_sensor != default_gate.temp_sensor:
        parts += ["--temp-sensor", gate.temp_sensor]
    if placement is not None and placement.how == "os":
        parts += ["--os-placement"]
    elif placement is not None and placement.how == "option":
        for opt, cores in (
            ("--verifier-cores", placement.verifier),
            ("--producer-cores", placement.producer),
        ):
            if cores:
                parts += [opt, ",".join(map(str, cores))]
    return shlex.join(parts + ["--append", str(folder)])


@dataclass
class Unit:
    """One window's runs in one pass (rep < 0: an unmeasured warm-up pass)."""

    index: int  # 1-based, over all passes
    window: str
    rep: int
    order: tuple[str, ...]  # the methods, rotated by window and pass


def units(windows: list[str], repeats: int, warmup: int) -> list[Unit]:
    out: list[Unit] = []
    for rep in range(-warmup, repeats):
        for i, wid in enumerate(windows):
            k = (i + rep) % len(METHODS)
            out.append(Unit(len(out) + 1, wid, rep, METHODS[k:] + METHODS[:k]))
    return out


def run_windows(
    device: Any,
    record: NativeRecord,
    gate_cfg: Any,
    *,
    open_runner: Callable[..., Any],
    runner_opts: dict[str, Any],
    say: Say,
    monitor_interval_s: float,
    resume: str,
    progress: Progress | None = None,
) -> None:
    """Gate and run every window × pass × method the record does not hold yet, appending
    each run, gate and monitor record as it finishes. Ctrl-C becomes
    :class:`~as2d_cli.errors.Interrupted`, and a device error or a core going offline a
    one-line DeviceError; both say what is kept and the command that resumes."""
    from as2d_cli.errors import Interrupted

    s = record.settings
    plan = units(s["windows"], s["repeats"], s["warmup"])
    done = record.done()
    todo = [u for u in plan if any((u.window, u.rep, m) not in done for m in u.order)]
    n_runs = len(plan) * len(METHODS)
    if record.resumed:
        say(
            f"resuming the native evaluation in {record.folder}: {len(done)} of {n_runs} runs finished, "
            f"{n_runs - len(done)} to run"
        )
    if not todo:
        return
    say(
        f"native runs on {device.serial}: {len(s['windows'])} windows × {len(METHODS)} methods × {s['repeats']} "
        "repeats" + (f" after {s['warmup']} warm-up pass(es)" if s["warmup"] else "")
    )
    hint = lambda: f"{record.kept()}; resume with `{resume}`"  # noqa: E731
    try:
        with open_runner(device, **runner_opts) as runner:
            runner.call({"op": "hello"})
            settled = None
            if (
                gate_cfg.settle_s > 0
            ):  # once per session, with the models loaded, before its first window
                from device_agents.gating import settle

                say(
                    f"waiting until the host has been quiet for {gate_cfg.settle_s:g} s (--settle 0 skips)"
                )
                settled = settle(
                    device, gate_cfg.settle_s, waiting=settle_waiting(progress, gate_cfg.settle_s)
                )
                say(settled.message)
            for u in todo:
                if progress is not None:
                    progress(f"native runs: {u.window}", u.index - 1, len(plan))
                where = f"native window {u.index}/{len(plan)} ({u.window}{', warm-up' if u.rep < 0 else ''})"
                _gate(device, record, gate_cfg, u, settled if u is todo[0] else None, where, hint)
                _run_unit(
                    device,
                    runner,
                    record,
                    u,
                    [m for m in u.order if (u.window, u.rep, m) not in done],
                    done,
                    monitor_interval_s,
                    where,
                    hint,
                )
                say(
                    f"[{u.index}/{len(plan)}] {'warm-up ' if u.rep < 0 else ''}{u.window}: "
                    + "  ".join(f"{m} {done[(u.window, u.rep, m)]:.1f}" for m in METHODS)
                )
                if progress is not None:
                    progress(f"native runs: {u.window}", u.index, len(plan))
    except KeyboardInterrupt:
        raise Interrupted(f"native evaluation interrupted; {hint()}") from None
    except DeviceError as exc:
        if "resume with" in str(exc):
            raise
        raise DeviceError(f"native evaluation stopped: {exc}; {hint()}") from None


def _gate(
    device: Any,
    record: NativeRecord,
    gate_cfg: Any,
    u: Unit,
    settled: Any,
    where: str,
    hint: Callable[[], str],
) -> None:
    from device_agents.gating import run_gate

    g = run_gate(device, gate_cfg)  # the device's sysfs, before every window
    rec = {**g.to_dict(), "window": u.window, "rep": u.rep}
    if settled is not None:
        rec["observations"].insert(0, dataclasses.asdict(settled))
    record.append(GATES, rec)
    if not g.passed:
        raise DeviceError(f"{where} not started: {g.failure}; {hint()}")


def _cpu_since(before: Any, after: Any) -> dict[str, Any] | None:
    """The host CPU's shares between two /proc/stat readings (None: either unread)."""
    if before is None or after is None:
        return None
    return {
        **after.since(before),
        "jiffies": after.total - before.total,
        "steal_source": after.source,
    }


def _run_unit(
    device: Any,
    runner: Any,
    record: NativeRecord,
    u: Unit,
    methods: list[str],
    done: dict[tuple[str, int, str], float],
    monitor_interval_s: float,
    where: str,
    hint: Callable[[], str],
) -> None:
    """One window's missing runs in one pass under the core monitor. Locally each method is
    one runner call, recorded as it returns; on a phone the window's methods are one batch
    (one runner start), recorded when it returns. A run the monitor tripped during is not
    recorded (locally the runner is killed at once; a phone's batch ends first)."""
    from device_agents.monitor import CoreMonitor, abort_on_trip

    cmds = record.settings["commands"]
    finished: list[str] = []

    def keep(m: str, res: dict) -> None:
        record.append(
            RUNS, {"window": u.window, "rep": u.rep, "warmup": u.rep < 0, "method": m, "res": res}
        )
        done[(u.window, u.rep, m)] = res["tps"]
        finished.append(m)

    def decode(m: str) -> dict:
        return {"op": "decode", "window": u.window, "method": m, "events": False, **cmds[m]}

    before = _cpu(device)
    monitor = CoreMonitor(device, monitor_interval_s, on_trip=abort_on_trip(runner)).start()
    error: DeviceError | None = None
    try:
        if device.kind == "local":
            for m in methods:
                res = runner.call(decode(m))
                if monitor.failure is not None:
                    break
                keep(m, res)
        else:
            got = runner.batch([decode(m) for m in methods])
            if monitor.failure is None:
                for m, res in zip(methods, got):
                    keep(m, res)
    except DeviceError as exc:
        error = exc
    finally:
        monitor.stop()
        record.append(
            MONITOR,
            {
                "window": u.window,
                "rep": u.rep,
                "methods": methods,
                "finished": finished,
                **monitor.record(),
                "cpu": _cpu_since(before, _cpu(device)),
            },
        )
    f = monitor.failure
    if f is not None and f.kind == "core_offline":
        gone = ",".join(map(str, f.detail.get("offline", [])))
        raise DeviceError(
            f"native evaluation stopped: CPU{gone} went offline on {device.serial} {f.t_s:.1f} s into "
            f"{where} (at {time.strftime('%H:%M:%S', time.localtime(f.wall_time))}); the runs in "
            f"flight are discarded and the failure is recorded in {record.path(MONITOR)}; {hint()} "
            "once the phone has cooled down"
        )
    if error is not None:
        raise DeviceError(f"{where}: {error}; {hint()}")
    if f is not None:
        raise DeviceError(f"{where}: {f.message}; {hint()}")


def _cpu(device: Any) -> Any:
    from device_agents.gating import CpuTimes

    try:
        return CpuTimes.read_work(device)
    except DeviceError:  # the device left; the unit's error says so
        return None
