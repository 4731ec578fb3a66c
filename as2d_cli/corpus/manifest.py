"""The corpus manifest (schema ``as2d.corpus``): load, validate, list and read windows.

Documented in docs/corpus.md. The manifest lists every shipped evaluation window with its
id, split, setting, language, duration, voice, audio file (relative to the manifest) and
normalised reference text; a translation window also its English reference; and (version
2) the spoken-QA requests, each a question about one window with its reference answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.strict import json_loads

if TYPE_CHECKING:
    from as2d_cli.corpus.questions import SpokenQuestion

SCHEMA, VERSION = registry.name_version("as2d.corpus")
READS = (1, 2)  # version 1: ASR windows only
SETTINGS: tuple[str, ...] = ("read", "meeting", "multilingual", "accented", "sung")
# Translation windows' settings: the direction, source language into English.
TRANSLATE_SETTINGS: tuple[str, ...] = ("de-en", "es-en")
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
    """One evaluation request: 4-20 s of audio and the reference output of its task. An ASR
    window's reference is its text; a translation window's its English translation; a
    spoken-QA request (its own id, ``setting`` ``qa``) asks ``asked`` about the audio of
    window ``of`` and its reference is ``answer``."""

    id: str
    split: str
    setting: str
    language: str
    seconds: float
    voice: str
    audio: Path
    text: str
    translation: str | None = None  # a translation window's English reference
    asked: str | None = None  # a spoken-QA request's question
    answer: str | None = None  # … and its reference answer
    kind: str | None = None  # … and its kind (as2d_cli.corpus.questions)
    of: str | None = None  # … and the window whose audio it asks about

    @property
    def task(self) -> str:
        """``transcribe``, ``translate`` or ``answer``."""
        if self.asked is not None:
            return "answer"
        return "transcribe" if self.translation is None else "translate"

    @property
    def reference(self) -> str:
        """The reference output of the request's own task."""
        if self.answer is not None:
            return self.answer
        return self.text if self.translation is None else self.translation

    @property
    def spoken(self) -> SpokenQuestion:
        """The window's spoken question and reference answer (docs/corpus.md): a QA
        request's stored one, else the one derived from the window's id and text."""
        from as2d_cli.corpus.questions import SpokenQuestion, question_for

        if self.asked is not None and self.answer is not None:
            return SpokenQuestion(self.kind or "", self.asked, self.answer)
        return question_for(self.id, self.text, self.language)

    @property
    def question(self) -> str:
        """The window's spoken question (``--task answer`` without ``--question``)."""
        return self.spoken.question

    def load_audio(self) -> np.ndarray:
        """16 kHz mono float32 samples, as long as the manifest says (a shorter file is a
        truncated copy)."""
        bundled = self.audio.resolve().is_relative_to(DEFAULT_DIR.resolve())
        fix = (
            "reinstall the package or rerun training/make_corpus.py"
            if bundled
            else "copy the corpus again or regenerate it with training/make_corpus.py"
        )
        if not self.audio.is_file():
            raise UserError(f"corpus audio {self.audio} is missing; {fix}")
        data = read_audio_file(self.audio, f"corpus audio {self.audio}", fix=fix)
        got = len(data) / AUDIO_RATE
        if abs(got - self.seconds) > WINDOW_SECONDS_TOLERANCE:
            raise FormatError(
                f"corpus audio {self.audio} holds {got:.2f} s but the manifest says "
                f"{self.seconds:.2f} s (window {self.id}); the file is truncated or replaced — {fix}"
            )
        return data


