"""Train the shared BPE tokenizer (target and drafter) on the training-split texts.

Usage: python training/make_tokenizer.py   (after training/make_corpus.py)
Writes as2d_cli/assets/models/tokenizer.json (a `tokenizers` file) and the CTC source's
character table as2d_cli/assets/models/ctc_chars.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "training" / "work" / "train"
OUT = ROOT / "as2d_cli" / "assets" / "models"
VOCAB = 1024
SPECIALS = ["<pad>", "<sot>", "<eot>", "<unk>"]  # ids 0..3; <pad> doubles as the CTC blank
ALPHABET = list("abcdefghijklmnopqrstuvwxyzäöüßáéíóúñ'")


def main() -> None:
    items = json.loads((WORK / "index.json").read_text())["items"]
    texts = [it["text"] for it in items]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=ALPHABET + ["▁"],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    chars = ["<blank>", " "] + ALPHABET
    (OUT / "ctc_chars.json").write_text(
        json.dumps({"blank": 0, "chars": chars}, ensure_ascii=False) + "\n"
    )
    n = sum(len(tok.encode(t).ids) for t in texts)
    print(
        f"vocab {tok.get_vocab_size()}, {n} tokens over {len(texts)} training texts ({n / max(1, sum(len(t.split()) for t in texts)):.2f} per word)"
    )


if __name__ == "__main__":
    main()
