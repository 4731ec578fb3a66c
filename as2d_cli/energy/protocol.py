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
import posixpath
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from as2d_cli import __version__
from as2d_cli.energy.analysis import analyse_episode
from as2d_cli.energy.capture_config import (
    COUNTERS_OPTIONAL,
    COUNTERS_REQUIRED,
    CaptureSpec,
)
from as2d_cli.energy.episode_records import format_episode
from as2d_cli.energy.episode_script import (
    ONLINE_FILE,
    STOP_HOST,
    EpisodePlan,
    assemble_episode,
    parse_uptime_ns,
    render_script,
)
from as2d_cli.energy.gauge_probe import PROBE_MAX_S, probe_device, size_plan
from as2d_cli.energy.perfetto_capture import (
    CONFIG_NAME,
    preflight,
    push_config,
    remove_trace,
    trace_path_for,
    wait_trace_end,
)
from as2d_cli.energy.refusals import MeasurementRefused
from as2d_cli.energy.results import (
    GATE_NAME,
    MONITOR_NAME,
    TRACE_NAME,
    conditions_of,
    new_run_dir,
    short_window_lines,
    stopped_line,
    write_results,
)
from as2d_cli.energy.trace_reader import read_battery_series
from as2d_cli.errors import As2dError, DeviceError, UserError
from as2d_cli.formats.common import INCOMPLETE, write_atomic
from as2d_cli.reporting import Progress, Say, Ticker
from device_agents.base import Device
from device_agents.gating import GateConfig, GateResult
from device_agents.monitor import CoreMonitor, FailureRecord

CONNECTIONS = ("usb", "wireless")
PHONE_RUN = "phone_run.json"  # the phone's identity and where its run lives (for --collect)
PHONE_RUN_SCHEMA = "as2d.energy-phone-run"
AWAY_GRACE_S = 600.0  # how long past the trace's end a phone that left may take to return
PULL_DEPTH = 4  # subdirectories of the phone's run directory pulled this deep


class PhoneAway(DeviceError):
    """The phone left and did not come back in time; its run stays on it for `collect`."""


class _PhoneGone(Exception):
    """Internal: the phone is not on the adb server any more."""


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


# -- refusals before anything runs ----------------------------------------------------------


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


# -- presence ---------------------------------------------------------------------------------


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

    wake: queue.Queue[object] = queue.Queue()
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


# -- the phone's run directory ------------------------------------------------------------------