@dataclass(frozen=True)
class Corpus:
    path: Path
    generator: dict
    windows: tuple[Window, ...]  # the ASR windows (every command's default)
    translations: tuple[Window, ...] = ()
    questions: tuple[Window, ...] = ()  # the spoken-QA requests

    def split(self, name: str | None) -> list[Window]:
        """The split's ASR windows (all of them for None)."""
        _check_split(name)
        return [w for w in self.windows if name is None or w.split == name]

    def requests(self, task: str, split: str | None) -> list[Window]:
        """The split's requests of one task: its ASR windows (``transcribe``), translation
        windows (``translate``) or spoken-QA requests (``answer``)."""
        _check_split(split)
        pools = {
            "transcribe": self.windows,
            "translate": self.translations,
            "answer": self.questions,
        }
        if task not in pools:
            raise UserError(f"unknown task {task!r}; use transcribe, translate or answer")
        return [w for w in pools[task] if split is None or w.split == split]

    def seconds(self) -> dict[str, float]:
        """Audio seconds by window (and request) id."""
        return {w.id: w.seconds for w in (*self.windows, *self.translations, *self.questions)}

    def get(self, window_id: str) -> Window:
        for w in (*self.windows, *self.translations, *self.questions):
            if w.id == window_id:
                return w
        raise UserError(f"no window {window_id!r} in {self.path}; `as2d corpus list` shows the ids")


def _check_split(name: str | None) -> None:
    if name is not None and name not in SPLITS:
        raise UserError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")


# ------------------------------------------------------------------ audio files
AUDIO_RATE = 16_000
# The shortest recording accepted (docs/corpus.md, "Audio files"): anything shorter is an
# empty or cut recording, not speech to transcribe (the shipped windows are 4–20 s).
MIN_AUDIO_S = 1.0
# A window's file may differ from the manifest's duration by the codec's padding only
# (the shipped Ogg/Opus files: under 1 ms).
WINDOW_SECONDS_TOLERANCE = 0.05
_CONVERT = "convert it: `ffmpeg -i {name} -ar 16000 -ac 1 out.wav`"


