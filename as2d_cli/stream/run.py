"""One stream on a device: load the runner, gate once, stream under the 1 Hz monitor,
and keep every block as it arrives (``blocks.jsonl``) whatever ends the run — the last
block, Ctrl-C, the monitor tripping (a core offline, the device lost) or the runner
failing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from as2d_cli.errors import DeviceError
from as2d_cli.formats.common import append_jsonl
from as2d_cli.stream.recording import Recording

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


def stream_command(recording: Recording, settings: dict[str, Any]) -> dict[str, Any]:
    return {"op": "stream", **recording.command(), **settings}


def run_stream(
    m: Any,
    recording: Recording,
    settings: dict[str, Any],
    folder: Path,
    *,
    models: Path | None = None,
    prompt: Any = None,
    open_runner: Callable[..., Any],
    on_start: OnEvent | None = None,
    on_block: OnEvent | None = None,
    say: Callable[[str], None] = lambda _m: None,
    monitor_interval_s: float = 1.0,
) -> StreamOutcome:
    """Stream ``recording`` on the measured device ``m``
    (:class:`device_agents.measurement.Measurement`); never raises for an ended stream:
    the outcome says how it ended (the caller writes the results, then reports)."""
    from device_agents.gating import run_gate
    from device_agents.monitor import CoreMonitor, abort_on_trip

    out = StreamOutcome()
    device = m.device
    tc, pc = m.placement.cores
    raw = folder / RAW_BLOCKS

    def on_event(ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        body = {k: v for k, v in ev.items() if k != "event"}
        if kind == "stream_start":
            out.start = body
            if on_start is not None:
                on_start(body)
        elif kind == "block":
            out.blocks.append(body)
            append_jsonl(raw, [body])
            if on_block is not None:
                on_block(body)
        elif kind == "check":
            out.checks.append(body)

    say(f"loading the models on {m.identity.name}")
    try:
        runner = open_runner(
            device,
            None if models is None else str(models),
            target_cores=tc,
            producer_cores=pc,
            prompt=prompt,
        )
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
        monitor = CoreMonitor(device, monitor_interval_s, on_trip=abort_on_trip(runner)).start()
        try:
            res = runner.call(stream_command(recording, settings), on_event=on_event)
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
        if out.stopped is None and monitor.failure is not None:  # a phone's batch ran to its end
            out.stopped = _why(monitor.failure)
    finally:
        try:
            runner.close()
        except (OSError, DeviceError):
            pass
    return out


def _why(failure: Any) -> str:
    """The monitor's failure as the stream's reason (its own words are a batch's)."""
    return failure.message.replace(
        " into the episode", " after the stream's monitor started"
    ).replace("the batch is stopped (results so far are kept)", "the blocks so far are kept")


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
) -> dict[str, Any]:
    """The runner's stream fields for the CLI's options."""
    s: dict[str, Any] = {
        "method": method,
        "block_s": block_s,
        "context_s": context_s,
        "source_lifetime": lifetime,
        "check": check,
        "clock": clock,
    }
    if method == "as2d":
        s.update(budget=budget, source=source)
    return s
