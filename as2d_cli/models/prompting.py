"""What a request asks the model: the task, its language, the question, the instruction text.

A :class:`PromptSpec` is the one form these settings take everywhere — command options,
model pairs, the runner protocol, trace and profile provenance (:meth:`PromptSpec.to_wire`
/ :meth:`PromptSpec.from_wire`). For a Whisper pair the task and language choose its task
and language tokens; for an audio language model the task chooses the instruction text of
the one user turn (docs/models.md, "Audio language models"):

* ``transcribe`` — ``Transcribe the audio.``
* ``translate`` — ``Translate the audio into <language name>.`` (``--language``, default en)
* ``answer`` — the question itself (``--question``, or each corpus window's own question)

``--prompt TEXT`` replaces the instruction text of any task. The chat template is rendered
here with jinja2 as transformers renders it (sandboxed, ``trim_blocks`` and
``lstrip_blocks``, the same helpers), so the prompt ids equal what the model's Hugging Face
processor builds for the same conversation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from as2d_cli.errors import UserError

TASKS = ("transcribe", "translate", "answer")
WHISPER_TASKS = ("transcribe", "translate")
# A trace's and a result's task names (the paper's tables: ASR, speech translation, spoken QA).
TRACE_TASKS = {"transcribe": "asr", "translate": "translation", "answer": "qa"}
DEFAULT_INSTRUCTIONS = {
    "transcribe": "Transcribe the audio.",
    "translate": "Translate the audio into {language}.",
}
# Language names for the translate instruction (ISO 639-1 codes; others are named by code).
LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "es": "Spanish",
    "fr": "French",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian",
    "ar": "Arabic",
    "hi": "Hindi",
}


@dataclass(frozen=True)
class PromptSpec:
    """A request's prompt settings; None fields take the pair's or the window's default."""

    task: str | None = None
    language: str | None = None
    question: str | None = None
    text: str | None = None  # --prompt: the instruction text, replacing the task's

    def __post_init__(self) -> None:
        if self.task is not None and self.task not in TASKS:
            raise UserError(f"unknown --task {self.task!r}; use one of {', '.join(TASKS)}")
        if self.question is not None and self.task not in (None, "answer"):
            raise UserError(
                "--question asks a spoken question: use it with --task answer "
                f"(the task is {self.task or 'the pair default'})"
            )
        for name, value in (("--question", self.question), ("--prompt", self.text)):
            if value is not None and not value.strip():
                raise UserError(f"{name} is empty; give the text, or drop {name}")

    @property
    def empty(self) -> bool:
        return self == PromptSpec()

    def to_wire(self) -> dict[str, Any]:
        """The settings as one JSON object (the runner protocol's ``prompt``)."""
        return {
            "task": self.task,
            "language": self.language,
            "question": self.question,
            "text": self.text,
        }

    @classmethod
    def from_wire(cls, doc: Any) -> PromptSpec:
        if doc is None:
            return cls()
        if not isinstance(doc, dict) or set(doc) - {"task", "language", "question", "text"}:
            raise UserError(f"prompt settings {doc!r} are not a PromptSpec object")
        return cls(doc.get("task"), doc.get("language"), doc.get("question"), doc.get("text"))

    def for_window(self, question: str | None) -> PromptSpec:
        """This spec for one window: ``answer`` without --question takes the window's own."""
        if self.task == "answer" and self.question is None and self.text is None and question:
            return replace(self, question=question)
        return self

    def instruction(self) -> str:
        """The user turn's text after the audio."""
        if self.text is not None:
            return self.text
        task = self.task or "transcribe"
        if task == "answer":
            if self.question is None:
                raise UserError(
                    "--task answer needs a question: pass --question TEXT (or --prompt TEXT), or "
                    "use corpus windows, which carry their own"
                )
            return self.question
        lang = (self.language or "en").lower()
        return DEFAULT_INSTRUCTIONS[task].format(language=LANGUAGE_NAMES.get(lang, lang))


def conversation(instruction: str) -> list[dict[str, Any]]:
    """One user turn: the audio, then the instruction text (no system turn)."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "audio", "audio_url": "audio"},
                {"type": "text", "text": instruction},
            ],
        }
    ]


@lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def render_chat(template: str, instruction: str, specials: dict[str, str], where: str) -> str:
    """The chat template rendered for one request, with the generation prompt added."""
    import jinja2

    try:
        return str(
            _compile(template).render(
                messages=conversation(instruction),
                tools=None,
                documents=None,
                add_generation_prompt=True,
                **specials,
            )
        )
    except jinja2.exceptions.TemplateError as exc:
        raise UserError(
            f"{where}: the chat template cannot be rendered ({exc}); save the model's tokenizer "
            "with its chat_template"
        ) from None


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