def _wav_shortfall(path: Path) -> tuple[int, int] | None:
    """(declared, present) bytes of a RIFF/WAVE file's ``data`` chunk when the file ends
    before it does; None for complete files and other formats. libsndfile silently reads
    what is there, so a cut WAV would otherwise pass as a shorter recording."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            pos = 12
            while True:
                f.seek(pos)
                chunk = f.read(8)
                if len(chunk) < 8:
                    return None
                n = int.from_bytes(chunk[4:], "little")
                if chunk[:4] == b"data":
                    present = size - pos - 8
                    # Streaming writers leave the size 0 or 0xFFFFFFFF (unknown): not a cut.
                    return (n, present) if 0 < n < 0xFFFFFFFF and n > present else None
                pos += 8 + n + (n & 1)
    except OSError:
        return None


def read_audio_file(
    path: Path, label: str, *, fix: str | None = None, min_s: float = MIN_AUDIO_S
) -> np.ndarray:
    """The 16 kHz mono float32 samples of an audio file, or one error line starting with
    ``label`` (which names the file): not audio, truncated or damaged, another rate or
    channel count (``fix``: the remedy; default the ffmpeg conversion), shorter than
    ``min_s`` seconds. The caller reports a missing file in its own words."""
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except Exception as exc:  # soundfile raises its own error types
        why = str(exc).split(": ")[-1].strip().rstrip(".") or type(exc).__name__
        raise UserError(
            f"{label} is not an audio file soundfile can read ({why}); pass a WAV, FLAC or "
            "Ogg recording"
        ) from None
    cut = _wav_shortfall(path)
    if cut is not None:
        raise FormatError(
            f"{label} is truncated: its header announces {cut[0]} bytes of samples, the file "
            f"holds {cut[1]}; copy or export it again"
        )
    if info.samplerate != AUDIO_RATE or info.channels != 1:
        raise UserError(
            f"{label} is {info.samplerate} Hz with {info.channels} channel(s); as2d reads 16 kHz "
            f"mono — {fix or _CONVERT.format(name=path.name)}"
        )
    try:
        data, _ = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:
        raise FormatError(
            f"{label} cannot be decoded to its end ({str(exc).strip()}); the file is truncated "
            f"or damaged — {fix or 'copy or export it again'}"
        ) from None
    if info.frames > 0 and len(data) < info.frames:
        raise FormatError(
            f"{label} is truncated: {len(data)} of the {info.frames} samples its header "
            f"announces could be read; {fix or 'copy or export it again'}"
        )
    seconds = len(data) / AUDIO_RATE
    if seconds < min_s:
        raise UserError(
            f"{label} holds {seconds:.2f} s of audio; at least {min_s:g} s is needed (an empty "
            "or cut recording?) — pass the whole recording"
        )
    return data[:, 0]


def load_corpus(directory: Path | str | None = None) -> Corpus:
    """Load and validate ``manifest.json`` in ``directory`` (default: the bundled corpus)."""
    directory = Path(directory) if directory is not None else DEFAULT_DIR
    path = directory / "manifest.json"
    bundled = directory.resolve() == DEFAULT_DIR.resolve()
    if not path.is_file():
        raise UserError(
            f"corpus manifest {path} not found; "
            + (
                "rerun training/make_corpus.py or reinstall the package"
                if bundled
                else "pass a corpus folder made by training/make_corpus.py (it holds manifest.json)"
            )
        )
    try:  # a window field written twice is refused, not resolved silently
        data = json_loads(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(
            f"{path} is not valid JSON ({exc}); regenerate it with training/make_corpus.py"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise FormatError(
            f"{path}: key 'schema' must be {SCHEMA!r}; this is not an as2d corpus manifest"
        )
    version = data.get("version")
    if version not in READS:
        hint = (
            "upgrade as2d"
            if isinstance(version, int) and version > VERSION
            else "regenerate it with training/make_corpus.py"
        )
        raise FormatError(
            f"{path}: corpus manifest version {version!r} is not supported (this as2d reads {', '.join(map(str, READS))}); {hint}"
        )
    items = data.get("windows")
    if not isinstance(items, list):
        raise FormatError(f"{path}: key 'windows' must be a list")
    windows = [_window(path, directory, i, item) for i, item in enumerate(items)]
    ids = [w.id for w in windows]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise FormatError(f"{path}: window id {twice!r} appears twice")
    questions = _questions(path, data.get("requests", []), {w.id: w for w in windows})
    return Corpus(
        path,
        dict(data.get("generator") or {}),
        tuple(w for w in windows if w.translation is None),
        tuple(w for w in windows if w.translation is not None),
        questions,
    )


def _window(path: Path, directory: Path, i: int, item: object) -> Window:
    if not isinstance(item, dict):
        raise FormatError(f"{path}: windows[{i}] must be an object")
    for key, typ in _FIELDS.items():
        if not isinstance(item.get(key), typ):
            raise FormatError(f"{path}: windows[{i}] key {key!r} is missing or has the wrong type")
    translation = item.get("translation")
    if translation is not None and not isinstance(translation, str):
        raise FormatError(f"{path}: windows[{i}] key 'translation' must be a string")
    settings = SETTINGS if translation is None else TRANSLATE_SETTINGS
    if item["split"] not in SPLITS or item["setting"] not in settings:
        raise FormatError(
            f"{path}: windows[{i}] has unknown split/setting {item['split']!r}/{item['setting']!r}"
        )
    return Window(
        item["id"],
        item["split"],
        item["setting"],
        item["language"],
        float(item["seconds"]),
        item["voice"],
        directory / item["audio"],
        item["text"],
        translation,
    )


_REQUEST_FIELDS = ("id", "split", "task", "window", "kind", "question", "answer")


def _questions(path: Path, items: object, windows: dict[str, Window]) -> tuple[Window, ...]:
    """The manifest's spoken-QA requests, each naming a window of its own split."""
    if not isinstance(items, list):
        raise FormatError(f"{path}: key 'requests' must be a list")
    out: list[Window] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in _REQUEST_FIELDS
        ):
            raise FormatError(
                f"{path}: requests[{i}] must be an object with string keys {', '.join(_REQUEST_FIELDS)}"
            )
        w = windows.get(item["window"])
        if item["task"] != "answer" or w is None or w.split != item["split"]:
            raise FormatError(
                f"{path}: requests[{i}] must ask task 'answer' of a window of its split "
                f"({item['window']!r} in {item['split']!r})"
            )
        out.append(
            replace(
                w,
                id=item["id"],
                setting="qa",
                translation=None,
                asked=item["question"],
                answer=item["answer"],
                kind=item["kind"],
                of=w.id,
            )
        )
    ids = [q.id for q in out]
    if len(set(ids)) != len(ids) or set(ids) & set(windows):
        raise FormatError(f"{path}: request ids must be unique and differ from the window ids")
    return tuple(out)