@dataclass
class _PhoneRun:
    """One run directory on the phone and the local run folder it is pulled into."""

    device: Device
    port: int
    run_dir: str
    trace: str
    out_dir: Path
    exclude: set[str]

    @property
    def raw(self) -> Path:
        return self.out_dir / "raw"

    def present(self) -> bool:
        return _present(self.port, self.device.serial)

    def _gone_or(self, exc: DeviceError) -> DeviceError:
        if not self.present():
            raise _PhoneGone() from exc
        return exc

    def cat(self, name: str) -> str:
        try:
            return self.device.shell(["cat", f"{self.run_dir}/{name}"], deadline_s=15).stdout
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def holds_run(self) -> bool:
        try:
            return self.device.shell(["test", "-d", self.run_dir], deadline_s=15).exit_code == 0
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def launched(self) -> bool:
        """Whether the episode was ever started: its launch line makes episode.log first."""
        try:
            return (
                self.device.shell(
                    ["test", "-e", f"{self.run_dir}/episode.log"], deadline_s=15
                ).exit_code
                == 0
            )
        except DeviceError as exc:
            raise self._gone_or(exc) from None

    def pull_all(self) -> None:
        """Every file the episode wrote (episode.log included, subdirectories to a bounded
        depth) into raw/, and the trace beside it. An entry that cannot be pulled while the
        phone is here is listed in pull_skipped.txt; a phone that left raises _PhoneGone."""
        self.raw.mkdir(parents=True, exist_ok=True)
        skipped: list[str] = []
        try:
            names = self.device.list_dir(self.run_dir, deadline_s=15)
        except DeviceError as exc:
            raise self._gone_or(exc) from None
        for name in names:
            if name in self.exclude or "/" in name or name in (".", ".."):
                continue
            self._pull_tree(f"{self.run_dir}/{name}", self.raw / name, name, skipped, 0)
        try:
            self.device.pull(self.trace, self.out_dir / TRACE_NAME)
        except DeviceError as exc:
            self._gone_or(exc)
            skipped.append(f"trace {self.trace}: {exc}")
        note = self.out_dir / "pull_skipped.txt"
        if skipped:
            note.write_text("\n".join(skipped) + "\n")
        elif note.exists():
            note.unlink()  # an earlier attempt's note; everything came this time

    def _pull_tree(
        self, remote: str, local: Path, shown: str, skipped: list[str], depth: int
    ) -> None:
        try:
            self.device.pull(remote, local)
            return
        except DeviceError as exc:
            first = self._gone_or(exc)
        try:
            entries = self.device.list_dir(remote, deadline_s=15)
        except DeviceError as exc:
            raise self._gone_or(exc) from None
        entries = [e for e in entries if "/" not in e and e not in (".", "..")]
        if not entries or depth >= PULL_DEPTH:  # unreadable, an empty directory, or too deep
            skipped.append(f"{shown}: {first}")
            return
        local.mkdir(parents=True, exist_ok=True)
        for e in entries:
            self._pull_tree(f"{remote}/{e}", local / e, f"{shown}/{e}", skipped, depth + 1)

    def remove(self) -> None:
        """Delete the run directory and the trace from the phone (after pull_all). The
        local record says ``collected`` first: a host killed while removing leaves a
        leftover on the phone, never a folder that waits for files the phone no longer has."""
        _update_phone_run(self.out_dir, state="collected")
        try:
            self.device.shell(["rm", "-rf", self.run_dir], deadline_s=30)
        except DeviceError:
            pass  # the phone left after everything was pulled: a leftover, nothing lost
        remove_trace(self.device, self.trace)


def _make_remote_dir(dev: Device) -> str:
    """A fresh per-run directory, as Device.run_dir makes it, that outlives this process:
    it is removed only once everything in it has been pulled."""
    path = posixpath.join(dev.run_root(), f"as2d-energy-{uuid.uuid4().hex[:8]}")
    dev.shell(["mkdir", "-p", path]).check(f"creating {path}")
    return path


def _write_phone_run(out_dir: Path, doc: dict) -> None:
    write_atomic(out_dir / PHONE_RUN, (json.dumps(doc, indent=2) + "\n").encode(), force=True)


def _update_phone_run(out_dir: Path, **changes: object) -> None:
    path = out_dir / PHONE_RUN
    if path.exists():
        doc = json.loads(path.read_text())
        doc.update(changes)
        _write_phone_run(out_dir, doc)


def _never_on_phone(out_dir: Path, missing: str) -> str:
    return (
        f"{out_dir} has no {missing}: `as2d energy` was stopped before it started the run on "
        "the phone, so nothing was measured; measure again and delete this folder"
    )


def _load_phone_run(out_dir: Path) -> dict:
    path = out_dir / PHONE_RUN
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        if (out_dir / "plan.json").exists() and not (out_dir / TRACE_NAME).exists():
            raise UserError(_never_on_phone(out_dir, PHONE_RUN)) from None
        raise UserError(
            f"{out_dir} has no {PHONE_RUN}; it is not a run folder `as2d energy` "
            "left on a phone — analyse it with --from-run, or rerun"
        ) from None
    except ValueError as exc:
        raise UserError(f"{path} is damaged ({exc}); rerun the measurement") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != PHONE_RUN_SCHEMA
        or doc.get("version") != 1
    ):
        raise UserError(
            f"{path} is not an {PHONE_RUN_SCHEMA} version 1 record; use the as2d "
            "version that measured it"
        )
    for key in ("serial", "adb_port", "run_dir", "trace"):
        if key not in doc:
            raise UserError(f"{path} lacks {key!r}; rerun the measurement")
    return doc


