"""The runner protocol (version 2): JSON lines, one command in, events out.

Specified in docs/runner-protocol.md. This module validates commands so a malformed one
gets one ``error`` event naming the field, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from as2d_cli.engine.methods import HISTORY, METHODS, MethodSpec
from as2d_cli.errors import UserError

PROTOCOL = "as2d.runner"
PROTOCOL_VERSION = 2  # 2: method settings in MethodSpec's wire form (ASP's cap is "budget")

MODEL_SOURCES = ("drafter", "lookahead", "ctc")  # the sources the pair's models run
SOURCES = (*MODEL_SOURCES, "external", HISTORY)  # history: engine/history.py, no producer
# Where a device run finds what the host pushed with its batch (as2d_cli.launch.payload):
# the corpus windows it reads, and the folder a command's relative file names (a stream's audio) are in.
CORPUS_ENV = "AS2D_CORPUS"
FILES_ENV = "AS2D_FILES"


class ProtocolError(UserError):
    """A command the runner cannot accept."""


def parse_command(line: str) -> dict[str, Any]:
    try:
        cmd = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"command is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(cmd, dict) or not isinstance(cmd.get("op"), str):
        raise ProtocolError("command must be a JSON object with a string field 'op'")
    return cmd


def int_field(cmd: dict, key: str, default: int | None, lo: int = 0) -> int | None:
    """Field ``key`` of a command: an integer >= ``lo`` or null (``default`` when absent)."""
    v = cmd.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ProtocolError(f"field {key!r} must be an integer >= {lo}, got {v!r}")
    return v


def choice_field(cmd: dict, key: str, choices: tuple[str, ...], default: str) -> str:
    """Field ``key`` of a command: one of ``choices`` (``default`` when absent)."""
    v = cmd.get(key, default)
    if v not in choices:
        raise ProtocolError(f"field {key!r} must be one of {', '.join(choices)}, got {v!r}")
    return str(v)


def decode_settings(cmd: dict) -> dict[str, Any]:
    """Validate a ``decode`` command: ``spec``, its method settings (MethodSpec's wire form,
    docs/runner-protocol.md), and the request's own fields."""
    spec = wire_spec(cmd, SOURCES)
    if ("window" in cmd) == ("audio" in cmd):
        raise ProtocolError(
            "a decode command needs exactly one of 'window' (a corpus id) or 'audio' (a file path)"
        )
    candidates = cmd.get("candidates")
    if spec.decoupled and spec.source == "external":
        if not isinstance(candidates, list):
            raise ProtocolError(
                "source 'external' needs 'candidates': a list of {t_ms, tokens} batches"
            )
        for i, b in enumerate(candidates, 1):
            check_batch(b, f"candidates[{i}]")
    return {
        "spec": spec,
        "window": cmd.get("window"),
        "audio": cmd.get("audio"),
        "max_tokens": int_field(cmd, "max_tokens", None, 1),
        "candidates": candidates,
        "events": bool(cmd.get("events", True)),
        "id": cmd.get("id"),
    }


def wire_spec(
    cmd: dict,
    sources: tuple[str, ...],
    methods: tuple[str, ...] = METHODS,
    default_method: str | None = None,
) -> MethodSpec:
    """A command's method settings (MethodSpec's wire form), within what this command
    serves: ``methods`` and ``sources``. Every error is one ProtocolError."""
    if "cap" in cmd:  # version 1's name for ASP's cap: refused, never silently ignored
        raise ProtocolError(
            f"field 'cap' is runner protocol version 1's; version {PROTOCOL_VERSION} sends "
            "ASP's and w/o BC's cap as 'budget'"
        )
    method = cmd.get("method", default_method)
    if method not in methods:
        raise ProtocolError(f"field 'method' must be one of {', '.join(methods)}, got {method!r}")
    try:
        spec = MethodSpec.from_wire({**cmd, "method": method})
    except UserError as exc:
        raise ProtocolError(str(exc)) from None
    if spec.decoupled and spec.source not in sources:
        raise ProtocolError(
            f"field 'source' must be one of {', '.join(sources)}, got {spec.source!r}"
        )
    return spec


def check_batch(b: Any, where: str) -> tuple[float, list[int]]:
    """One external batch ``{"t_ms": number >= 0, "tokens": [int, ...]}``."""
    if not isinstance(b, dict):
        raise ProtocolError(f'{where} must be an object {{"t_ms": ..., "tokens": [...]}}')
    t = b.get("t_ms")
    toks = b.get("tokens")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
        raise ProtocolError(
            f"{where}: 't_ms' must be a number >= 0 (ms after the request), got {t!r}"
        )
    if not isinstance(toks, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in toks
    ):
        raise ProtocolError(f"{where}: 'tokens' must be a list of target token ids (integers >= 0)")
    return float(t), toks


def event(name: str, /, **fields: Any) -> str:
    return json.dumps({"event": name, **fields}, separators=(",", ":"))
