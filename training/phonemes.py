"""espeak-ng phoneme transcriptions of the training texts, for an acoustic auxiliary loss.

The corpus is espeak-ng speech, so espeak-ng's own IPA transcription of a text is an
exact description of the sounds in it. A CTC loss on those phonemes (``train.py --aux
phones``) gives the encoder a direct acoustic target; the BPE-token CTC it replaces asks
the encoder to spell, which it learned slowly (on random word lists, which a language
model cannot guess, the target's WER on its own training utterances was 0.82).

Transcriptions are cached next to each training set (``phonemes.json``, aligned with its
``index.json``); the symbol inventory (``training/work/phoneme_inventory.json``) only ever
grows, so ids stay stable when shards are added.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

VOICES = {"en": "en-us", "de": "de", "es": "es"}
DROP = set("ˈˌ")  # stress marks: not a sound of their own
FIRST_ID = 4  # ids 0–3 are the tokenizer's specials; the CTC blank is 0


def _espeak(texts: list[str], voice: str) -> list[str]:
    """IPA for each text in one espeak-ng run (a final period keeps one line per text)."""
    if not texts:
        return []
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("".join(t.replace(".", " ") + ".\n" for t in texts))
        name = f.name
    try:
        out = subprocess.run(
            ["espeak-ng", "-q", "--ipa", "-v", voice, "-f", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    finally:
        Path(name).unlink(missing_ok=True)
    if len(out) != len(texts):  # fall back to one run per text rather than misalign
        out = [
            subprocess.run(
                ["espeak-ng", "-q", "--ipa", "-v", voice, t],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.replace("\n", " ")
            for t in texts
        ]
    return [" ".join("".join(c for c in line if c not in DROP).split()) for line in out]


def transcriptions(folder: Path, items: list[dict]) -> list[str]:
    """Each item's IPA (cached in ``folder/phonemes.json``)."""
    cache = folder / "phonemes.json"
    if cache.exists():
        got = json.loads(cache.read_text(encoding="utf-8"))
        if len(got) == len(items):
            return got
    out = [""] * len(items)
    for lang, voice in VOICES.items():
        idx = [i for i, it in enumerate(items) if it["language"] == lang]
        for i, ph in zip(idx, _espeak([items[i]["text"] for i in idx], voice)):
            out[i] = ph
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    tmp.replace(cache)
    return out


def inventory(path: Path, transcripts: list[list[str]]) -> dict[str, int]:
    """Symbol → id (from FIRST_ID), growing the stored inventory with new symbols."""
    symbols: list[str] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    known = set(symbols)
    for group in transcripts:
        for ph in group:
            for c in ph:
                if c not in known:
                    known.add(c)
                    symbols.append(c)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(symbols, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return {c: FIRST_ID + i for i, c in enumerate(symbols)}
