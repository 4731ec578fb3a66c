"""The runner's ``stream`` command, validated (docs/runner-protocol.md, "stream")."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from as2d_cli.engine.methods import DEFAULT_BUDGET, DEFAULT_SOURCE, HISTORY, MethodSpec
from native.protocol import ProtocolError, choice_field, int_field, wire_spec
from native.stream_clock import CLOCKS
from native.stream_source import LIFETIMES

STREAM_METHODS = ("as2d", "target-only", "sd")
STREAM_SOURCES = ("drafter", "lookahead", "ctc", HISTORY)  # history: engine/history.py
DEFAULT_BLOCK_S = 4.0
DEFAULT_CONTEXT_S = 12.0


@dataclass(frozen=True)
class StreamSettings:
    # the method's settings, sent in MethodSpec's wire form
    spec: MethodSpec = MethodSpec("as2d", budget=DEFAULT_BUDGET, source=DEFAULT_SOURCE)
    lifetime: str = "arrival"
    block_s: float = DEFAULT_BLOCK_S
    context_s: float = DEFAULT_CONTEXT_S
    clock: str = "real"
    check: bool = False  # re-run target-only on every block and context after the stream
    max_tokens: int | None = None  # per block (default: what the decoder has room for)
    warmup: bool = True
    # A file whose appearance stops the stream before its next block (the host's monitor
    # writes it when the device's conditions break); relative: to the runner's files folder
    # (AS2D_FILES). None: the stream runs to its end.
    stop_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        rest = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "spec"}
        return {**self.spec.to_wire(), **rest}


def _number(cmd: dict, key: str, default: float, lo: float) -> float:
    v = cmd.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
        raise ProtocolError(f"field {key!r} must be a number >= {lo:g}, got {v!r}")
    return float(v)


def stream_settings(cmd: dict) -> StreamSettings:
    return StreamSettings(
        spec=wire_spec(cmd, STREAM_SOURCES, STREAM_METHODS, default_method="as2d"),
        lifetime=choice_field(cmd, "source_lifetime", LIFETIMES, "arrival"),
        block_s=_number(cmd, "block_s", DEFAULT_BLOCK_S, 0.05),
        context_s=_number(cmd, "context_s", DEFAULT_CONTEXT_S, 0.05),
        clock=choice_field(cmd, "clock", tuple(CLOCKS), "real"),
        check=bool(cmd.get("check", False)),
        max_tokens=int_field(cmd, "max_tokens", None, 1),
        warmup=bool(cmd.get("warmup", True)),
        stop_file=_path(cmd, "stop_file"),
    )


def _path(cmd: dict, key: str) -> str | None:
    v = cmd.get(key)
    if v is not None and (not isinstance(v, str) or not v):
        raise ProtocolError(f"field {key!r} must be a path or null, got {v!r}")
    return v
