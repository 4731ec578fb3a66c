"""The stream's audio on the runner's side: corpus windows joined in the given order (no
pauses added, none repeated), or a 16 kHz mono file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.errors import UserError
from native.protocol import FILES_ENV, ProtocolError
from native.stream_pacer import RATE


def stream_audio(cmd: dict[str, Any], corpus_dir: str | None) -> tuple[np.ndarray, str | None]:
    """The recording named by a ``stream`` command (``windows`` or ``audio``), cut to
    ``seconds`` when given, and its language (the windows'; a file's is unknown: None)."""
    windows, path = cmd.get("windows"), cmd.get("audio")
    if (windows is None) == (path is None):
        raise ProtocolError("a stream command needs exactly one of 'windows' or 'audio'")
    language: str | None = None
    if windows is not None:
        if (
            not isinstance(windows, list)
            or not windows
            or not all(isinstance(w, str) for w in windows)
        ):
            raise ProtocolError("field 'windows' must be a non-empty list of corpus window ids")
        from as2d_cli.corpus.manifest import load_corpus

        corpus = load_corpus(Path(corpus_dir) if corpus_dir else None)
        parts = [corpus.get(w) for w in windows]
        languages = {w.language for w in parts}
        if len(languages) > 1:
            raise ProtocolError(
                f"a stream's windows must share one language, got {sorted(languages)}"
            )
        language = languages.pop()
        audio = np.concatenate([w.load_audio() for w in parts])
    else:
        # A file pushed with the batch is named relative to the folder FILES_ENV names.
        audio = read_audio(Path(os.environ.get(FILES_ENV, "."), str(path)))
    seconds = cmd.get("seconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ProtocolError(f"field 'seconds' must be a positive number, got {seconds!r}")
        audio = audio[: int(round(seconds * RATE))]
    return np.ascontiguousarray(audio, dtype=np.float32), language


def read_audio(path: Path) -> np.ndarray:
    """A 16 kHz mono file as float32 samples; anything else (missing, not audio, truncated,
    another rate, too short) is one clear error naming the file."""
    from as2d_cli.corpus.manifest import read_audio_file

    if not path.is_file():
        raise UserError(f"audio file {path} not found")
    return read_audio_file(path, str(path))
