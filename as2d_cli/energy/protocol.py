"""The unplugged energy protocol, host side (paper D.6.1).

0. Refuse what cannot measure before anything runs: the local host, an unknown connection,
   a phone without perfetto/traced or whose battery status cannot be read (preflight); then
   gate the phone as calibration and evaluation do (rest, temperature, cores online,
   frequency ceiling) while it is still attached.
1. Build the TraceConfig and the episode script, push both (and any helper files) into a
   per-run directory on the phone; record the phone's identity and that directory in the
   local run folder (phone_run.json); start the episode under nohup.
2. Tell the user to unplug; wait (adbutils track_devices) until the phone leaves the adb
   server. The phone waits for Discharging, starts Perfetto, runs the requests, stamps them.
3. Tell the user when to replug; wait until the phone returns, then until the bounded
   trace has ended by itself on the phone's clock.
4. Pull every file of the phone's run directory and the trace into the local run folder,
   then remove them from the phone; analyse, write results. A refusal still leaves the
   trace and records in that folder (refused.txt says why).

The phone's run directory is removed only after everything in it was pulled. When a run
fails midway with the phone reachable, what it wrote is pulled first; when the phone is
gone (it never came back), the directory stays on it and `collect` fetches it later.

Over wireless adb the phone never leaves, so steps 2–3 reduce to waiting.

The 1 Hz monitor samples the phone from the launch until the episode is done, whenever it
reaches it (over USB: until the cable comes out and after it is back). A core going
offline makes the host write ``stop.host`` into the run directory; the episode's own
checks before and after every request catch what the host cannot see while unplugged.
Either way the episode skips its later requests, the request that was running is not a
measurement, everything finished before is analysed and kept in energy.json (status
``stopped``), and the command ends with one line saying so.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from as2d_cli import __version__
from as2d_cli.energy.capture_config import CaptureSpec
from as2d_cli.energy.collect import analyse_run_folder
from as2d_cli.energy.collect import collect as collect
from as2d_cli.energy.collect import reanalyse as reanalyse
from as2d_cli.energy.episode_script import ONLINE_FILE, EpisodePlan, render_script
from as2d_cli.energy.gauge_probe import PROBE_MAX_S, probe_device, size_plan
from as2d_cli.energy.perfetto_capture import CONFIG_NAME, preflight, push_config, trace_path_for
from as2d_cli.energy.phone_run import (
    AWAY_GRACE_S,
    PHONE_RUN,
    PHONE_RUN_SCHEMA,
    PHONE_RUN_VERSION,
    PhoneAway,
    PhoneRun,
    make_remote_dir,
    raise_if_stopped,
    wait_presence,
    write_json,
    write_phone_run,
)
from as2d_cli.energy.phone_wait import PhoneMonitor, away_error, finish_on_phone, salvaged
from as2d_cli.energy.results import GATE_NAME, new_run_dir
from as2d_cli.errors import As2dError, DeviceError, UserError
from as2d_cli.formats.common import write_atomic
from as2d_cli.reporting import Progress, Say, Ticker
from device_agents.base import Device
from device_agents.gating import GateConfig, GateResult

CONNECTIONS = ("usb", "wireless")


@dataclass
class EnergyRun:
    device: Device
    plan: EpisodePlan
    results_root: Path
    phone_label: str
    poll_ms: int = 250
    connection: str = "usb"  # usb: the phone leaves adb while unplugged; wireless: it stays
    baseline: str | None = "target-only"
    push_files: list[Path] = field(default_factory=list)  # helpers the request command uses
    leave_timeout_s: float | None = None  # default: the phone's discharge wait + 30 s
    # How long a phone that left may stay away (unplugged, or a dropped wireless link)
    # before the host stops waiting; default: the trace's length + AWAY_GRACE_S.
    return_timeout_s: float | None = None
    episode_timeout_s: float | None = None  # default: discharge wait + trace + 120 s
    phone_facts: dict = field(default_factory=dict)
    preflight_done: bool = False  # the caller already ran perfetto_capture.preflight
    gate: GateConfig | None = None  # the gate before the capture; None: the phone's default
    monitor_interval_s: float = 1.0  # the monitor's sampling period while it reaches the phone
    # How long the gauge is probed before the capture (gauge_probe); 0: not probed, the
    # warm-ups are not sized from its period.
    gauge_probe_s: float = PROBE_MAX_S
    progress: Progress | None = None  # told how far the capture is while the phone measures


def check_measurable(phone: str | None, connection: str) -> None:
    """Refuse option combinations that cannot measure, before any device is touched."""
    if connection not in CONNECTIONS:
        raise UserError(
            f"--connection {connection!r} must be usb (the cable is pulled for the "
            "capture) or wireless (adb over Wi-Fi, charger off)"
        )
    if phone == "local":
        if connection == "wireless":
            raise UserError(
                "--phone local with --connection wireless cannot measure: wireless "
                "adb reaches phones, not this host, and this host has no battery "
                "counters Perfetto can read; measure a phone (--phone NAME or "
                "SERIAL, see `as2d devices`)"
            )
        raise UserError(
            "--phone local cannot measure energy: this host has no battery counters "
            "Perfetto can read (its android.power data source exists only on "
            "Android phones); measure a phone (--phone NAME or SERIAL, see "
            "`as2d devices`)"
        )


def window_ids(window: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The requested --window ids (repeatable and/or comma-separated)."""
    items = [window] if isinstance(window, str) else list(window or [])
    return [w.strip() for item in items for w in item.split(",") if w.strip()]


