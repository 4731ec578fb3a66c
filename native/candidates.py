"""External candidate batches from a JSON Lines file (``as2d decode --candidates``).

One batch per line: ``{"t_ms": <publication time after the request, ms>, "tokens": [ids]}``,
in publication order (``t_ms`` never decreasing), token ids in the target's vocabulary.
Any problem is one clear error naming the file and line: a line that is not JSON or holds
a key twice, a time that is negative, not finite or earlier than the line before, a token
outside the vocabulary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.strict import json_loads
from native.protocol import ProtocolError, check_batch

SHAPE = '{"t_ms": <ms after the request>, "tokens": [<target token ids>]}'


def load_candidates(path: Path, vocab_size: int | None = None) -> list[dict]:
    """The batches of ``path``; ``vocab_size``: the target tokenizer's size (every id must
    be below it)."""
    if not path.is_file():
        raise UserError(f"candidates file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FormatError(
            f"{path}: not UTF-8 text; --candidates takes JSON Lines, one {SHAPE} per line"
        ) from None
    out: list[dict] = []
    last: tuple[int, float] | None = None  # (line, t_ms) of the previous batch
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json_loads(line, where)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{where}: not JSON ({exc.msg}); each line must be {SHAPE}") from None
        try:
            t, toks = check_batch(obj, where)
        except ProtocolError as exc:
            raise FormatError(str(exc)) from None
        if not math.isfinite(t):  # json reads NaN and Infinity
            raise FormatError(f"{where}: 't_ms' must be a finite number of ms, got {t}")
        if last is not None and t < last[1]:
            raise FormatError(
                f"{where}: t_ms {t:g} is earlier than line {last[0]}'s {last[1]:g}; batches are "
                "published in time order — sort the lines by t_ms"
            )
        last = (n, t)
        if vocab_size is not None and any(tok >= vocab_size for tok in toks):
            bad = next(tok for tok in toks if tok >= vocab_size)
            raise FormatError(
                f"{where}: token {bad} is outside the target vocabulary (ids 0–{vocab_size - 1}); "
                "map the proposals to the pair's target token ids (or pass that pair's --models)"
            )
        out.append({"t_ms": t, "tokens": toks})
    if not out:
        raise FormatError(f"{path} holds no candidate batches; write one {SHAPE} per line")
    return out
