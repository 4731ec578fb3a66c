"""One stream on a device: load the runner, gate once, stream under the 1 Hz monitor,
and keep every block as it arrives (``blocks.jsonl``) whatever ends the run — the last
block, Ctrl-C, the monitor tripping (a core offline, the device lost) or the runner
failing.

When the monitor trips, the stream stops: a local runner is killed at once; a phone's
runner (file mode, which the host cannot kill) is told through a stop file beside its run
directory and ends before its next block. Every block that finished after the monitor's
last good sample — the one running when it tripped, and any a phone finished before it
saw the stop file — is marked degraded: kept in the files, left out of the figures, and
the run's keeps-pace verdict is not given."""

from __future__ import annotations

import contextlib
import posixpath
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import DeviceError
from as2d_cli.formats.common import append_jsonl
from as2d_cli.stream.recording import Recording

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

RAW_BLOCKS = "blocks.jsonl"
FOLLOW_S = 2.0  # how often a phone's events are read back during the stream
OnEvent = Callable[[dict[str, Any]], None]


@dataclass
class StreamOutcome:
    start: dict[str, Any] | None = None  # the runner's stream_start event
    blocks: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    streamed: dict[str, Any] | None = None  # the terminal event: drain, epochs (None: stopped)
    gate: dict[str, Any] | None = None
    monitor: dict[str, Any] | None = None
    stopped: str | None = None  # why the stream ended early
    interrupted: bool = False
    # The first block that finished after the monitor's last good sample: it and every
    # later block ran (at least partly) without the conditions the gate checked (None: none)
    degraded_from: int | None = None
    received: list[float] = field(default_factory=list)  # host wall time each block arrived

    @property
    def conditions_held(self) -> bool:
        """Whether the monitor stayed quiet for the whole stream."""
        return (self.monitor or {}).get("failure") is None


def stream_command(recording: Recording, settings: dict[str, Any]) -> dict[str, Any]:
    return {"op": "stream", **recording.command(), **settings}


@dataclass(frozen=True)
class StreamHooks:
    """Who hears of a stream as it runs: ``on_start`` its start event, ``on_block`` each
    block as it finishes, ``say`` the notes."""

    on_start: OnEvent | None = None
    on_block: OnEvent | None = None
    say: Callable[[str], None] = lambda _m: None


def run_stream(
    m: Any,
    recording: Recording,
    settings: dict[str, Any],
    folder: Path,
    *,
    pair: ModelPair | None = None,
    open_runner: Callable[..., Any],
    hooks: StreamHooks = StreamHooks(),
    monitor_interval_s: float = 1.0,
) -> StreamOutcome:
    """Stream ``recording`` on the measured device ``m``
    (:class:`device_agents.measurement.Measurement`) with the model ``pair`` (None: the
    bundled one); never raises for an ended stream: the outcome says how it ended
    (the caller writes the results, then reports)."""
    from device_agents.gating import run_gate

    out = StreamOutcome()
    device = m.device
    tc, pc = m.placement.cores
    hooks.say(f"loading the models on {m.identity.name}")
    try:
        runner = open_runner(device, pair, target_cores=tc, producer_cores=pc)
    except KeyboardInterrupt:
        out.interrupted, out.stopped = True, "interrupted (Ctrl-C) while loading"
        return out
    if hasattr(runner, "follow_s"):  # a phone's file-mode run: read its blocks back as it goes
        runner.follow_s = FOLLOW_S
    try:
        try:
            g = run_gate(device, m.gate)
        except KeyboardInterrupt:
            out.interrupted, out.stopped = True, "interrupted (Ctrl-C) at the gate"
            return out
        out.gate = g.to_dict()
        if not g.passed:
            out.stopped = f"the gate failed before the stream: {g.failure}"
            return out
        command = stream_command(recording, settings)
        _monitored(
            device,
            runner,
            command,
            out,
            _events(out, folder / RAW_BLOCKS, hooks),
            monitor_interval_s,
        )
    finally:
        try:
            runner.close()
        except (OSError, DeviceError):
            pass
    return out


