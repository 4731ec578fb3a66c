"""Per-call overhead of the Whisper adapter against raw ONNX Runtime calls on the same files.

    python benchmarks/whisper_adapter_overhead.py [--models PAIR] [--calls 400]

For each model of a Whisper pair (default: the test fixture pair, imported into a temporary
folder) and widths K = 1, 4, 8, 16: the adapter's ``WhisperModel.decode`` (feeds built per
call, token suppression, cache bookkeeping) against ``session.run`` with feeds built once,
on the same session, the same cache and the same tokens, interleaved call by call. Prints
the median time of each and their ratio (the adapter's overhead in one run; the machine's
noise hits both alike).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.models.loader import open_seq2seq  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from as2d_cli.models.ortio import as_array  # noqa: E402


def raw_feeds(model, tokens, past, cross) -> tuple[Any, dict]:
    """The cached-branch feeds as a caller of ONNX Runtime would build them once."""
    feeds = {"input_ids": np.asarray(tokens, dtype=np.int64)[None]}
    if model.with_past is None:
        feeds["use_cache_branch"] = np.array([True])
        feeds["encoder_hidden_states"] = cross.hidden
    for i in range(model.layers):
        feeds[f"past_key_values.{i}.decoder.key"] = np.ascontiguousarray(as_array(past[0][i]))
        feeds[f"past_key_values.{i}.decoder.value"] = np.ascontiguousarray(as_array(past[1][i]))
        feeds[f"past_key_values.{i}.encoder.key"] = cross.k[i]
        feeds[f"past_key_values.{i}.encoder.value"] = cross.v[i]
    return model.with_past or model.decoder, feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models", type=Path, help="a Whisper pair folder (default: the test fixture pair)"
    )
    ap.add_argument("--calls", type=int, default=400, help="timed calls per width and side")
    a = ap.parse_args()
    pair = a.models
    if pair is None:
        from as2d_cli.models.pair import import_pair

        data = ROOT / "tests" / "data" / "whisper"
        pair = import_pair(data / "target", data / "drafter", Path(tempfile.mkdtemp()) / "fixture")
    loaded = load_pair(pair)
    w = load_corpus().get("dev-read-000")
    audio = w.load_audio()
    print(
        f"pair {loaded.name}: {a.calls} interleaved calls per width, median ms (adapter / raw ONNX Runtime)"
    )
    for name in ("target", "drafter"):
        model = open_seq2seq(loaded, name)
        cross = model.encode(audio, w.language)
        _, past = model.decode(list(cross.prompt), model.empty_cache(), cross)
        _, past = model.decode(
            [int(t) for t in range(40, 56)], past, cross
        )  # some context in the cache
        for k in (1, 4, 8, 16):
            tokens = list(range(100, 100 + k))
            sess, feeds = raw_feeds(model, tokens, past, cross)
            ours, raw = [], []
            for _ in range(10):  # warm-up
                model.decode(tokens, past, cross)
                sess.run(None, feeds)
            for i in range(a.calls):
                for side in (0, 1) if i % 2 else (1, 0):  # alternate which goes first
                    t0 = time.perf_counter_ns()
                    if side == 0:
                        model.decode(tokens, past, cross)
                        ours.append(time.perf_counter_ns() - t0)
                    else:
                        sess.run(None, feeds)
                        raw.append(time.perf_counter_ns() - t0)
            mo, mr = statistics.median(ours) / 1e6, statistics.median(raw) / 1e6
            print(
                f"  {name:<8} K={k:<2}  adapter {mo:7.3f}  raw {mr:7.3f}  ratio {mo / mr:5.3f}  "
                f"(+{(mo - mr) * 1e3:.0f} µs per call)"
            )


if __name__ == "__main__":
    main()
