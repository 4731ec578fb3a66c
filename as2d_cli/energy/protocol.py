"""The unplugged energy protocol, host side (paper D.6.1).

1. Build the TraceConfig and the episode script, push both (and any helper files) into a
   per-run directory on the phone; start the episode under nohup.
2. Tell the user to unplug; wait (adbutils track_devices) until the phone leaves the adb
   server. The phone waits for Discharging, starts Perfetto, runs the requests, stamps them.
3. Tell the user when to replug; wait until the phone returns, then until the bounded
   trace has ended by itself on the phone's clock.
4. Pull the trace and the raw records into a fresh results folder, analyse, write results.
   A refusal still leaves the trace and records in that folder (refused.txt says why).

Over wireless adb the phone never leaves, so steps 2–3 reduce to waiting.
"""

from __future__ import annotations

import json
import posixpath
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from as2d_cli import __version__
from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import (
    COUNTERS_OPTIONAL,
    COUNTERS_REQUIRED,
    CaptureSpec,
)
from as2d_cli.energy.episode_records import format_episode
from as2d_cli.energy.episode_script import EpisodePlan, assemble_episode, render_script
from as2d_cli.energy.refusals import MeasurementRefused
from as2d_cli.energy.results import TRACE_NAME, new_run_dir, write_results
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import DeviceError, UserError
from device_agents.base import Device
from device_agents.perfetto_capture import (
    push_config,
    remove_trace,
    trace_path_for,
    wait_trace_end,
)

Say = Callable[[str], None]


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
    return_timeout_s: float = 3600.0
    phone_facts: dict = field(default_factory=dict)


def _present(port: int, serial: str) -> bool:
    import adbutils

    try:
        client = adbutils.AdbClient(host="127.0.0.1", port=port, socket_timeout=5)
        return any(d.serial == serial and d.state == "device" for d in client.list())
    except Exception:  # noqa: BLE001 - a server hiccup reads as "not there yet"
        return False


