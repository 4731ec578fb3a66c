"""The audio-LLM adapter's per-call overhead against raw ONNX Runtime calls on the same
files, and the text conversion's cost per published token.

    python benchmarks/audio_llm_overhead.py [--models PAIR] [--calls 300] [--windows 4]

1. For each model of an audio-LLM pair (default: the test fixture pair, imported into a
   temporary folder) and widths K = 1, 4, 8, 16: ``AudioLlmModel.decode`` (token embedding,
   audio rows, feeds built per call, end-of-text folding, cache bookkeeping) against the
   same two ``session.run`` calls (embed_tokens, then the merged decoder) with feeds built
   once, on the same sessions, cache and tokens, interleaved call by call. Prints the
   median of each and their ratio.
2. A Whisper-layout drafter with its own tokenizer (the Whisper fixture's) drafting for the
   audio-LLM target through the text conversion: over ``--windows`` development windows,
   the conversion's time per published target token, against the drafter's whole step
   time (its decoder calls included).
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
from as2d_cli.models.ortio import as_array, cache_length  # noqa: E402

DATA = ROOT / "tests" / "data"


def raw_call(model, ids: np.ndarray, feeds: dict) -> None:
    """The two calls a caller of ONNX Runtime makes for K tokens (feeds built once)."""
    (feeds["inputs_embeds"],) = model.embed.run(None, {"input_ids": ids})
    model.decoder.run(None, feeds)


def overhead(loaded, calls: int) -> None:
    w = load_corpus().get("dev-read-000")
    audio = w.load_audio()
    print(f"pair {loaded.name}: {calls} interleaved calls per width, median ms (adapter / raw)")
    for name in ("target", "drafter"):
        if loaded.kind(name) != "audio-llm-onnx":
            continue
        model: Any = open_seq2seq(loaded, name)  # the audio-LLM adapter (its graphs are read)
        cross = model.encode(audio, w.language)
        _, past = model.decode(list(cross.prompt), model.empty_cache(), cross)
        _, past = model.decode(list(range(40, 56)), past, cross)
        n = cache_length(past)
        for k in (1, 4, 8, 16):
            tokens = list(range(100, 100 + k))
            feeds = {
                "attention_mask": np.ones((1, n + k), dtype=np.int64),
                "position_ids": np.arange(n, n + k, dtype=np.int64)[None],
            }
            for i in range(model.layers):
                feeds[f"past_key_values.{i}.key"] = np.ascontiguousarray(as_array(past[0][i]))
                feeds[f"past_key_values.{i}.value"] = np.ascontiguousarray(as_array(past[1][i]))
            ids = np.asarray(tokens, dtype=np.int64)[None]
            ours, raw = [], []
            for _ in range(10):  # warm-up
                model.decode(tokens, past, cross)
                raw_call(model, ids, feeds)
            for i in range(calls):
                for side in (0, 1) if i % 2 else (1, 0):  # alternate which goes first
                    t0 = time.perf_counter_ns()
                    if side == 0:
                        model.decode(tokens, past, cross)
                        ours.append(time.perf_counter_ns() - t0)
                    else:
                        raw_call(model, ids, feeds)
                        raw.append(time.perf_counter_ns() - t0)
            mo, mr = statistics.median(ours) / 1e6, statistics.median(raw) / 1e6
            print(
                f"  {name:<8} K={k:<2}  adapter {mo:7.3f}  raw {mr:7.3f}  ratio {mo / mr:5.3f}  "
                f"(+{(mo - mr) * 1e3:.0f} µs per call)"
            )


def conversion(windows: int) -> None:
    from as2d_cli.models.pair import import_pair
    from as2d_cli.models.sources import drafter_source

    pair = import_pair(
        DATA / "audio_llm" / "target",
        DATA / "whisper" / "drafter",
        Path(tempfile.mkdtemp()) / "cross",
    )
    loaded = load_pair(pair)
    drafter = open_seq2seq(loaded, "drafter")
    conv_ns = step_ns = published = source_tokens = 0
    for w in load_corpus().split("dev")[:windows]:
        src = drafter_source(
            "drafter", drafter, w.load_audio(), target_vocab=loaded.vocab, language=w.language
        )
        src.start()
        t0 = time.perf_counter_ns()
        while (unit := src.step()) is not None:
            published += len(unit)
        step_ns += time.perf_counter_ns() - t0
        conv_ns += src.conversion.convert_ns
        source_tokens += len(src.conversion.tokens)
    print(
        f"text conversion (Whisper-layout drafter -> audio-LLM target), {windows} windows: "
        f"{source_tokens} drafter tokens -> {published} target tokens; conversion "
        f"{conv_ns / 1e3 / max(published, 1):.1f} µs per published token, "
        f"{conv_ns / max(step_ns, 1):.1%} of the source's step time"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models", type=Path, help="an audio-LLM pair (default: the test fixture pair)"
    )
    ap.add_argument("--calls", type=int, default=300, help="timed calls per width and side")
    ap.add_argument("--windows", type=int, default=4, help="windows for the conversion's cost")
    a = ap.parse_args()
    pair = a.models
    if pair is None:
        from as2d_cli.models.pair import import_pair

        data = DATA / "audio_llm"
        pair = import_pair(data / "target", data / "drafter", Path(tempfile.mkdtemp()) / "fixture")
    overhead(load_pair(pair), a.calls)
    conversion(a.windows)


if __name__ == "__main__":
    main()