# -- analysis -------------------------------------------------------------------------------------


def _read_text_files(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        if p.is_file():
            out[p.name] = p.read_text(errors="replace")
    return out


def analyse_run_folder(
    out_dir: Path,
    plan: EpisodePlan,
    spec: CaptureSpec,
    baseline: str | None,
    phone_facts: dict,
    say: Say | None = None,
) -> Path:
    """Analyse a folder holding raw/ records and the trace; write results (or refused.txt)."""
    episode = assemble_episode(plan, _read_text_files(out_dir / "raw"))
    write_atomic(out_dir / "episode.tsv", format_episode(episode).encode("utf-8"), force=True)
    try:
        series = read_battery_series(out_dir / TRACE_NAME)
        if series.lost_bytes and say is not None:
            say(
                f"{out_dir / TRACE_NAME} was cut mid-packet: {series.lost_bytes} of "
                f"{series.trace_bytes} bytes after its last whole packet were lost; analysing "
                f"the {series.packets} whole packets"
            )
        analysis = analyse_episode(series, episode, baseline=baseline)
        if analysis.sign_note and say is not None:
            say(analysis.sign_note[0].upper() + analysis.sign_note[1:] + ".")
        if say is not None:
            for line in short_window_lines(analysis):
                say(line)
    except MeasurementRefused as exc:
        write_atomic(out_dir / "refused.txt", (str(exc) + "\n").encode("utf-8"), force=True)
        raise MeasurementRefused(f"{exc} (trace and records kept in {out_dir})") from None
    counters = list(series.counters_requested) or list(COUNTERS_REQUIRED + COUNTERS_OPTIONAL)
    return write_results(
        out_dir,
        analysis,
        episode,
        out_dir / TRACE_NAME,
        spec,
        phone_facts,
        asdict(plan),
        counters,
        conditions=conditions_of(out_dir, episode),
    )


# -- the run ----------------------------------------------------------------------------------------


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
    (out_dir / "raw").mkdir()
    _write_json(out_dir / GATE_NAME, gate.to_dict())
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
    trace_s = spec.duration_ms / 1000
    away_s = run.return_timeout_s if run.return_timeout_s is not None else trace_s + AWAY_GRACE_S
    episode_s = run.episode_timeout_s or plan.discharge_wait_s + trace_s + 120
    facts = dict(run.phone_facts)
    facts.setdefault("serial", dev.serial)
    facts.setdefault("connection", run.connection)
    facts.setdefault("identity", identity)

    rd = _make_remote_dir(dev)
    ph = _PhoneRun(
        dev,
        port,
        rd,
        trace_path_for(rd),
        out_dir,
        {"episode.sh", CONFIG_NAME} | {Path(f).name for f in run.push_files},
    )
    _write_phone_run(
        out_dir,
        {
            "schema": PHONE_RUN_SCHEMA,
            "version": 1,
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "serial": dev.serial,
            "adb_port": port,
            "connection": run.connection,
            "identity": identity,
            "run_dir": rd,
            "trace": ph.trace,
            "exclude": sorted(ph.exclude),
            "episode_timeout_s": episode_s,
            "phone_facts": facts,
            "state": "on-phone",
        },
    )
    th: threading.Thread | None = None
    monitor = _PhoneMonitor(ph, run.monitor_interval_s)
    ticker = Ticker(run.progress, "capturing on the phone", trace_s)
    try:
        cfg_remote = push_config(dev, rd, spec, keep_copy=out_dir / "trace_config.pb")
        script = render_script(plan, rd, cfg_remote, ph.trace, __version__)
        write_atomic(out_dir / "episode.sh", script.encode("utf-8"))
        dev.push(out_dir / "episode.sh", f"{rd}/episode.sh")
        for f in run.push_files:
            dev.push(Path(f), f"{rd}/{Path(f).name}")

        launch = f"nohup sh {rd}/episode.sh > {rd}/episode.log 2> {rd}/episode.err"
        box: dict[str, object] = {}
        monitor.start()  # from before the launch until the episode is done
        ticker.start()

        def launch_episode() -> None:
            try:
                box["result"] = dev.shell(launch, deadline_s=episode_s)
            except DeviceError as exc:  # the cable came out: expected, the phone carries on
                box["error"] = exc

        th = threading.Thread(target=launch_episode, name="as2d-energy-episode", daemon=True)
        th.start()
        if run.connection == "usb":
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
                raise _away(ph, away_s)
            say("Phone is back; collecting the trace.")
        else:
            say(
                f"Wireless adb: keep the phone off any charger; measuring for about "
                f"{trace_s:.0f} s."
            )
        _finish_on_phone(ph, spec, episode_s, away_s, say, on_done=monitor.stop)
    except (PhoneAway, KeyboardInterrupt):
        raise
    except As2dError as exc:
        monitor.stop()
        raise _salvaged(ph, exc, say) from None
    finally:
        monitor.stop()
        ticker.stop()
    if th is not None:
        th.join(timeout=5)
    path = analyse_run_folder(out_dir, plan, spec, run.baseline, facts, say)
    _raise_if_stopped(path)
    return path


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


def _write_json(path: Path, doc: dict) -> None:
    write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode(), force=True)


