"""The sustained-streaming metrics exactly as paper D.6.2 defines them, from per-block
timing records (stream seconds: the recording's first sample arrives at 0).

Per block i, with r_i the arrival of its last sample, s_i the start of its encoding and
f_i the completion of its committed output:

* queue wait       q_i = s_i - r_i
* processing       p_i = f_i - s_i (encoder + prefill + decode + host service)
* completion lag   l_i = f_i - r_i (excludes the block's own capture interval)

Per run: means of the stage times and of p_i; active RTF = sum(p_i) / audio seconds
(the serial target path; concurrent source work is not added again); resource RTF =
total elapsed (stream start to the end of the source's drain, paced waits included) /
audio seconds; decode throughput = committed non-stop tokens / decoding time (the
prefill-selected first token counts, EOS does not); p95 by linear interpolation over all
blocks; final and maximum values; capped outputs; first and maximum temperature.

"Keeps pace" = mean processing below the block interval and completion lag bounded: the
least-squares trend of l_i over the last third of the blocks (by arrival) rises by less
than one block interval across that third. With fewer than 3 blocks in the last third the
trend is undecided (None), and so is keeping pace. When the device's conditions broke
during the stream (the 1 Hz monitor tripped: a core went offline, the device was lost), the
figures cover only the blocks finished before it and keeping pace is not judged (None): a
stream that did not run to its end under the gated conditions says nothing about whether
the runner keeps pace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

TRAILING = 15  # Figure 9's trailing window, in blocks
MIN_TREND_BLOCKS = 3


@dataclass(frozen=True)
class BlockTiming:
    """One block as the runner recorded it (seconds)."""

    block: int
    audio_s: float  # the block's own audio
    arrival_s: float
    start_s: float
    encoder_s: float
    prefill_s: float
    decode_s: float
    finish_s: float
    body_tokens: int  # committed tokens other than EOS
    capped: bool


@dataclass(frozen=True)
class BlockMetrics:
    block: int
    queue_wait_s: float
    processing_s: float
    host_s: float  # processing not in encoder, prefill or decode
    lag_s: float
    trailing_tps: float | None  # decode throughput over the last <= 15 blocks
    trailing_prefill_s: float
    trailing_rtf: float  # processing / audio over the last <= 15 blocks


@dataclass(frozen=True)
class RunMetrics:
    blocks: int
    audio_s: float
    block_s: float
    mean_encoder_s: float
    mean_prefill_s: float
    mean_decode_s: float
    mean_processing_s: float
    active_rtf: float
    resource_rtf: float | None  # None: the run stopped before its drain was measured
    decode_tps: float | None  # None: no decoding time (impossible figure)
    p95_lag_s: float
    final_lag_s: float
    max_queue_wait_s: float
    final_queue_wait_s: float
    capped: int
    first_temp_c: float | None
    max_temp_c: float | None
    lag_trend_s: float | None  # fitted lag rise over the last third
    keeps_pace: bool | None
    degraded_blocks: int = 0  # blocks after the monitor tripped: kept, not in these figures
    conditions_held: bool = True  # False: the monitor tripped; keeps_pace is not judged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default):
    position (n - 1) q in the sorted values."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def trend_rise(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys on xs times the span of xs; None with fewer than 3 points
    or no spread in xs."""
    n = len(xs)
    if n < MIN_TREND_BLOCKS:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope * (max(xs) - min(xs))


def block_metrics(blocks: Sequence[BlockTiming]) -> list[BlockMetrics]:
    out: list[BlockMetrics] = []
    for i, b in enumerate(blocks):
        win = blocks[max(0, i - TRAILING + 1) : i + 1]
        dec = sum(w.decode_s for w in win)
        proc = [w.finish_s - w.start_s for w in win]
        out.append(
            BlockMetrics(
                b.block,
                b.start_s - b.arrival_s,
                b.finish_s - b.start_s,
                (b.finish_s - b.start_s) - (b.encoder_s + b.prefill_s + b.decode_s),
                b.finish_s - b.arrival_s,
                sum(w.body_tokens for w in win) / dec if dec > 0 else None,
                sum(w.prefill_s for w in win) / len(win),
                sum(proc) / sum(w.audio_s for w in win),
            )
        )
    return out


def run_metrics(
    blocks: Sequence[BlockTiming],
    *,
    block_s: float,
    drained_s: float | None,
    temperatures_c: Sequence[float] = (),
    degraded_blocks: int = 0,
    conditions_held: bool = True,
) -> RunMetrics:
    """The run's figures (Table 16's rows). ``drained_s``: stream time when the source's
    drain ended (None when the run stopped early); ``temperatures_c`` in time order.
    ``blocks`` are those measured under the gated conditions; ``degraded_blocks`` the ones
    after the monitor tripped (counted, not measured); ``conditions_held`` False when it
    tripped: keeping pace is then not judged."""
    if not blocks:
        raise ValueError("no blocks: nothing was measured")
    per = block_metrics(blocks)
    n = len(blocks)
    audio = sum(b.audio_s for b in blocks)
    decode = sum(b.decode_s for b in blocks)
    lags = [m.lag_s for m in per]
    third = blocks[n - math.ceil(n / 3) :]
    rise = trend_rise([b.arrival_s for b in third], lags[n - len(third) :])
    mean_proc = sum(m.processing_s for m in per) / n
    keeps = (
        None if rise is None or not conditions_held else (mean_proc < block_s and rise < block_s)
    )
    return RunMetrics(
        blocks=n,
        audio_s=audio,
        block_s=block_s,
        mean_encoder_s=sum(b.encoder_s for b in blocks) / n,
        mean_prefill_s=sum(b.prefill_s for b in blocks) / n,
        mean_decode_s=decode / n,
        mean_processing_s=mean_proc,
        active_rtf=sum(m.processing_s for m in per) / audio,
        resource_rtf=None if drained_s is None else drained_s / audio,
        decode_tps=sum(b.body_tokens for b in blocks) / decode if decode > 0 else None,
        p95_lag_s=quantile(lags, 0.95),
        final_lag_s=lags[-1],
        max_queue_wait_s=max(m.queue_wait_s for m in per),
        final_queue_wait_s=per[-1].queue_wait_s,
        capped=sum(1 for b in blocks if b.capped),
        first_temp_c=temperatures_c[0] if temperatures_c else None,
        max_temp_c=max(temperatures_c) if temperatures_c else None,
        lag_trend_s=rise,
        keeps_pace=keeps,
        degraded_blocks=degraded_blocks,
        conditions_held=conditions_held,
    )
