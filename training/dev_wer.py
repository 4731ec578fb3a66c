"""Greedy word error rate of target or drafter checkpoints on the development and validation
windows, per setting: the check that decides whether a continued run ships (the test split
is never consulted for it).

    python training/dev_wer.py training/work/target_100189.pt training/work/target/ckpt.pt

Each checkpoint decodes every dev and val window greedily in torch (the training code's
``greedy``, float32, one thread) and is scored against the windows' reference text with the
toolkit's normalisation (``as2d_cli.corpus.text.word_errors``). Two or more checkpoints are
printed side by side.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train  # noqa: E402
from models import Seq2Seq  # noqa: E402

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.corpus.text import word_errors  # noqa: E402
from as2d_cli.models.features import log_mel  # noqa: E402


def score(ckpt: Path, windows: list, feats: list[torch.Tensor]) -> tuple[int, dict[str, list[int]]]:
    """(step, {setting: [word errors, reference words]}) of one checkpoint."""
    saved = torch.load(ckpt, weights_only=False)
    model, step = Seq2Seq.from_saved(saved), saved["state"]["step"]
    del saved
    model.eval()
    tok = train.load_tokenizer()
    res: dict[str, list[int]] = {}
    with torch.no_grad():
        for w, f in zip(windows, feats, strict=True):
            e, n = word_errors(w.text, tok.decode(train.greedy(model, f)))
            r = res.setdefault(w.setting, [0, 0])
            r[0] += e
            r[1] += n
    return step, res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt", nargs="+", type=Path, help="train.py checkpoints (target or drafter)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    missing = [str(p) for p in a.ckpt if not p.is_file()]
    if missing:
        print(
            f"error: no checkpoint at {', '.join(missing)}: give train.py checkpoint files",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(a.threads)
    corpus = load_corpus()
    windows = [w for split in ("dev", "val") for w in corpus.split(split)]
    feats = [torch.from_numpy(log_mel(w.load_audio())) for w in windows]
    rows = [(p, *score(p, windows, feats)) for p in a.ckpt]
    settings = sorted({s for _, _, r in rows for s in r})
    print(f"greedy WER on {len(windows)} dev+val windows")
    print(f"{'setting':13s} " + " ".join(f"{f'step {step}':>12s}" for _, step, _ in rows))
    for s in settings + ["all"]:
        cells = []
        for _, _, r in rows:
            e, n = (
                (sum(v[0] for v in r.values()), sum(v[1] for v in r.values()))
                if s == "all"
                else r[s]
            )
            cells.append(f"{e / max(1, n):12.3f}")
        print(f"{s:13s} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