def check_windows(ids: list[str]) -> None:
    """Every id must be a corpus window; one line for the first that is not."""
    from as2d_cli.corpus.manifest import load_corpus

    corpus = load_corpus()
    for wid in ids:
        try:
            corpus.get(wid)
        except UserError as exc:
            raise UserError(f"--window {wid}: {exc}") from None


def run_energy(run: EnergyRun, say: Say) -> Path:
    """The whole protocol; returns the written energy.json."""
    plan = run.plan
    plan.validate()
    dev = run.device
    check_measurable("local" if dev.kind == "local" else dev.serial, run.connection)
    port = getattr(dev, "port", None)
    if port is None:
        raise UserError(
            "the energy protocol needs a phone on an adb server; this device has "
            "no battery counters Perfetto can read"
        )
    spec = CaptureSpec(duration_ms=plan.trace_duration_ms(), poll_ms=run.poll_ms)
    spec.validate()
    if not run.preflight_done:
        preflight(dev)
    from device_agents.identity import identify

    identity = identify(dev).to_dict()
    gate = _gate(dev, run.gate, say)  # while the phone is attached: nothing is made before
    plan = _with_cores_online(plan, dev)
    if run.gauge_probe_s > 0:  # the warm-ups and gaps sized from the gauge, said in one line
        plan, line = size_plan(plan, probe_device(dev, run.gauge_probe_s), run.poll_ms)
        say(line)
    out_dir = new_run_dir(run.results_root, run.phone_label)  # marked INCOMPLETE
    try:
        return _measure(run, out_dir, plan, spec, gate, identity, port, say)
    except KeyboardInterrupt:
        say(_interrupted(out_dir))
        raise


def _interrupted(out_dir: Path) -> str:
    """What a Ctrl-C left and what finishes it, from the run folder's phone record."""
    try:
        rec = json.loads((out_dir / PHONE_RUN).read_text())
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict):
        return (
            f"Interrupted before the episode was started on the phone: nothing was measured; "
            f"delete {out_dir}."
        )
    if rec.get("state") == "collected":
        return (
            f"Interrupted: everything the phone wrote is in {out_dir}; analyse it with "
            f"`as2d energy --from-run {out_dir}`."
        )
    return (
        f"Interrupted: the phone keeps this run in {rec.get('run_dir')} until it is "
        f"collected; run `as2d energy --collect {out_dir}` when it is attached again."
    )


