"""Teacher-forced cross-entropy and top-1 accuracy of a checkpoint on the development windows.

Greedy WER on a few windows is too coarse to follow training; this is the per-token view:
the decoder is fed the reference tokens and scored on predicting the next one.

    python training/dev_ce.py training/work/target/ckpt.pt [--labels target]

Prints CE (nats per BPE token, EOS included) and top-1 per setting and over all windows.
``--labels target`` scores against the shipped target's greedy tokens (the dev traces'
references) instead of the reference text: for a distilled drafter, top-1 is then the
chance it proposes the target's next token after a correct prefix.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train  # noqa: E402
from models import Seq2Seq  # noqa: E402

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.models.features import log_mel  # noqa: E402


def _target_tokens() -> dict[str, list[int]]:
    """The shipped target's greedy tokens (EOS dropped) per dev window, from the dev traces."""
    from as2d_cli.evaluate.inputs import ASSET_TRACES
    from as2d_cli.formats.trace_io import load_traces

    ts = load_traces(ASSET_TRACES / "dev.jsonl.gz")
    return {w.id: [t for t in w.reference if t != ts.eos_id] for w in ts.windows}


def main() -> int:
    args = sys.argv[1:]
    labels = "reference"
    if len(args) == 3 and args[1] == "--labels" and args[2] in ("reference", "target"):
        labels = args[2]
        args = args[:1]
    if len(args) != 1:
        print(
            "usage: "
            + next(line.strip() for line in __doc__.splitlines() if "training/dev_ce.py" in line)
        )
        return 2
    sys.argv[1:] = args
    targets = _target_tokens() if labels == "target" else {}
    torch.set_num_threads(1)
    saved = torch.load(sys.argv[1], weights_only=False)
    model, step = Seq2Seq.from_saved(saved), saved["state"]["step"]
    del saved
    tok = train.load_tokenizer()
    res: dict[str, list[float]] = {}
    with torch.no_grad():
        for w in load_corpus().split("dev"):
            ids = targets[w.id] if labels == "target" else tok.encode(w.text).ids
            mel = torch.from_numpy(log_mel(w.load_audio()))[None]
            inp = torch.tensor([[train.SOT] + ids])
            tgt = torch.tensor([ids + [train.EOT]])
            logits, _ = model(mel, torch.tensor([mel.shape[1]]), inp)
            r = res.setdefault(w.setting, [0.0, 0.0, 0.0])
            r[0] += F.cross_entropy(logits[0], tgt[0], reduction="sum").item()
            r[1] += (logits[0].argmax(-1) == tgt[0]).sum().item()
            r[2] += tgt.shape[1]
    total = [sum(r[i] for r in res.values()) for i in range(3)]
    print(f"step {step}")
    for k, r in sorted(res.items()):
        print(f"  {k:13s} CE {r[0] / r[2]:.3f}  top-1 {r[1] / r[2]:.3f}")
    print(f"  {'all':13s} CE {total[0] / total[2]:.3f}  top-1 {total[1] / total[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
