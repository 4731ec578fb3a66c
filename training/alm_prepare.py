"""Prepare the bundled audio LLM's training: its tokenizer and its feature adapter.

    python training/alm_prepare.py      # -> training/work/alm/tokenizer.json, adapter.npz

* tokenizer.json: a byte-level BPE (Qwen2's pre-tokenizer split) of ALM_BPE_SIZE tokens
  trained on training-split text only (the corpus's training sentences, faker's word lists
  of the three languages, the grammar's training-split sentences in the three languages,
  the tasks' instructions, questions and answers), then the four special tokens
  (training/alm_models.py SPECIALS).
* adapter.npz: the least-squares linear map (weights and bias) from the Whisper-style
  log-mel features the audio LLM reads to the features the bundled encoder was trained on,
  fitted on ADAPTER_UTTERANCES freshly synthesised training-style utterances; the audio
  tower's adapter starts from it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "training"))

import make_corpus as mc  # noqa: E402
from alm_models import SPECIALS  # noqa: E402
from audio_llm_fixtures import byte_level_bpe  # noqa: E402

from as2d_cli.corpus.questions import ALL_KINDS, ask, words_of  # noqa: E402
from as2d_cli.models.prompting import PromptSpec  # noqa: E402
from training.parallel_text import Grammar  # noqa: E402

WORK = ROOT / "training" / "work" / "alm"
ALM_BPE_SIZE = 3000
ADAPTER_UTTERANCES = 80


def log(*a: object) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def tokenizer_texts() -> list[str]:
    rng = np.random.default_rng(7)
    sentences = [s for s in mc.english_sentences() if mc.split_of(s) == "train"]
    texts = sentences * 10  # prose: the widest vocabulary, the fewest sentences
    for loc in ("en_US", "de_DE", "es_ES"):
        words = mc.faker_words(loc)
        texts += [" ".join(rng.choice(words, 12)) for _ in range(3000)]
    grammar = Grammar(rng)
    for _ in range(10000):
        triple = grammar.sentence()
        if mc.split_of(triple[0]) == "train":
            texts += list(triple)
    prompts = []
    for task in ("transcribe", "translate"):
        prompts += [PromptSpec(task=task, language="en").instruction()] * 200
    for text in texts[::50]:
        for kind in ALL_KINDS:
            q = ask(kind, words_of(text), "en", int(rng.integers(1000)))
            if q is not None:
                prompts += [q.question, q.answer]
    texts += prompts * 20 + ["user\n", "assistant\n"] * 200
    return texts


def train_tokenizer() -> None:
    tok = byte_level_bpe(tokenizer_texts(), ALM_BPE_SIZE, SPECIALS)
    tok.save(str(WORK / "tokenizer.json"))
    log(f"tokenizer: {tok.get_vocab_size()} tokens -> {WORK / 'tokenizer.json'}")


def fit_adapter() -> None:
    sentences = mc.english_sentences()
    en_words = sorted(
        set(mc.faker_words("en_US"))
        | {w for s in sentences if mc.split_of(s) == "train" for w in s.split()}
    )
    specs = mc.build_specs("train", ADAPTER_UTTERANCES, 977, sentences, en_words, shard=977)
    xs, ys = [], []
    for spec in specs:
        spec["features"] = "both"
        r = mc.make_item(spec)
        n = min(len(r["features"]), len(r["whisper"]))
        xs.append(r["whisper"][:n])
        ys.append(r["features"][:n])
    x, y = np.concatenate(xs), np.concatenate(ys)
    xb = np.hstack([x, np.ones((len(x), 1), dtype=x.dtype)])
    w, *_ = np.linalg.lstsq(xb, y, rcond=None)
    pred = xb @ w
    r2 = 1 - ((pred - y) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()
    np.savez(
        WORK / "adapter.npz", weight=w[:-1].T.astype(np.float32), bias=w[-1].astype(np.float32)
    )
    log(f"adapter: R^2 {r2:.4f} over {len(x)} frames -> {WORK / 'adapter.npz'}")


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    train_tokenizer()
    if "--tokenizer-only" not in sys.argv:
        fit_adapter()


if __name__ == "__main__":
    main()
