"""The corpus manifest (schema ``as2d.corpus``): load, validate, list and read windows.

Documented in docs/corpus.md. The manifest lists every shipped evaluation window with its
id, split, setting, language, duration, voice, audio file (relative to the manifest) and
normalised reference text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import read_json

if TYPE_CHECKING:
    from as2d_cli.corpus.questions import SpokenQuestion

SCHEMA = "as2d.corpus"
VERSION = 1
SETTINGS: tuple[str, ...] = ("read", "meeting", "multilingual", "accented", "sung")
SPLITS: tuple[str, ...] = ("dev", "val", "test")
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "assets" / "corpus"

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "split": str,
    "setting": str,
    "language": str,
    "seconds": (int, float),
    "voice": str,
    "audio": str,
    "text": str,
}


@dataclass(frozen=True)
class Window:
    """One evaluation window (4-20 s of audio and its reference text)."""

    id: str
    split: str
    setting: str
    language: str
    seconds: float
    voice: str
    audio: Path
    text: str

    @property
    def spoken(self) -> "SpokenQuestion":
        """The window's spoken question and reference answer (docs/corpus.md)."""
        from as2d_cli.corpus.questions import question_for

        return question_for(self.id, self.text, self.language)

    @property
    def question(self) -> str:
        """The window's spoken question (``--task answer`` without ``--question``)."""
        return self.spoken.question

    def load_audio(self) -> np.ndarray:
        """16 kHz mono float32 samples."""
        import soundfile as sf

        if not self.audio.is_file():
            raise UserError(
                f"corpus audio {self.audio} is missing; reinstall the package or rerun training/make_corpus.py"
            )
        data, rate = sf.read(self.audio, dtype="float32")
        if rate != 16_000 or data.ndim != 1:
            raise FormatError(
                f"corpus audio {self.audio} is not 16 kHz mono; rerun training/make_corpus.py"
            )
        return data


@dataclass(frozen=True)
class Corpus:
    path: Path
    generator: dict
    windows: tuple[Window, ...]

    def split(self, name: str | None) -> list[Window]:
        if name is None:
            return list(self.windows)
        if name not in SPLITS:
            raise UserError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        return [w for w in self.windows if w.split == name]

    def seconds(self) -> dict[str, float]:
        """Audio seconds by window id."""
        return {w.id: w.seconds for w in self.windows}

    def get(self, window_id: str) -> Window:
        for w in self.windows:
            if w.id == window_id:
                return w
        raise UserError(f"no window {window_id!r} in {self.path}; `as2d corpus list` shows the ids")


def load_corpus(directory: Path | str | None = None) -> Corpus:
    """Load and validate ``manifest.json`` in ``directory`` (default: the bundled corpus)."""
    directory = Path(directory) if directory is not None else DEFAULT_DIR
    path = directory / "manifest.json"
    data = read_json(
        path,
        f"corpus manifest {path} not found; rerun training/make_corpus.py or reinstall the package",
        "regenerate it with training/make_corpus.py",
        FormatError,
    )
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise FormatError(
            f"{path}: key 'schema' must be {SCHEMA!r}; this is not an as2d corpus manifest"
        )
    version = data.get("version")
    if version != VERSION:
        hint = (
            "upgrade as2d"
            if isinstance(version, int) and version > VERSION
            else "regenerate it with training/make_corpus.py"
        )
        raise FormatError(
            f"{path}: corpus manifest version {version!r} is not supported (this as2d reads {VERSION}); {hint}"
        )
    items = data.get("windows")
    if not isinstance(items, list):
        raise FormatError(f"{path}: key 'windows' must be a list")
    windows: list[Window] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise FormatError(f"{path}: windows[{i}] must be an object")
        for key, typ in _FIELDS.items():
            if not isinstance(item.get(key), typ):
                raise FormatError(
                    f"{path}: windows[{i}] key {key!r} is missing or has the wrong type"
                )
        if item["split"] not in SPLITS or item["setting"] not in SETTINGS:
            raise FormatError(
                f"{path}: windows[{i}] has unknown split/setting {item['split']!r}/{item['setting']!r}"
            )
        if item["id"] in seen:
            raise FormatError(f"{path}: window id {item['id']!r} appears twice")
        seen.add(item["id"])
        windows.append(
            Window(
                item["id"],
                item["split"],
                item["setting"],
                item["language"],
                float(item["seconds"]),
                item["voice"],
                directory / item["audio"],
                item["text"],
            )
        )
    return Corpus(path, dict(data.get("generator") or {}), tuple(windows))
