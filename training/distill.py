"""The shipped target's greedy transcripts of a training set (sequence-level distillation).

A source or drafter only helps speculative decoding where it proposes what the *target*
will emit, right or wrong. With today's undertrained target (WER ≈ 0.65 on read speech)
two models trained on the reference text agree on few tokens (the CTC source matched 3–5 %
of the target's tokens in the engine although its own WER was close to the target's), so
the drafter and the CTC source can be trained on the target's own output instead
(``train.py --labels target``; Kim & Rush 2016, DistillSpec 2023).

    python training/distill.py --set 6 [--threads 1] [--workers 2]

Runs the bundled target (ONNX Runtime, the run-time code path) over every utterance of the
set's precomputed features and writes ``target_tokens.json`` beside its ``index.json``: the
token ids before EOS per utterance id, with the target's SHA-256 so a later target cannot be
mixed in silently. Utterances where the target hit the generation limit without EOS are
recorded as ``null`` (a repetition loop teaches nothing). Resumable: partial results are
saved every 200 utterances.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.formats import registry  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from as2d_cli.models.session import Seq2SeqModel  # noqa: E402

WORK = ROOT / "training" / "work"
SCHEMA, VERSION = registry.name_version("as2d.distill")
OUT = "target_tokens.json"


def set_dir(name: int) -> Path:
    return WORK / "train" if name == 0 else WORK / "train_shards" / str(name)


def greedy_from_mel(model: Seq2SeqModel, mel: np.ndarray, limit: int) -> list[int] | None:
    """The target-only greedy decode of ``greedy_decode`` from precomputed features."""
    cross = model.encode_features(mel[None].astype(np.float32))
    logits, cache = model.decode([model.vocab.sot], model.empty_cache(), cross)
    out = [int(logits[-1].argmax())]
    while out[-1] != model.vocab.eot:
        if len(out) >= limit:
            return None
        logits, cache = model.decode([out[-1]], cache, cross)
        out.append(int(logits[-1].argmax()))
    return out[:-1]


_WORKER: dict = {}


def _start_worker(directory: str, threads: int) -> None:
    """Each worker process holds its own target session and the set's features (mapped)."""
    model = Seq2SeqModel(load_pair(), "target", threads)
    _WORKER.update(model=model, feats=np.load(Path(directory) / "features.npy", mmap_mode="r"))


def _transcribe(item: dict) -> tuple[str, list[int] | None]:
    model, feats = _WORKER["model"], _WORKER["feats"]
    mel = np.asarray(feats[item["offset"] : item["offset"] + item["frames"]])
    return item["id"], greedy_from_mel(model, mel, model.max_positions - 1)


def load(directory: Path, sha: str) -> dict[str, list[int] | None]:
    path = directory / OUT
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    if doc.get("schema") != SCHEMA or doc.get("target_sha256") != sha:
        raise SystemExit(f"{path} was made by another target or format; delete it to redo the set")
    return doc["items"]


def save(directory: Path, sha: str, items: dict) -> None:
    tmp = directory / (OUT + ".tmp")
    tmp.write_text(
        json.dumps({"schema": SCHEMA, "version": VERSION, "target_sha256": sha, "items": items})
    )
    os.replace(tmp, directory / OUT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument(
        "--set", type=int, required=True, help="training set: 0 = the base set, N = shard N"
    )
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    ap.add_argument(
        "--workers", type=int, default=1, help="processes transcribing utterances side by side"
    )
    args = ap.parse_args()
    directory = set_dir(args.set)
    if not (directory / "index.json").exists():
        raise SystemExit(
            f"no training set at {directory}: run training/make_corpus.py --only train --shard {args.set}"
        )
    pair = load_pair()
    info = pair.model("target")
    sha = info["sha256"][info["files"]["decoder"]]
    items = json.loads((directory / "index.json").read_text())["items"]
    done = load(directory, sha)
    todo = [it for it in items if it["id"] not in done]
    t0, fresh = time.time(), 0
    # Utterances are independent: the order of the results does not matter, and the file is
    # saved every 200 so that a stopped run resumes.
    with Pool(max(1, args.workers), _start_worker, (str(directory), args.threads)) as pool:
        for uid, tokens in pool.imap_unordered(_transcribe, todo, chunksize=4):
            done[uid] = tokens
            fresh += 1
            if fresh % 200 == 0:
                save(directory, sha, done)
                rate = fresh / (time.time() - t0)
                print(
                    f"{len(done)}/{len(items)} utterances, {rate:.1f}/s, "
                    f"{(len(items) - len(done)) / rate / 60:.1f} min left",
                    flush=True,
                )
    save(directory, sha, done)
    loops = sum(v is None for v in done.values())
    print(
        f"{directory}: {len(done)} transcripts ({loops} without EOS, left out of training)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