class _PhoneMonitor:
    """The 1 Hz monitor over an energy run: it samples the phone whenever it reaches it
    (a phone away on purpose, unplugged, does not trip it); a core going offline writes
    ``stop.host`` into the run directory with the boot-clock boundary after which a request
    ran without that core, so the episode skips the rest. Its record goes to monitor.json
    when it stops (once the episode is done, or when the run ends otherwise)."""

    def __init__(self, ph: _PhoneRun, interval_s: float) -> None:
        self.ph = ph
        self.monitor = CoreMonitor(ph.device, interval_s, on_trip=self._stop_episode, away_ok=True)
        self.started = False
        self.stopped = False

    def start(self) -> None:
        self.monitor.start()
        self.started = True

    def stop(self) -> None:
        if not self.started or self.stopped:
            return
        self.stopped = True
        self.monitor.stop()
        _write_json(self.ph.out_dir / MONITOR_NAME, self.monitor.record())

    def _stop_episode(self, failure: FailureRecord) -> None:
        if failure.kind != "core_offline":
            return
        import shlex

        dev, rd = self.ph.device, self.ph.run_dir
        try:
            if self.ph.cat("state").strip() == "done":
                return  # every request has ended: nothing left to stop
        except (As2dError, _PhoneGone):
            pass
        gone = ",".join(map(str, failure.detail.get("offline", [])))
        at = time.strftime("%H:%M:%S", time.localtime(failure.wall_time))
        why = f"CPU{gone} went offline on {dev.serial} (the host's monitor, at {at})"
        last_good = failure.detail.get("last_good_wall_time") or failure.wall_time
        head = ""
        try:
            # The phone's boot clock now, and the two samples on it. The host's time is
            # taken after the round trip: both stamps come out earlier, never later, than
            # the samples — an earlier boundary marks more requests, never fewer.
            up = parse_uptime_ns(dev.shell(["cat", "/proc/uptime"], deadline_s=10).stdout, "up")
            now = time.time()
            good = up - int((now - float(last_good)) * 1e9)
            trip = up - int((now - failure.wall_time) * 1e9)
            head = f"boundary_boot_ns={max(0, good)} trip_boot_ns={max(0, trip)} "
        except (As2dError, ValueError):
            pass  # no boundary: the request that was running is marked by the episode
        try:
            dev.shell(
                f"echo {shlex.quote(head + why)} > {shlex.quote(f'{rd}/{STOP_HOST}')}",
                deadline_s=10,
            )
        except As2dError:
            pass  # away: the episode's own checks around each request still apply


