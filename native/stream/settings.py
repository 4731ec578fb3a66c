"""The runner's ``stream`` command, validated (docs/runner-protocol.md, "stream")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from as2d_cli.engine.methods import (
    DEFAULT_ALIGN_LOOKBACK,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_BATCH,
    DEFAULT_BUDGET,
    DEFAULT_SD_K,
    DEFAULT_THRESHOLD,
    HISTORY,
    MethodSpec,
)
from native.protocol import ProtocolError, choice_field
from native.stream.clock import CLOCKS
from native.stream.source import LIFETIMES

STREAM_METHODS = ("as2d", "target-only", "sd")
STREAM_SOURCES = ("drafter", "lookahead", "ctc", HISTORY)  # history: engine/history.py
DEFAULT_BLOCK_S = 4.0
DEFAULT_CONTEXT_S = 12.0


@dataclass(frozen=True)
class StreamSettings:
    method: str = "as2d"
    budget: int = DEFAULT_BUDGET
    k: int = DEFAULT_SD_K
    source: str = "drafter"
    lifetime: str = "arrival"
    threshold: float | None = DEFAULT_THRESHOLD
    batch: int = DEFAULT_BATCH
    block_s: float = DEFAULT_BLOCK_S
    context_s: float = DEFAULT_CONTEXT_S
    clock: str = "real"
    check: bool = False  # re-run target-only on every block and context after the stream
    max_tokens: int | None = None  # per block (default: what the decoder has room for)
    warmup: bool = True
    # History candidates (engine/history.py): fill rounds the source leaves empty, from the
    # block's context (the earlier blocks' text) and its own output.
    history: bool = False
    # A file whose appearance stops the stream before its next block (the host's monitor
    # writes it when the device's conditions break); relative: to the runner's files folder
    # (AS2D_FILES). None: the stream runs to its end.
    stop_file: str | None = None

    def spec(self) -> MethodSpec:
        if self.method == "target-only":
            return MethodSpec("target-only")
        if self.method == "sd":
            return MethodSpec("sd", k=self.k)
        return MethodSpec(
            "as2d",
            budget=self.budget,
            source=self.source,
            threshold=self.threshold,
            batch=self.batch,
            lookback=DEFAULT_ALIGN_LOOKBACK,
            window=DEFAULT_ALIGN_WINDOW,
            history=self.history,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(cmd: dict, key: str, default: float, lo: float) -> float:
    v = cmd.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
        raise ProtocolError(f"field {key!r} must be a number >= {lo:g}, got {v!r}")
    return float(v)


def _count(cmd: dict, key: str, default: int | None) -> int | None:
    v = cmd.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ProtocolError(f"field {key!r} must be an integer >= 1, got {v!r}")
    return v


def stream_settings(cmd: dict) -> StreamSettings:
    threshold = cmd.get("threshold", DEFAULT_THRESHOLD)
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, (int, float))
    ):
        raise ProtocolError(f"field 'threshold' must be a number or null, got {threshold!r}")
    return StreamSettings(
        method=choice_field(cmd, "method", STREAM_METHODS, "as2d"),
        budget=_count(cmd, "budget", DEFAULT_BUDGET) or DEFAULT_BUDGET,
        k=_count(cmd, "k", DEFAULT_SD_K) or DEFAULT_SD_K,
        source=choice_field(cmd, "source", STREAM_SOURCES, "drafter"),
        lifetime=choice_field(cmd, "source_lifetime", LIFETIMES, "arrival"),
        threshold=None if threshold is None else float(threshold),
        batch=_count(cmd, "batch", DEFAULT_BATCH) or DEFAULT_BATCH,
        block_s=_number(cmd, "block_s", DEFAULT_BLOCK_S, 0.05),
        context_s=_number(cmd, "context_s", DEFAULT_CONTEXT_S, 0.05),
        clock=choice_field(cmd, "clock", tuple(CLOCKS), "real"),
        check=bool(cmd.get("check", False)),
        max_tokens=_count(cmd, "max_tokens", None),
        warmup=bool(cmd.get("warmup", True)),
        history=bool(cmd.get("history", False)),
        stop_file=_path(cmd, "stop_file"),
    )


def _path(cmd: dict, key: str) -> str | None:
    v = cmd.get(key)
    if v is not None and (not isinstance(v, str) or not v):
        raise ProtocolError(f"field {key!r} must be a path or null, got {v!r}")
    return v
