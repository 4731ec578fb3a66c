"""The default stream: a continuous recording joined from the bundled corpus.

One language (English) and one setting (read speech), windows in manifest order (the test
split, then val, then dev), joined end to end with no pauses added and none repeated, cut
to the requested length. The stream's results name every window used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from as2d_cli.errors import UserError

LANGUAGE = "en"
SETTING = "read"
SPLIT_ORDER = ("test", "val", "dev")


@dataclass(frozen=True)
class Recording:
    """What the runner's ``stream`` command reads: corpus windows (cut to ``seconds``) or
    an audio file."""

    seconds: float | None
    windows: tuple[str, ...] = ()
    audio: Path | None = None
    language: str | None = None

    def command(self) -> dict[str, Any]:
        if self.audio is not None:
            return {"audio": str(self.audio.resolve()), "seconds": self.seconds}
        return {"windows": list(self.windows), "seconds": self.seconds}

    def to_dict(self) -> dict[str, Any]:
        from as2d_cli.formats.common import sha256_file

        if self.audio is not None:
            return {
                "kind": "file",
                "path": str(self.audio.resolve()),
                "sha256": sha256_file(self.audio),
                "seconds": self.seconds,
            }
        return {
            "kind": "corpus",
            "language": self.language,
            "setting": SETTING,
            "windows": list(self.windows),
            "seconds": self.seconds,
        }


def corpus_recording(minutes: float, corpus_dir: Path | None = None) -> Recording:
    """``minutes`` of the bundled corpus's English read speech, joined."""
    from as2d_cli.corpus.manifest import load_corpus

    if minutes <= 0:
        raise UserError(f"--minutes must be positive, got {minutes:g}")
    corpus = load_corpus(corpus_dir)
    pool = [
        w
        for split in SPLIT_ORDER
        for w in corpus.windows
        if w.split == split and w.language == LANGUAGE and w.setting == SETTING
    ]
    want = minutes * 60.0
    total = sum(w.seconds for w in pool)
    if want > total + 1e-6:
        raise UserError(
            f"--minutes {minutes:g}: the bundled corpus holds {total / 60:.1f} minutes of "
            f"{LANGUAGE} {SETTING} speech; ask for less or pass your own --audio FILE"
        )
    used, have = [], 0.0
    for w in pool:
        if have >= want:
            break
        used.append(w.id)
        have += w.seconds
    return Recording(want, tuple(used), language=LANGUAGE)


def file_recording(path: Path, minutes: float | None = None) -> Recording:
    """``--audio FILE``, checked here before anything starts: audio soundfile reads to its
    end (not truncated), 16 kHz mono, at least ``MIN_AUDIO_S`` long, and as long as
    ``--minutes`` asks."""
    from as2d_cli.corpus.manifest import AUDIO_RATE, read_audio_file

    if not path.is_file():
        raise UserError(f"--audio {path}: no such file")
    seconds = len(read_audio_file(path, f"--audio {path}")) / AUDIO_RATE
    if minutes is not None and minutes * 60.0 > seconds + 1e-6:
        raise UserError(
            f"--minutes {minutes:g}: --audio {path} holds {seconds / 60:.2f} minutes; ask for "
            "less or drop --minutes (the whole file streams)"
        )
    return Recording(None if minutes is None else minutes * 60.0, audio=path)