def wait_presence(port: int, serial: str, present: bool, timeout_s: float) -> bool:
    """Wait until `serial` is attached in state 'device' (present=True) or has left the
    adb server (present=False). The server's track-devices stream (adbutils) wakes us on
    every change; the device list is the truth checked after each wake-up. False on timeout.
    """
    import adbutils

    wake: "queue.Queue[object]" = queue.Queue()
    stop = threading.Event()

    def pump() -> None:
        while not stop.is_set():
            client = adbutils.AdbClient(host="127.0.0.1", port=port, socket_timeout=2)
            try:
                for ev in client.track_devices():
                    wake.put(ev)
                    if stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - read timeouts and server restarts: re-subscribe
                time.sleep(0.2)

    threading.Thread(target=pump, name="as2d-track-devices", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if _present(port, serial) == present:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                wake.get(timeout=min(1.0, left))
            except queue.Empty:
                pass
    finally:
        stop.set()


def _read_text_files(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file():
            out[p.name] = p.read_text(errors="replace")
    return out


def analyse_run_folder(out_dir: Path, plan: EpisodePlan, spec: CaptureSpec,
                       baseline: str | None, phone_facts: dict) -> Path:
    """Analyse a folder holding raw/ records and the trace; write results (or refused.txt)."""
    episode = assemble_episode(plan, _read_text_files(out_dir / "raw"))
    (out_dir / "episode.tsv").write_text(format_episode(episode))
    try:
        series = read_battery_series(out_dir / TRACE_NAME)
        analysis = analyse_episode(series, episode, baseline=baseline)
    except MeasurementRefused as exc:
        (out_dir / "refused.txt").write_text(str(exc) + "\n")
        raise MeasurementRefused(f"{exc} (trace and records kept in {out_dir})") from None
    counters = list(series.counters_requested) or list(COUNTERS_REQUIRED + COUNTERS_OPTIONAL)
    return write_results(out_dir, analysis, episode, out_dir / TRACE_NAME, spec, phone_facts,
                         asdict(plan), counters)


def run_energy(run: EnergyRun, say: Say) -> Path:
    """The whole protocol; returns the written energy.json."""
    plan = run.plan
    plan.validate()
    if run.connection not in ("usb", "wireless"):
        raise UserError(f"--connection {run.connection!r} must be usb or wireless")
    port = getattr(run.device, "port", None)
    if run.connection == "usb" and port is None:
        raise UserError("the unplugged protocol needs a phone on an adb server; the local host "
                        "has no battery gauge to measure")
    spec = CaptureSpec(duration_ms=plan.trace_duration_ms(), poll_ms=run.poll_ms)
    spec.validate()
    out_dir = new_run_dir(run.results_root, run.phone_label)
    raw = out_dir / "raw"
    raw.mkdir()
    (out_dir / "plan.json").write_text(json.dumps(
        {"plan": asdict(plan), "poll_ms": spec.poll_ms, "duration_ms": spec.duration_ms,
         "connection": run.connection}, indent=2) + "\n")
    dev = run.device
    with dev.run_dir("energy") as rd:
        trace_remote = trace_path_for(rd)
        cfg_remote = push_config(dev, rd, spec, keep_copy=out_dir / "trace_config.pb")
        script = render_script(plan, rd, cfg_remote, trace_remote, __version__)
        (out_dir / "episode.sh").write_text(script)
        dev.push(out_dir / "episode.sh", f"{rd}/episode.sh")
        for f in run.push_files:
            dev.push(Path(f), f"{rd}/{Path(f).name}")

        budget = plan.discharge_wait_s + spec.duration_ms / 1000 + 120
        launch = f"nohup sh {rd}/episode.sh > {rd}/episode.log 2> {rd}/episode.err"
        box: dict[str, object] = {}

        def launch_episode() -> None:
            try:
                box["result"] = dev.shell(launch, deadline_s=budget)
            except DeviceError as exc:  # the cable came out: expected, the phone carries on
                box["error"] = exc

        th = threading.Thread(target=launch_episode, name="as2d-energy-episode", daemon=True)
        th.start()
        trace_s = spec.duration_ms / 1000
        if run.connection == "usb":
            leave = run.leave_timeout_s or plan.discharge_wait_s + 30
            say(f"Unplug the USB cable now. The phone waits up to {plan.discharge_wait_s} s for "
                f"'Discharging', then measures for about {trace_s:.0f} s on its own.")
            if not wait_presence(port, dev.serial, False, leave):
                raise UserError(f"phone {dev.serial} is still attached after {leave:.0f} s; it "
                                "must be unplugged for the measurement (or pass --connection "
                                "wireless when it is on wireless adb with no charger)")
            until = datetime.now() + timedelta(seconds=trace_s + 5)
            say(f"Unplugged. Leave it unplugged for {trace_s + 5:.0f} s (until "
                f"{until:%H:%M:%S}), then plug it back in.")
            if not wait_presence(port, dev.serial, True, run.return_timeout_s):
                raise DeviceError(f"phone {dev.serial} did not come back within "
                                  f"{run.return_timeout_s:.0f} s; replug it and analyse later "
                                  f"(the run folder is {out_dir})")
            say("Phone is back; collecting the trace.")
        else:
            say(f"Wireless adb: keep the phone off any charger; measuring for about "
                f"{trace_s:.0f} s.")
        _wait_episode_done(dev, rd, budget)
        exclude = {"episode.sh", posixpath.basename(cfg_remote)}
        exclude |= {Path(f).name for f in run.push_files}
        rc = dev.shell(["cat", f"{rd}/perfetto.rc"], deadline_s=10).stdout.strip()
        if rc != "0":
            _collect_raw(dev, rd, raw, exclude)
            err = (raw / "perfetto.err").read_text().strip().splitlines() if (
                raw / "perfetto.err").exists() else []
            raise DeviceError(f"perfetto failed on {dev.serial} (exit {rc or 'unknown'}: "
                              f"{err[-1] if err else 'no output'}); the phone's records are in "
                              f"{raw} — check that traced runs (setprop persist.traced.enable 1)")
        started = dev.shell(["cat", f"{rd}/t_trace_started"], deadline_s=10)
        started.check(f"reading {rd}/t_trace_started")
        from as2d_cli.energy.episode_script import parse_uptime_ns

        wait_trace_end(dev, parse_uptime_ns(started.stdout, "t_trace_started"),
                       spec.duration_ms, deadline_s=spec.duration_ms / 1000 + 60)
        _collect_raw(dev, rd, raw, exclude)
        dev.pull(trace_remote, out_dir / TRACE_NAME)
        remove_trace(dev, trace_remote)
        th.join(timeout=5)
    facts = dict(run.phone_facts)
    facts.setdefault("serial", dev.serial)
    facts.setdefault("connection", run.connection)
    return analyse_run_folder(out_dir, plan, spec, run.baseline, facts)


def _collect_raw(dev: Device, rd: str, raw: Path, exclude: set[str]) -> None:
    """Pull every file the episode wrote; what cannot be pulled is listed, not fatal."""
    skipped: list[str] = []
    for name in dev.list_dir(rd):
        if name in exclude or "/" in name:
            continue
        try:
            dev.pull(f"{rd}/{name}", raw / name)
        except DeviceError as exc:  # a directory (e.g. a runtime's HOME) or unreadable
            skipped.append(f"{name}: {exc}")
    if skipped:
        (raw.parent / "pull_skipped.txt").write_text("\n".join(skipped) + "\n")


def _wait_episode_done(dev: Device, rd: str, budget_s: float) -> None:
    limit = time.monotonic() + budget_s
    last = ""
    while time.monotonic() < limit:
        res = dev.shell(["cat", f"{rd}/state"], deadline_s=10)
        last = res.stdout.strip()
        if last == "done":
            return
        time.sleep(0.5)
    raise DeviceError(f"the episode on {dev.serial} did not finish within {budget_s:.0f} s "
                      f"(state: {last or 'not started'}); check {rd}/episode.log")


def reanalyse(out_dir: Path, baseline: str | None = "target-only") -> Path:
    """Analyse a run folder again (after a refusal was fixed, or after replugging late).
    Writes energy.json only if the folder has none yet: results are never overwritten."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(f"{out_dir} already has energy.json; results are never overwritten — "
                        "read that file, or copy the folder to analyse it again")
    try:
        doc = json.loads((out_dir / "plan.json").read_text())
        p = dict(doc["plan"])
        p["methods"] = tuple(p["methods"])
        p["method_cmds"] = tuple(tuple(x) for x in p.get("method_cmds", ()))
        plan = EpisodePlan(**p)
        spec = CaptureSpec(duration_ms=int(doc["duration_ms"]), poll_ms=int(doc["poll_ms"]))
        connection = doc.get("connection", "usb")
    except FileNotFoundError:
        raise UserError(f"{out_dir} has no plan.json; pass a folder written by `as2d energy`") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{out_dir}/plan.json is damaged ({exc}); it was not written by this "
                        "as2d version") from None
    if not (out_dir / "raw").is_dir() or not (out_dir / TRACE_NAME).exists():
        raise UserError(f"{out_dir} lacks raw/ or {TRACE_NAME}; the phone's files were never "
                        "pulled — rerun the measurement")
    refused = out_dir / "refused.txt"
    if refused.exists():
        refused.rename(out_dir / f"refused-{int(time.time())}.txt")  # keep the old verdict
    return analyse_run_folder(out_dir, plan, spec, baseline, {"connection": connection})
