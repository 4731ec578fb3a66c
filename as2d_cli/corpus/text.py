"""Text normalisation and word error rate, shared by corpus building, training and scoring."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

_KEEP = re.compile(r"[^a-zäöüßáéíóúñ' ]")


def normalize_text(text: str) -> str:
    """Lower-case, keep letters (English, German, Spanish), apostrophes and single spaces."""
    t = unicodedata.normalize("NFC", text.lower())
    t = _KEEP.sub(" ", t)
    return " ".join(t.split())


def edit_distance(r: Sequence, h: Sequence) -> int:
    """Levenshtein distance between two sequences (words, characters or token ids)."""
    prev = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        cur = [i] + [0] * len(h)
        for j, hw in enumerate(h, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (rw != hw))
        prev = cur
    return prev[-1]


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edit distance in words, reference word count) after normalisation."""
    r = normalize_text(ref).split()
    return edit_distance(r, normalize_text(hyp).split()), len(r)


def char_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edit distance in characters, reference characters, spaces included) after
    normalisation: a near miss ("officer" for "office") costs one edit, not one word."""
    r = normalize_text(ref)
    return edit_distance(r, normalize_text(hyp)), len(r)


def wer(refs: list[str], hyps: list[str]) -> float:
    """Pooled word error rate (total edits / total reference words)."""
    errs = words = 0
    for ref, hyp in zip(refs, hyps, strict=True):
        e, n = word_errors(ref, hyp)
        errs += e
        words += n
    return errs / max(words, 1)
