"""Average the model weights of train.py checkpoints of one run (checkpoint averaging over its
last minutes, when the learning rate is already low): the last checkpoint's optimiser, step
and data position are kept, and ``state["averaged_from"]`` lists the inputs (export.py
records their number in models.json as ``trained.averaged_checkpoints``).

    python training/average.py OUT CKPT [CKPT ...]

Whether the average ships is decided like any continued run, on dev and val only
(``python training/dev_wer.py LAST OUT``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", type=Path)
    ap.add_argument("ckpts", type=Path, nargs="+")
    a = ap.parse_args()
    if a.out.exists():
        raise SystemExit(
            f"{a.out} exists: name another file (a checkpoint is never overwritten here)"
        )
    saved = [torch.load(p, weights_only=False) for p in a.ckpts]
    dims = {str(s["dims"]) for s in saved}
    if len(dims) != 1:
        raise SystemExit("the checkpoints have different model dimensions: they are not one run")
    last = saved[-1]
    last["model"] = {
        k: (sum(s["model"][k].float() for s in saved) / len(saved)).to(v.dtype)
        if v.is_floating_point()
        else v
        for k, v in last["model"].items()
    }
    last["state"]["averaged_from"] = [str(p) for p in a.ckpts]
    tmp = a.out.with_suffix(".tmp")
    torch.save(last, tmp)
    tmp.replace(a.out)
    print(f"averaged {len(saved)} checkpoints -> {a.out}")


if __name__ == "__main__":
    main()
