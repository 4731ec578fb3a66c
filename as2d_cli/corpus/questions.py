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
words) falls through to the next kind in that order. The corpus's stored spoken-QA requests
(docs/corpus.md, "Requests") also ask ``number`` — "What is the first number spoken?",
answered in digits — of windows that say a number (:data:`NUMBER_NAMES`).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from as2d_cli.models.prompting import LANGUAGE_NAMES

KINDS = ("next-word", "count", "language", "last-words", "first-word")
# Every kind :func:`ask` serves: the rotation's five and ``number``.
ALL_KINDS = (*KINDS, "number")

# Number names the corpus speaks, (English, German, Spanish); English "one hundred" is
# two words, so its "hundred" names the number.
NUMBER_NAMES: dict[int, tuple[str, str, str]] = {
    1: ("one", "eins", "uno"),
    2: ("two", "zwei", "dos"),
    3: ("three", "drei", "tres"),
    4: ("four", "vier", "cuatro"),
    5: ("five", "fünf", "cinco"),
    6: ("six", "sechs", "seis"),
    7: ("seven", "sieben", "siete"),
    8: ("eight", "acht", "ocho"),
    9: ("nine", "neun", "nueve"),
    10: ("ten", "zehn", "diez"),
    11: ("eleven", "elf", "once"),
    12: ("twelve", "zwölf", "doce"),
    13: ("thirteen", "dreizehn", "trece"),
    14: ("fourteen", "vierzehn", "catorce"),
    15: ("fifteen", "fünfzehn", "quince"),
    16: ("sixteen", "sechzehn", "dieciséis"),
    17: ("seventeen", "siebzehn", "diecisiete"),
    18: ("eighteen", "achtzehn", "dieciocho"),
    19: ("nineteen", "neunzehn", "diecinueve"),
    20: ("twenty", "zwanzig", "veinte"),
    30: ("thirty", "dreißig", "treinta"),
    40: ("forty", "vierzig", "cuarenta"),
    50: ("fifty", "fünfzig", "cincuenta"),
    100: ("one hundred", "hundert", "cien"),
}
_LANG_INDEX = {"en": 0, "de": 1, "es": 2}


def number_value(word: str, language: str) -> int | None:
    """The number a word of ``language`` names (English ``hundred`` is 100), or None."""
    i = _LANG_INDEX.get(language)
    if i is None:
        return None
    for value, names in NUMBER_NAMES.items():
        if names[i].split()[-1] == word:
            return value
    return None


@dataclass(frozen=True)
class SpokenQuestion:
    kind: str
    question: str
    answer: str


def words_of(text: str) -> list[str]:
    return re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.lower())


def ask(kind: str, words: list[str], language: str, salt: int) -> SpokenQuestion | None:
    """A question of ``kind`` about the spoken ``words``, or None when they cannot serve it
    (``salt`` chooses among the words that can)."""
    if kind == "number":
        for i, w in enumerate(words):
            v = number_value(w, language)
            if v is not None:  # English "one hundred": the "one" starts 100
                after = number_value(words[i + 1], language) if i + 1 < len(words) else None
                said = 100 if v == 1 and after == 100 else v
                return SpokenQuestion(kind, "What is the first number spoken?", str(said))
        return None
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
    words = words_of(text)
    for j in range(len(KINDS)):
        q = ask(KINDS[(start + j) % len(KINDS)], words, language, salt)
        if q is not None:
            return q
    return ask("language", words, language, salt)  # type: ignore[return-value]
