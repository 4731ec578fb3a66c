"""Spoken questions about the corpus windows (``--task answer`` without ``--question``).

Every window carries one question a listener can answer from its audio alone, with a
reference answer taken from its transcript, chosen deterministically from the window's id
and text (no download, nothing stored beside the corpus): docs/corpus.md, "Spoken
questions". The kinds rotate by the window's index:

* ``next-word`` — "Which word is spoken right after the word "W"?" (W occurs once);
* ``count`` — "How many times is the word "W" spoken?";
* ``language`` — "What language is spoken in the audio?";
* ``last-words`` — "What are the last three words spoken?";
* ``first-word`` — "What is the first word spoken?".

A kind that does not fit the window's text (no word occurring once, fewer than three
words) falls through to the next kind in that order.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from as2d_cli.models.prompting import LANGUAGE_NAMES

KINDS = ("next-word", "count", "language", "last-words", "first-word")


@dataclass(frozen=True)
class SpokenQuestion:
    kind: str
    question: str
    answer: str


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.lower())


def _ask(kind: str, words: list[str], language: str, salt: int) -> SpokenQuestion | None:
    if kind == "next-word":
        once = [i for i, w in enumerate(words[:-1]) if words.count(w) == 1 and len(w) > 2]
        if not once:
            return None
        i = once[salt % len(once)]
        return SpokenQuestion(
            kind, f'Which word is spoken right after the word "{words[i]}"?', words[i + 1]
        )
    if kind == "count":
        long = sorted({w for w in words if len(w) > 2})
        if not long:
            return None
        w = long[salt % len(long)]
        return SpokenQuestion(
            kind, f'How many times is the word "{w}" spoken?', str(words.count(w))
        )
    if kind == "language":
        return SpokenQuestion(
            kind, "What language is spoken in the audio?", LANGUAGE_NAMES.get(language, language)
        )
    if kind == "last-words":
        if len(words) < 3:
            return None
        return SpokenQuestion(kind, "What are the last three words spoken?", " ".join(words[-3:]))
    if not words:
        return None
    return SpokenQuestion(kind, "What is the first word spoken?", words[0])


def question_for(window_id: str, text: str, language: str) -> SpokenQuestion:
    """The window's spoken question and its reference answer."""
    salt = zlib.crc32(window_id.encode("utf-8"))
    m = re.search(r"(\d+)$", window_id)
    start = (int(m.group(1)) if m else salt) % len(KINDS)
    words = _words(text)
    for j in range(len(KINDS)):
        q = _ask(KINDS[(start + j) % len(KINDS)], words, language, salt)
        if q is not None:
            return q
    return _ask("language", words, language, salt)  # type: ignore[return-value]