def _raise_if_stopped(path: Path) -> None:
    line = stopped_line(path)
    if line is not None:
        raise DeviceError(line)


def _away(ph: _PhoneRun, waited_s: float) -> PhoneAway:
    return PhoneAway(
        f"phone {ph.device.serial} did not come back within {waited_s:.0f} s; its "
        f"run stays on the phone in {ph.run_dir} — reattach it and run "
        f"`as2d energy --collect {ph.out_dir}`"
    )


def _salvaged(ph: _PhoneRun, exc: As2dError, say: Say) -> As2dError:
    """After a failure midway: pull what the phone wrote, then remove its run directory.
    Returns the one-line error to raise (naming the local run folder)."""
    try:
        if ph.present() and ph.holds_run():
            say("Pulling what the phone wrote before giving up.")
            ph.pull_all()
            ph.remove()
    except _PhoneGone:
        return PhoneAway(
            f"{exc}; phone {ph.device.serial} left before its records were "
            f"pulled — they stay on it in {ph.run_dir}: reattach it and run "
            f"`as2d energy --collect {ph.out_dir}`"
        )
    except As2dError:
        pass  # pulling is best effort here; the original error is the one to report
    if not ph.present():
        return PhoneAway(
            f"{exc}; phone {ph.device.serial} is gone — its run stays on it in "
            f"{ph.run_dir}: reattach it and run `as2d energy --collect {ph.out_dir}`"
        )
    msg = str(exc)
    if str(ph.out_dir) not in msg:
        msg = f"{msg} (what the phone wrote is in {ph.out_dir})"
    return UserError(msg) if isinstance(exc, UserError) else DeviceError(msg)


def _finish_on_phone(
    ph: _PhoneRun,
    spec: CaptureSpec,
    episode_s: float,
    away_s: float,
    say: Say,
    on_done: Callable[[], None] | None = None,
) -> None:
    """Wait for the episode and the bounded trace to end, pull everything, then remove the
    phone's copy. A phone that leaves meanwhile is waited for up to `away_s`, then PhoneAway.
    ``on_done`` is called once the episode is done (the monitor stops there)."""
    dev = ph.device
    for _ in range(3):
        try:
            _wait_episode_done(ph, episode_s)
            if on_done is not None:
                on_done()
            rc = ph.cat("perfetto.rc").strip()
            if rc != "0":
                err = ph.cat("perfetto.err").strip().splitlines()
                raise DeviceError(
                    f"perfetto failed on {dev.serial} (exit {rc or 'unknown'}: "
                    f"{err[-1] if err else 'no output'}); check that traced runs "
                    f"(setprop persist.traced.enable 1) — the phone's records are "
                    f"in {ph.raw}"
                )
            started = parse_uptime_ns(ph.cat("t_trace_started"), "t_trace_started")
            try:
                wait_trace_end(
                    dev, started, spec.duration_ms, deadline_s=spec.duration_ms / 1000 + 60
                )
            except DeviceError as exc:
                raise ph._gone_or(exc) from None
            ph.pull_all()
            if not (ph.out_dir / TRACE_NAME).exists():
                raise DeviceError(
                    f"the phone has no trace at {ph.trace} although perfetto "
                    "started (see pull_skipped.txt)"
                )
            ph.remove()
            return
        except _PhoneGone:
            pass
        say(
            f"Phone {dev.serial} is not reachable; waiting up to {away_s:.0f} s for it to "
            "come back (reattach it)."
        )
        if not wait_presence(ph.port, dev.serial, True, away_s):
            raise _away(ph, away_s)
        say("Phone is back.")
    raise _away(ph, away_s)


