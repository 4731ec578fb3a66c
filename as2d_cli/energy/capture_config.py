"""Build the Perfetto TraceConfig for battery counters with the `perfetto` package's protos.

The config is serialized to the binary form `perfetto -c <file>` (no `--txt`) reads. Its
duration is always bounded: with USB unplugged nothing on the host can stop the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from as2d_cli.errors import UserError

DEFAULT_POLL_MS = 250
# Android's battery HAL refuses polls faster than this (and gauges update ~1 Hz anyway).
MIN_POLL_MS = 100
# A trace longer than this is almost certainly a mistyped duration.
MAX_DURATION_MS = 4 * 3600 * 1000

_BC = pb.AndroidPowerConfig.BatteryCounters
COUNTERS_REQUIRED: tuple[str, ...] = ("CURRENT", "VOLTAGE", "CHARGE", "CAPACITY_PERCENT")
COUNTERS_OPTIONAL: tuple[str, ...] = ("CURRENT_AVG",)


@dataclass(frozen=True)
class CaptureSpec:
    """What to capture: poll period, hard duration bound, buffer size."""

    duration_ms: int
    poll_ms: int = DEFAULT_POLL_MS
    include_current_avg: bool = True
    buffer_kb: int = 4096
    file_write_period_ms: int = 5000

    def validate(self) -> None:
        if not MIN_POLL_MS <= self.poll_ms <= 10_000:
            raise UserError(
                f"battery poll period {self.poll_ms} ms is outside {MIN_POLL_MS}..10000 ms; "
                f"use the default {DEFAULT_POLL_MS} ms unless the phone needs otherwise"
            )
        if not 0 < self.duration_ms <= MAX_DURATION_MS:
            raise UserError(
                f"trace duration {self.duration_ms} ms must be positive and at most "
                f"{MAX_DURATION_MS} ms (4 h); the trace must end by itself while unplugged"
            )
        if self.duration_ms < 4 * self.poll_ms:
            raise UserError(
                f"trace duration {self.duration_ms} ms holds fewer than 4 polls of "
                f"{self.poll_ms} ms; lengthen the duration"
            )


def build_trace_config(spec: CaptureSpec) -> pb.TraceConfig:
    """The TraceConfig: one buffer, the `android.power` data source, bounded duration."""
    spec.validate()
    cfg = pb.TraceConfig()
    buf = cfg.buffers.add()
    buf.size_kb = spec.buffer_kb
    # DISCARD keeps the start of the capture if the buffer ever fills; battery packets are
    # tiny (4 Hz × ~60 B), so 4 MiB lasts hours.
    buf.fill_policy = pb.TraceConfig.BufferConfig.DISCARD
    ds = cfg.data_sources.add()
    ds.config.name = "android.power"
    ds.config.target_buffer = 0
    power = ds.config.android_power_config
    power.battery_poll_ms = spec.poll_ms
    names = list(COUNTERS_REQUIRED) + (list(COUNTERS_OPTIONAL) if spec.include_current_avg else [])
    for name in names:
        power.battery_counters.append(_BC.Value(f"BATTERY_COUNTER_{name}"))
    cfg.duration_ms = spec.duration_ms
    # Count the duration on the boot clock (includes suspend), as the samples are.
    cfg.prefer_suspend_clock_for_duration = True
    # Stream to the output file periodically so a partial trace survives a crash.
    cfg.write_into_file = True
    cfg.file_write_period_ms = spec.file_write_period_ms
    return cfg


def serialize_trace_config(spec: CaptureSpec) -> bytes:
    """Binary TraceConfig for `perfetto --background-wait -c <file> -o <trace>`."""
    return build_trace_config(spec).SerializeToString()


def parse_trace_config(data: bytes) -> pb.TraceConfig:
    """Decode a binary TraceConfig (used by the emulated phone's `perfetto` and by tests)."""
    cfg = pb.TraceConfig()
    try:
        cfg.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        raise UserError(f"not a binary Perfetto TraceConfig ({exc}); build it with as2d") from exc
    return cfg


def battery_poll_ms(cfg: pb.TraceConfig) -> int | None:
    """The battery poll period of the config's android.power source, if any."""
    for ds in cfg.data_sources:
        if ds.config.name == "android.power" and ds.config.HasField("android_power_config"):
            return int(ds.config.android_power_config.battery_poll_ms) or None
    return None


def battery_counter_names(cfg: pb.TraceConfig) -> list[str]:
    """Counter names (CURRENT, VOLTAGE, …) requested by the config's android.power source."""
    out: list[str] = []
    for ds in cfg.data_sources:
        if ds.config.name == "android.power":
            for v in ds.config.android_power_config.battery_counters:
                out.append(_BC.Name(v).removeprefix("BATTERY_COUNTER_"))
    return out
