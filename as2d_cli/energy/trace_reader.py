"""Read battery samples from a Perfetto trace with the `perfetto` package's generated classes.

The trace processor binary is not used by default: the package downloads it on first use,
which offline machines cannot do. The protobuf packets are decoded directly instead, and
sample timestamps are put on the boot-time clock using the trace's clock snapshots.

A trace cut mid-packet (a phone that died while perfetto wrote, a copy that stopped early)
is read up to its last whole packet; the series says how many bytes were lost after it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from as2d_cli.errors import FormatError

BOOTTIME = pb.BuiltinClock.Value("BUILTIN_CLOCK_BOOTTIME")


@dataclass(frozen=True)
class BatterySeries:
    """Battery polls on the boot-time clock; a missing counter is all-NaN."""

    t_ns: np.ndarray  # int64, boot-time ns, strictly increasing
    current_ua: np.ndarray
    voltage_uv: np.ndarray
    charge_uah: np.ndarray
    capacity_percent: np.ndarray
    current_avg_ua: np.ndarray
    poll_ms: int | None  # from the trace's own config packet, when present
    counters_requested: tuple[str, ...]
    trace_bytes: int = 0  # size of the file read
    lost_bytes: int = 0  # bytes after the last whole packet (a trace cut mid-packet)
    packets: int = 0  # whole top-level packets read

    def __len__(self) -> int:
        return int(self.t_ns.size)

    def has(self, name: str) -> bool:
        return bool(np.isfinite(getattr(self, name)).any())


def _packets(trace: pb.Trace) -> list[pb.TracePacket]:
    """All packets, with `compressed_packets` (zlib-deflated Trace fragments) expanded."""
    out: list[pb.TracePacket] = []
    for pkt in trace.packet:
        if pkt.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(pkt.compressed_packets))
            out.extend(inner.packet)
        else:
            out.append(pkt)
    return out


class _Cut(Exception):
    """The data ends inside a field."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise _Cut()
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def whole_prefix(data: bytes) -> int:
    """Length of the longest prefix of a serialized `Trace` made of whole top-level fields
    (`packet` = field 1, length-delimited). Raises ValueError on bytes that are not a
    protobuf message at all (an impossible wire type or an over-long varint)."""
    pos = end = 0
    n = len(data)
    try:
        while pos < n:
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if tag >> 3 == 0:
                raise ValueError("field number 0")
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 2:
                length, pos = _varint(data, pos)
                pos += length
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                raise ValueError(f"wire type {wire}")
            if pos > n:
                raise _Cut()
            end = pos
    except _Cut:
        pass
    return end


def parse_trace(data: bytes, path: Path) -> tuple[pb.Trace, int]:
    """(the trace, bytes lost after its last whole packet). A trace cut mid-packet is
    parsed up to its last whole packet; anything else that does not parse is refused."""
    trace = pb.Trace()
    try:
        trace.ParseFromString(data)
        return trace, 0
    except Exception as first:  # noqa: BLE001 - DecodeError: maybe cut, maybe not a trace
        try:
            end = whole_prefix(data)
        except ValueError:
            end = -1
        if end < 0 or end == len(data):
            raise FormatError(
                f"{path} is not a Perfetto protobuf trace ({first}); pull the "
                "binary trace, not a text export"
            ) from None
    trace = pb.Trace()
    try:
        trace.ParseFromString(data[:end])
    except Exception as exc:  # noqa: BLE001 - the whole packets themselves are damaged
        raise FormatError(
            f"{path} is not a Perfetto protobuf trace ({exc}); pull the binary "
            "trace, not a text export"
        ) from None
    return trace, len(data) - end


def _clock_offsets(packets: list[pb.TracePacket]) -> tuple[dict[int, int], int]:
    """(clock_id → boot_ns − clock_ns from the first snapshot, the trace's primary clock)."""
    for pkt in packets:
        if pkt.HasField("clock_snapshot"):
            snap = pkt.clock_snapshot
            by_id = {c.clock_id: c.timestamp for c in snap.clocks}
            primary = snap.primary_trace_clock or BOOTTIME
            if BOOTTIME not in by_id:
                return {}, primary
            boot = by_id[BOOTTIME]
            return {cid: boot - ts for cid, ts in by_id.items()}, primary
    return {BOOTTIME: 0}, BOOTTIME


