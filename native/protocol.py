"""The runner protocol (version 1): JSON lines, one command in, events out.

Specified in docs/runner-protocol.md. This module validates commands so a malformed one
gets one ``error`` event naming the field, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from as2d_cli.engine.methods import (
    ALIGN_MODES,
    DEFAULT_ALIGN,
    DEFAULT_ALIGN_LOOKBACK,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_ASP_CAP,
    DEFAULT_BATCH,
    DEFAULT_BUDGET,
    DEFAULT_SD_K,
    DEFAULT_THRESHOLD,
    HISTORY,
    METHODS,
    MethodSpec,
)
from as2d_cli.errors import UserError

PROTOCOL = "as2d.runner"
PROTOCOL_VERSION = 1

MODEL_SOURCES = ("drafter", "lookahead", "ctc")  # the sources the pair's models run
SOURCES = (*MODEL_SOURCES, "external", HISTORY)  # history: engine/history.py, no producer
# Where a device run finds what the host pushed with its batch (native.launch): the corpus
# windows it reads, and the folder a command's relative file names (a stream's audio) are in.
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


def _int(cmd: dict, key: str, default: int | None, lo: int = 0) -> int | None:
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


def _num(cmd: dict, key: str, default: float | None) -> float | None:
    v = cmd.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"field {key!r} must be a number, got {v!r}")
    return float(v)


def _bool(cmd: dict, key: str, default: bool) -> bool:
    v = cmd.get(key, default)
    if not isinstance(v, bool):
        raise ProtocolError(f"field {key!r} must be true or false, got {v!r}")
    return v


def decode_settings(cmd: dict) -> dict[str, Any]:
    """Validate a ``decode`` command's fields and fill defaults."""
    method = cmd.get("method")
    if method not in METHODS:
        raise ProtocolError(f"field 'method' must be one of {', '.join(METHODS)}, got {method!r}")
    source = cmd.get("source", "drafter")
    if source not in SOURCES:
        raise ProtocolError(f"field 'source' must be one of {', '.join(SOURCES)}, got {source!r}")
    if ("window" in cmd) == ("audio" in cmd):
        raise ProtocolError(
            "a decode command needs exactly one of 'window' (a corpus id) or 'audio' (a file path)"
        )
    candidates = cmd.get("candidates")
    if source == "external":
        if not isinstance(candidates, list):
            raise ProtocolError(
                "source 'external' needs 'candidates': a list of {t_ms, tokens} batches"
            )
        for i, b in enumerate(candidates, 1):
            check_batch(b, f"candidates[{i}]")
    return {
        "method": method,
        "source": source,
        "window": cmd.get("window"),
        "audio": cmd.get("audio"),
        "k": _int(cmd, "k", DEFAULT_SD_K, 1),
        "budget": _int(cmd, "budget", DEFAULT_BUDGET, 1),
        "threshold": _num(cmd, "threshold", DEFAULT_THRESHOLD),
        "cap": _int(cmd, "cap", DEFAULT_ASP_CAP, 1),
        "batch": _int(cmd, "batch", DEFAULT_BATCH, 1),
        "window_bound": _int(cmd, "align_window", DEFAULT_ALIGN_WINDOW, 0),
        "lookback": _int(cmd, "align_lookback", DEFAULT_ALIGN_LOOKBACK, 0),
        "align": choice_field(cmd, "align", ALIGN_MODES, DEFAULT_ALIGN),
        "history": _bool(cmd, "history", False),
        "max_tokens": _int(cmd, "max_tokens", None, 1),
        "candidates": candidates,
        "events": bool(cmd.get("events", True)),
        "id": cmd.get("id"),
    }


def method_spec(s: dict[str, Any]) -> MethodSpec:
    """The validated decode settings as the engine's one method specification: the native
    runner builds its policy from it exactly as the replay does."""
    m = s["method"]
    # budget: As²d's budget, the w/o-TD cap; ASP and w/o BC take ASP's cap
    budget = (
        s["cap"]
        if m in ("asp", "as2d-no-bc")
        else s["budget"]
        if m in ("as2d", "as2d-no-td")
        else None
    )
    return MethodSpec(
        m,
        k=s["k"] if m == "sd" else None,
        budget=budget,
        source=s["source"],
        threshold=s["threshold"],
        batch=s["batch"],
        lookback=s["lookback"],
        window=s["window_bound"],
        align=s["align"],
        history=bool(s.get("history", False)) and m == "as2d",
    )


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