def _wait_episode_done(ph: _PhoneRun, budget_s: float) -> None:
    limit = time.monotonic() + budget_s
    last = ""
    while time.monotonic() < limit:
        last = ph.cat("state").strip()
        if last == "done":
            return
        time.sleep(0.5)
    raise DeviceError(
        f"the episode on {ph.device.serial} did not finish within {budget_s:.0f} s "
        f"(state: {last or 'not started'}); see episode.log"
    )


# -- later: collect a run the phone kept, analyse a pulled folder again ---------------------------


def _load_plan(out_dir: Path) -> tuple[EpisodePlan, CaptureSpec, str]:
    try:
        doc = json.loads((out_dir / "plan.json").read_text())
        p = dict(doc["plan"])
        p["methods"] = tuple(p["methods"])
        p["method_cmds"] = tuple(tuple(x) for x in p.get("method_cmds", ()))
        plan = EpisodePlan(**p)
        spec = CaptureSpec(duration_ms=int(doc["duration_ms"]), poll_ms=int(doc["poll_ms"]))
        connection = doc.get("connection", "usb")
    except FileNotFoundError:
        if (out_dir / INCOMPLETE).exists():
            raise UserError(_never_on_phone(out_dir, "plan.json")) from None
        raise UserError(
            f"{out_dir} has no plan.json; pass a folder written by `as2d energy`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{out_dir}/plan.json is damaged ({exc}); it was not written by this as2d version"
        ) from None
    return plan, spec, connection


def _keep_old_refusal(out_dir: Path) -> None:
    refused = out_dir / "refused.txt"
    if refused.exists():
        refused.rename(out_dir / f"refused-{int(time.time())}.txt")  # keep the old verdict


def _find_phone(port: int, rec: dict, out_dir: Path) -> Device:
    """The phone that holds the run: its adb serial, else any attached phone with the same
    hardware serial (a wireless adb serial changes with every connection)."""
    from device_agents.adb_phone import AdbPhone
    from device_agents.identity import find_attached

    serial = rec["serial"]
    hw = (rec.get("identity") or {}).get("serial")
    if not hw and _present(port, serial):
        return AdbPhone(serial, port)
    dev = find_attached(hw, port, prefer=serial) if hw else None
    if dev is not None:
        return dev
    raise UserError(
        f"phone {serial}{f' (serial {hw})' if hw and hw != serial else ''} is not "
        f"attached to the adb server on port {port}; reattach it (USB cable, or "
        f"`adb connect`) and run `as2d energy --collect {out_dir}` again"
    )