def _measure(
    run: EnergyRun,
    out_dir: Path,
    plan: EpisodePlan,
    spec: CaptureSpec,
    gate: GateResult,
    identity: dict,
    port: int,
    say: Say,
) -> Path:
    """The protocol from its fresh run folder on: returns the written energy.json."""
    dev = run.device
    _write_plan(out_dir, run, plan, spec, gate)
    trace_s = spec.duration_ms / 1000
    away_s = run.return_timeout_s if run.return_timeout_s is not None else trace_s + AWAY_GRACE_S
    episode_s = run.episode_timeout_s or plan.discharge_wait_s + trace_s + 120
    facts = dict(run.phone_facts)
    facts.setdefault("serial", dev.serial)
    facts.setdefault("connection", run.connection)
    facts.setdefault("identity", identity)

    rd = make_remote_dir(dev)
    ph = PhoneRun(
        dev,
        port,
        rd,
        trace_path_for(rd),
        out_dir,
        {"episode.sh", CONFIG_NAME} | {Path(f).name for f in run.push_files},
    )
    write_phone_run(out_dir, _phone_record(ph, run, identity, episode_s, facts))
    th: threading.Thread | None = None
    monitor = PhoneMonitor(ph, run.monitor_interval_s)
    ticker = Ticker(run.progress, "capturing on the phone", trace_s)
    try:
        _push_episode(ph, run, plan, spec)
        monitor.start()  # from before the launch until the episode is done
        ticker.start()
        th = _launch_episode(ph, episode_s)
        _wait_out_the_capture(ph, run, plan, trace_s, away_s, say)
        finish_on_phone(ph, spec, episode_s, away_s, say, on_done=monitor.stop)
    except (PhoneAway, KeyboardInterrupt):
        raise
    except As2dError as exc:
        monitor.stop()
        raise salvaged(ph, exc, say) from None
    finally:
        monitor.stop()
        ticker.stop()
    if th is not None:
        th.join(timeout=5)
    path = analyse_run_folder(out_dir, plan, spec, run.baseline, facts, say)
    raise_if_stopped(path)
    return path


def _write_plan(
    out_dir: Path, run: EnergyRun, plan: EpisodePlan, spec: CaptureSpec, gate: GateResult
) -> None:
    """The run folder's raw/ and its record of the gate and of the plan."""
    (out_dir / "raw").mkdir()
    write_json(out_dir / GATE_NAME, gate.to_dict())
    write_atomic(
        out_dir / "plan.json",
        (
            json.dumps(
                {
                    "plan": asdict(plan),
                    "poll_ms": spec.poll_ms,
                    "duration_ms": spec.duration_ms,
                    "connection": run.connection,
                },
                indent=2,
            )
            + "\n"
        ).encode("utf-8"),
    )


def _phone_record(
    ph: PhoneRun, run: EnergyRun, identity: dict, episode_s: float, facts: dict
) -> dict:
    """phone_run.json: the phone's identity and where its run lives (for --collect)."""
    return {
        "schema": PHONE_RUN_SCHEMA,
        "version": PHONE_RUN_VERSION,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "serial": ph.device.serial,
        "adb_port": ph.port,
        "connection": run.connection,
        "identity": identity,
        "run_dir": ph.run_dir,
        "trace": ph.trace,
        "exclude": sorted(ph.exclude),
        "episode_timeout_s": episode_s,
        "phone_facts": facts,
        "state": "on-phone",
    }


