"""External candidate batches from a JSON Lines file (``as2d decode --candidates``).

One batch per line: ``{"t_ms": <publication time after the request, ms>, "tokens": [ids]}``.
A malformed line is one clear error naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

from as2d_cli.errors import UserError
from native.protocol import ProtocolError, check_batch


def load_candidates(path: Path, vocab_size: int | None = None) -> list[dict]:
    if not path.is_file():
        raise UserError(f"candidates file {path} not found")
    out: list[dict] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{path}:{n}: not JSON ({exc.msg}); each line must be "
                '{"t_ms": <ms after the request>, "tokens": [<target token ids>]}'
            ) from None
        try:
            t, toks = check_batch(obj, f"{path}:{n}")
        except ProtocolError as exc:
            raise UserError(str(exc)) from None
        if vocab_size is not None and any(tok >= vocab_size for tok in toks):
            bad = next(tok for tok in toks if tok >= vocab_size)
            raise UserError(
                f"{path}:{n}: token {bad} is outside the target vocabulary (size {vocab_size})"
            )
        out.append({"t_ms": t, "tokens": toks})
    if not out:
        raise UserError(f"{path} holds no candidate batches")
    return out