def _power_config(
    pkt: pb.TracePacket, poll_ms: int | None, requested: tuple[str, ...]
) -> tuple[int | None, tuple[str, ...]]:
    """The android.power data source's poll period and counters in a trace_config packet
    (unchanged when it has none)."""
    for ds in pkt.trace_config.data_sources:
        if ds.config.name == "android.power":
            pc = ds.config.android_power_config
            poll_ms = int(pc.battery_poll_ms) or None
            requested = tuple(
                pb.AndroidPowerConfig.BatteryCounters.Name(v).removeprefix("BATTERY_COUNTER_")
                for v in pc.battery_counters
            )
    return poll_ms, requested


def _battery_row(pkt: pb.TracePacket, offset: int) -> tuple[int, float, float, float, float, float]:
    """(boot-clock time, current, voltage, charge counter, capacity, average current) of
    a battery packet; NaN for a counter it lacks."""
    nan = float("nan")
    b = pkt.battery
    return (
        pkt.timestamp + offset,
        float(b.current_ua) if b.HasField("current_ua") else nan,
        float(b.voltage_uv) if b.HasField("voltage_uv") else nan,
        float(b.charge_counter_uah) if b.HasField("charge_counter_uah") else nan,
        float(b.capacity_percent) if b.HasField("capacity_percent") else nan,
        float(b.current_avg_ua) if b.HasField("current_avg_ua") else nan,
    )


def _no_samples(path: Path, lost: int, size: int, any_packet: bool) -> FormatError:
    """Why a trace has no battery sample: no whole packet, cut before the first, or no
    android.power data source."""
    if lost and not any_packet:
        return FormatError(
            f"{path} holds no whole trace packet in its {size} bytes: "
            "it is not a Perfetto protobuf trace, or it was cut inside its "
            "first packet"
        )
    if lost:
        return FormatError(
            f"{path} was cut mid-packet before its first battery sample "
            f"({lost} of {size} bytes lost after the last whole "
            "packet); nothing to measure — rerun the measurement"
        )
    return FormatError(
        f"{path} holds no battery counter samples; capture with the android.power data "
        "source (as2d energy builds that config)"
    )


def read_battery_series(path: Path) -> BatterySeries:
    """Decode the android.power battery packets of the trace at `path`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read trace {path}: {exc.strerror}; check the path") from exc
    trace, lost = parse_trace(data, path)
    try:
        packets = _packets(trace)
    except Exception as exc:  # DecodeError / zlib.error inside a whole packet
        raise FormatError(
            f"{path} is not a Perfetto protobuf trace ({exc}); pull the binary trace, "
            "not a text export"
        ) from exc

    offsets, primary = _clock_offsets(packets)
    poll_ms: int | None = None
    requested: tuple[str, ...] = ()
    rows: list[tuple[int, float, float, float, float, float]] = []
    for pkt in packets:
        if pkt.HasField("trace_config"):
            poll_ms, requested = _power_config(pkt, poll_ms, requested)
        if not pkt.HasField("battery"):
            continue
        clock = pkt.timestamp_clock_id or primary
        if clock not in offsets:
            raise FormatError(
                f"{path}: battery samples use clock {clock}, which no clock snapshot relates "
                "to the boot-time clock; capture with the default trace clock"
            )
        rows.append(_battery_row(pkt, offsets[clock]))
    if not rows:
        raise _no_samples(path, lost, len(data), bool(trace.packet))
    rows.sort(key=lambda r: r[0])
    arr = np.array(rows, dtype=float)
    t = np.array([r[0] for r in rows], dtype=np.int64)
    keep = np.concatenate([[True], np.diff(t) > 0])  # drop duplicate timestamps
    return BatterySeries(
        t_ns=t[keep],
        current_ua=arr[keep, 1],
        voltage_uv=arr[keep, 2],
        charge_uah=arr[keep, 3],
        capacity_percent=arr[keep, 4],
        current_avg_ua=arr[keep, 5],
        poll_ms=poll_ms,
        counters_requested=requested,
        trace_bytes=len(data),
        lost_bytes=lost,
        packets=len(trace.packet),
    )