def _events(out: StreamOutcome, raw: Path, hooks: StreamHooks) -> OnEvent:
    """The runner's events into ``out`` (each block appended to ``raw`` as it comes)."""

    def on_event(ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        body = {k: v for k, v in ev.items() if k != "event"}
        if kind == "stream_start":
            out.start = body
            if hooks.on_start is not None:
                hooks.on_start(body)
        elif kind == "block":
            out.blocks.append(body)
            out.received.append(time.time())
            append_jsonl(raw, [body])
            if hooks.on_block is not None:
                hooks.on_block(body)
        elif kind == "check":
            out.checks.append(body)

    return on_event


def _monitored(
    device: Any,
    runner: Any,
    command: dict[str, Any],
    out: StreamOutcome,
    on_event: OnEvent,
    monitor_interval_s: float,
) -> None:
    """The stream itself under the core monitor, which stops it (through the stop file
    where the runner has one) when a core leaves; how it ended goes into ``out``."""
    from device_agents.monitor import CoreMonitor

    with _stop_file(device) as stop:
        monitor = CoreMonitor(
            device, monitor_interval_s, on_trip=_stopper(device, runner, stop)
        ).start()
        if stop is not None:  # named from the runner's own run directory (AS2D_FILES)
            command["stop_file"] = posixpath.join("..", *stop.split("/")[-2:])
        try:
            res = runner.call(command, on_event=on_event)
            res.pop("event", None)
            out.streamed = res
        except KeyboardInterrupt:
            runner.abort()
            out.interrupted = True
            out.stopped = "interrupted (Ctrl-C)"
        except DeviceError as exc:
            out.stopped = _why(monitor.failure) if monitor.failure is not None else str(exc)
        finally:
            monitor.stop()
            out.monitor = monitor.record()
    if monitor.failure is not None:
        _mark_degraded(out, monitor)
        if not out.interrupted:
            out.stopped = _why(monitor.failure) + _degraded_note(out)


def _why(failure: Any) -> str:
    """The monitor's failure as the stream's reason."""
    if failure.kind == "core_offline":
        gone = ",".join(map(str, failure.detail.get("offline", [])))
        at = time.strftime("%H:%M:%S", time.localtime(failure.wall_time))
        return (
            f"CPU{gone} went offline {failure.t_s:.1f} s after the stream's monitor started "
            f"(at {at})"
        )
    return failure.message


@contextlib.contextmanager
def _stop_file(device: Any) -> Iterator[str | None]:
    """Where the host tells a phone's runner to stop: ``stop`` in a per-run directory of its
    own beside the runner's (removed afterwards); None on the local host, whose runner the
    monitor kills."""
    if getattr(device, "kind", "local") == "local":
        yield None
        return
    with device.run_dir("streamstop") as folder:
        yield posixpath.join(folder, "stop")


def _stopper(device: Any, runner: Any, stop: str | None) -> Callable[[Any], None]:
    """The monitor's on_trip: kill a local runner; write a phone's stop file."""
    from device_agents.monitor import abort_on_trip

    abort = abort_on_trip(runner)

    def on_trip(record: Any) -> None:
        abort(record)
        if stop is not None:
            try:
                device.shell(["touch", stop], deadline_s=10)
            except DeviceError:
                pass  # the device is gone: its runner ends when its command's stream closes

    return on_trip


def _mark_degraded(out: StreamOutcome, monitor: Any) -> None:
    """Every block that reached the host after the monitor's last good sample ran, at least
    partly, after the conditions broke: it and the blocks after it are degraded. (A block
    reaches the host after it finished — a phone's, up to one read-back later — so this
    never misses one; it may take in a block that finished just before.)"""
    failure = monitor.failure
    good = failure.detail.get("last_good_wall_time")
    if good is None:
        before = [s.wall_time for s in monitor.samples if s.wall_time < failure.wall_time]
        good = before[-1] if before else failure.wall_time
    late = [i for i, t in enumerate(out.received) if t > float(good)]
    out.degraded_from = late[0] if late else None


def _degraded_note(out: StreamOutcome) -> str:
    n = len(out.blocks)
    if out.degraded_from is None:
        return ""
    k = n - out.degraded_from
    return (
        f"; block{'s' if k > 1 else ''} {out.degraded_from + 1}"
        f"{f'–{n}' if k > 1 else ''} ran after it and "
        f"{'are' if k > 1 else 'is'} marked degraded (left out of the figures)"
    )


def settings_for(
    method: str,
    *,
    budget: int,
    block_s: float,
    context_s: float,
    lifetime: str,
    source: str,
    check: bool,
    clock: str = "real",
    history: bool = False,
) -> dict[str, Any]:
    """The runner's stream fields for the CLI's options: the method's settings in
    MethodSpec's wire form and the stream's own."""
    from as2d_cli.engine.methods import spec_of

    return {
        **spec_of(method, budget=budget, source=source, history=history).to_wire(),
        "block_s": block_s,
        "context_s": context_s,
        "source_lifetime": lifetime,
        "check": check,
        "clock": clock,
    }