def _push_episode(ph: PhoneRun, run: EnergyRun, plan: EpisodePlan, spec: CaptureSpec) -> None:
    """The TraceConfig, the episode script (kept locally too) and the helpers pushed into
    the phone's run directory."""
    dev, rd, out_dir = ph.device, ph.run_dir, ph.out_dir
    cfg_remote = push_config(dev, rd, spec, keep_copy=out_dir / "trace_config.pb")
    script = render_script(plan, rd, cfg_remote, ph.trace, __version__)
    write_atomic(out_dir / "episode.sh", script.encode("utf-8"))
    dev.push(out_dir / "episode.sh", f"{rd}/episode.sh")
    for f in run.push_files:
        dev.push(Path(f), f"{rd}/{Path(f).name}")


def _launch_episode(ph: PhoneRun, episode_s: float) -> threading.Thread:
    """The episode started under nohup from a thread: over USB its shell ends when the
    cable comes out, while the phone carries on."""
    rd = ph.run_dir
    launch = f"nohup sh {rd}/episode.sh > {rd}/episode.log 2> {rd}/episode.err"
    box: dict[str, object] = {}

    def launch_episode() -> None:
        try:
            box["result"] = ph.device.shell(launch, deadline_s=episode_s)
        except DeviceError as exc:  # the cable came out: expected, the phone carries on
            box["error"] = exc

    th = threading.Thread(target=launch_episode, name="as2d-energy-episode", daemon=True)
    th.start()
    return th


def _wait_out_the_capture(
    ph: PhoneRun, run: EnergyRun, plan: EpisodePlan, trace_s: float, away_s: float, say: Say
) -> None:
    """Over USB: tell the user to unplug, wait until the phone leaves, tell them when to
    replug and wait until it is back. Over wireless adb: say how long it measures."""
    dev, port = ph.device, ph.port
    if run.connection != "usb":
        say(f"Wireless adb: keep the phone off any charger; measuring for about {trace_s:.0f} s.")
        return
    leave = run.leave_timeout_s or plan.discharge_wait_s + 30
    say(
        f"Unplug the USB cable now. The phone waits up to {plan.discharge_wait_s} s for "
        f"'Discharging', then measures for about {trace_s:.0f} s on its own."
    )
    if not wait_presence(port, dev.serial, False, leave):
        raise UserError(
            f"phone {dev.serial} is still attached after {leave:.0f} s; it "
            "must be unplugged for the measurement (or pass --connection "
            "wireless when it is on wireless adb with no charger)"
        )
    until = datetime.now() + timedelta(seconds=trace_s + 5)
    say(
        f"Unplugged. Leave it unplugged for {trace_s + 5:.0f} s (until "
        f"{until:%H:%M:%S}), then plug it back in."
    )
    if not wait_presence(port, dev.serial, True, away_s):
        raise away_error(ph, away_s)
    say("Phone is back; collecting the trace.")


def _gate(dev: Device, config: GateConfig | None, say: Say) -> GateResult:
    """The gate before the capture (rest, temperature, every core online, the frequency
    ceiling), with the phone attached; one line when it fails, before anything is made."""
    from device_agents.gating import run_gate

    config = config or GateConfig.for_device(dev)
    if config.rest_s > 0 or (config.checks > 1 and config.interval_s > 0):
        say(f"Checking the phone before the capture (about {_gate_s(config):.0f} s).")
    result = run_gate(dev, config)
    if not result.passed:
        raise DeviceError(
            f"{result.failure}; nothing was measured — let the phone idle and cool down, "
            "then run the same command again"
        )
    return result


def _gate_s(config: GateConfig) -> float:
    return config.rest_s + max(0, config.checks - 1) * config.interval_s


def _with_cores_online(plan: EpisodePlan, dev: Device) -> EpisodePlan:
    """The plan with the cores online now (the gate just saw them all), which the episode
    checks before and after every request; unchanged when the phone has no such file."""
    import dataclasses
    import re

    text = (dev.read_files([ONLINE_FILE]).get(ONLINE_FILE) or "").strip()
    if not re.fullmatch(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*", text):
        return plan
    return dataclasses.replace(plan, cores_online=text)