def collect(
    out_dir: Path,
    baseline: str | None = "target-only",
    say: Say = lambda _: None,
    adb_port: int | None = None,
    away_s: float = 60.0,
) -> Path:
    """Fetch a run the phone kept (the host gave up waiting, or was interrupted), then
    analyse it like a finished run. Writes energy.json only into a folder that has none."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(
            f"{out_dir} already has energy.json; results are never overwritten — read that file"
        )
    plan, spec, connection = _load_plan(out_dir)
    rec = _load_phone_run(out_dir)
    if rec.get("state") == "collected":
        raise UserError(
            f"{out_dir}: the phone's files were already collected; analyse them "
            f"with `as2d energy --from-run {out_dir}`"
        )
    if rec.get("state") == NOT_STARTED:
        raise UserError(_not_started(out_dir))
    port = int(adb_port or rec["adb_port"])
    dev = _find_phone(port, rec, out_dir)
    ph = _PhoneRun(dev, port, rec["run_dir"], rec["trace"], out_dir, set(rec.get("exclude", [])))
    try:
        holds = ph.holds_run()
    except _PhoneGone:
        raise UserError(
            f"phone {dev.serial} left again; reattach it and run `as2d energy --collect {out_dir}`"
        ) from None
    if not holds:
        raise UserError(
            f"phone {dev.serial} no longer holds {ph.run_dir} (removed, or the phone "
            "was reset); nothing to collect — rerun the measurement"
        )
    if not _launched(ph):
        # Killed before it launched the episode: nothing ran, nothing will come.
        try:
            dev.shell(["rm", "-rf", ph.run_dir], deadline_s=30)
        except DeviceError:
            pass  # a leftover on the phone; nothing was measured in it
        _update_phone_run(out_dir, state=NOT_STARTED)
        raise UserError(_not_started(out_dir))
    _keep_old_refusal(out_dir)
    say(f"Collecting {ph.run_dir} from {dev.serial} into {out_dir}.")
    episode_s = float(
        rec.get("episode_timeout_s") or plan.discharge_wait_s + spec.duration_ms / 1000 + 120
    )
    try:
        _finish_on_phone(ph, spec, episode_s, away_s, say)
    except PhoneAway:
        raise
    except As2dError as exc:
        raise _salvaged(ph, exc, say) from None
    facts = dict(rec.get("phone_facts") or {})
    facts.setdefault("serial", dev.serial)
    facts.setdefault("connection", connection)
    path = analyse_run_folder(out_dir, plan, spec, baseline, facts, say)
    _raise_if_stopped(path)
    return path


NOT_STARTED = "not-started"  # phone_run.json's state when the episode never ran


def _not_started(out_dir: Path) -> str:
    return (
        f"{out_dir}: the episode never started on the phone (`as2d energy` was stopped "
        "before it launched it), so nothing was measured; measure again and delete this folder"
    )


def _launched(ph: _PhoneRun, grace_s: float = 3.0) -> bool:
    """Whether the episode ever started; a launch the killed host had just sent gets
    ``grace_s`` to show up on the phone."""
    limit = time.monotonic() + grace_s
    try:
        while not ph.launched():
            if time.monotonic() >= limit:
                return False
            time.sleep(0.5)
    except _PhoneGone:
        raise UserError(
            f"phone {ph.device.serial} left again; reattach it and run "
            f"`as2d energy --collect {ph.out_dir}`"
        ) from None
    return True


def reanalyse(out_dir: Path, baseline: str | None = "target-only", say: Say | None = None) -> Path:
    """Analyse a run folder again (after a refusal was fixed, or after replugging late).
    Writes energy.json only if the folder has none yet: results are never overwritten."""
    out_dir = Path(out_dir)
    if (out_dir / "energy.json").exists():
        raise UserError(
            f"{out_dir} already has energy.json; results are never overwritten — "
            "read that file, or copy the folder to analyse it again"
        )
    plan, spec, connection = _load_plan(out_dir)
    rec: dict = {}
    if (out_dir / PHONE_RUN).exists():
        rec = _load_phone_run(out_dir)
    if not (out_dir / "raw").is_dir() or not (out_dir / TRACE_NAME).exists():
        if rec.get("state") == NOT_STARTED:
            raise UserError(_not_started(out_dir))
        if rec and rec.get("state") != "collected":
            raise UserError(
                f"{out_dir} lacks raw/ or {TRACE_NAME}: the phone still holds the "
                f"run — reattach it and run `as2d energy --collect {out_dir}`"
            )
        raise UserError(
            f"{out_dir} lacks raw/ or {TRACE_NAME}; the phone's files were never "
            "pulled — rerun the measurement"
        )
    if rec and rec.get("state") != "collected" and say is not None:
        say(
            f"The phone still holds this run in {rec['run_dir']}; what was pulled may be "
            f"partial — `as2d energy --collect {out_dir}` fetches all of it."
        )
    _keep_old_refusal(out_dir)
    facts = dict(rec.get("phone_facts") or {})
    facts.setdefault("connection", connection)
    path = analyse_run_folder(out_dir, plan, spec, baseline, facts, say)
    line = stopped_line(path)
    if line is not None and say is not None:
        say(line[0].upper() + line[1:] + ".")
    return path
