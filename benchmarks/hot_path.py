"""The decoding hot path: numpy feeds (``io="numpy"``) against OrtValues kept between calls
(``io="ortvalue"``, the default; as2d_cli/models/ortio.py), on one fixed workload.

    python benchmarks/hot_path.py [--models PATH] [--windows 6] [--limit 64] [--rounds 5]

The workload, per window of the test split (the first ``--windows``): the request is
encoded off the clock, then three timed parts —

* ``target``: greedy target-only decoding (``OrtTarget``: the prompt, then one K=1 call a
  token, up to ``--limit`` tokens);
* ``source``: the drafter decoding on its own history (``DrafterSource``, K=1 calls, up to
  ``--limit`` steps);
* ``verify``: the target again, verifying the root plus the source's next 3 tokens at
  each position in one call and rolling its cache back to what it accepted (the rollback
  path: one copy of each layer's cache on the new path).

Both paths run the workload once to warm up (the numpy path's tokens are the reference),
then ``--rounds`` rounds in which the two paths take turns window by window, the one going
first alternating by window and by round, so both see the same machine. Per path and part it
prints the decoder calls, and per call the wall time, the ORT wall time, the Python CPU time
around the calls (as2d_cli/models/timing.py) and the thread's whole CPU time (ORT computes
on the calling thread: the measure least moved by other processes); then new/old of each
per round, over the whole workload, its median and range, and whether every token output
(each part, each window, each round) is identical on both paths — the run fails if not.

``--models``: a pair folder or a shipped pair's name, or a folder with ``target/`` and
``drafter/`` exports (e.g. tests/data/audio_llm, the audio-LLM test fixture), imported into
a temporary folder first. Default: the bundled pair.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from as2d_cli.corpus.manifest import Window, load_corpus  # noqa: E402
from as2d_cli.errors import UserError  # noqa: E402
from as2d_cli.models.loader import open_seq2seq  # noqa: E402
from as2d_cli.models.model_pair import ModelPair, load_pair  # noqa: E402
from as2d_cli.models.shipped import resolve_models  # noqa: E402
from as2d_cli.models.sources import drafter_source  # noqa: E402
from as2d_cli.models.target import OrtTarget  # noqa: E402
from as2d_cli.models.timing import Mark, add_splits, mark, split_since  # noqa: E402

PARTS = ("target", "source", "verify")
GUESSES = 3  # source tokens verified per target call


def timed(at: Mark, calls: int) -> dict[str, int]:
    """The time split since ``at`` (timing.py), the thread's whole CPU time (ORT's
    included: it computes on the calling thread) and the decoder calls made."""
    return {**split_since(at), "cpu_ns": time.thread_time_ns() - at.cpu_ns, "decode_calls": calls}


class IoPath:
    """One io path's models and its totals per part."""

    def __init__(self, pair: ModelPair, io: str) -> None:
        self.io = io
        self.target = OrtTarget(pair, io=io)
        self.drafter: Any = open_seq2seq(pair, "drafter", io=io)
        self.vocab = pair.vocab

    def window(self, w: Window, limit: int) -> tuple[dict[str, dict[str, int]], list[list[int]]]:
        """The workload on one window: each part's time split (with its decoder calls) and
        token output."""
        t, audio, times, outs = self.target, w.load_audio(), {}, []
        # target-only
        t.encode(audio, w.language)
        at, calls = mark(), 1
        ref = [t.prefill()]
        while ref[-1] != t.eos_id and len(ref) < min(limit, t.max_length):
            ref.append(t.verify([ref[-1]])[0])
            calls += 1
        times["target"] = timed(at, calls)
        outs.append(ref)
        # the source on its own history
        src = drafter_source(
            "drafter",
            self.drafter,
            audio,
            self.vocab,
            limit=limit,
            hidden=t.hidden,
            language=w.language,
        )
        src.start()
        at, calls, drafted = mark(), 0, []
        while (unit := src.step()) is not None:
            drafted += [tok for tok, _ in unit]
            calls += 1
        times["source"] = timed(at, calls)
        outs.append(drafted)
        # verification with rollback: the root plus the source's next tokens at each position
        t.encode(audio, w.language)
        at, calls = mark(), 1
        out = [t.prefill()]
        while out[-1] != t.eos_id and len(out) < min(limit, t.max_length):
            guesses = drafted[len(out) : len(out) + GUESSES]
            decided = t.verify([out[-1], *guesses])
            calls += 1
            take = 0
            while take < len(guesses) and guesses[take] == decided[take]:
                take += 1
            for tok in decided[: take + 1]:
                if out[-1] == t.eos_id or len(out) >= min(limit, t.max_length):
                    break
                out.append(tok)
            t.rollback(len(out) - 1)  # the last token is the next call's root
        times["verify"] = timed(at, calls)
        if out != ref:
            raise UserError(f"{self.io}: verifying changed the target's output on {w.id}")
        outs.append(out)
        return times, outs


def pair_for(value: str | None) -> ModelPair:
    if value is None:
        return load_pair()
    folder = resolve_models(value)
    if (folder / "target").is_dir() and (folder / "drafter").is_dir():  # raw exports
        from as2d_cli.models.pair import import_pair

        folder = import_pair(
            folder / "target", folder / "drafter", Path(tempfile.mkdtemp()) / folder.name
        )
    return load_pair(folder)


def per_call(split: dict[str, int]) -> tuple[float, float, float, float]:
    """Wall, ORT wall, Python CPU and thread CPU per decoder call, µs."""
    n = max(split["decode_calls"], 1)
    keys = ("wall_ns", "ort_ns", "python_ns", "cpu_ns")
    return tuple(split[k] / n / 1e3 for k in keys)  # type: ignore[return-value]


def measure(pair: ModelPair, a: argparse.Namespace) -> None:
    windows = load_corpus().split("test")[: a.windows]
    old_io, new_io = "numpy", "ortvalue"
    paths = {io: IoPath(pair, io) for io in (old_io, new_io)}
    reference = {w.id: paths[old_io].window(w, a.limit)[1] for w in windows}  # and warm-up
    identical = all(paths[new_io].window(w, a.limit)[1] == reference[w.id] for w in windows)
    # rounds[r][io][part]: the time split summed over the windows
    rounds: list[dict[str, dict[str, dict[str, int]]]] = []
    for r in range(a.rounds):
        got: dict[str, dict[str, dict[str, int]]] = {io: {} for io in paths}
        for i, w in enumerate(windows):  # the paths alternate window by window, and by round
            for io in (old_io, new_io) if (r + i) % 2 == 0 else (new_io, old_io):
                times, outs = paths[io].window(w, a.limit)
                identical &= outs == reference[w.id]
                for part in PARTS:
                    got[io][part] = add_splits(
                        got[io][part] if part in got[io] else {}, times[part]
                    )
        rounds.append(got)
    tokens = sum(len(x) for outs in reference.values() for x in outs)
    print(
        f"pair {pair.name} ({pair.directory}): {len(windows)} test windows, limit {a.limit}, "
        f"{a.rounds} rounds, the paths alternating window by window; per decoder call, µs "
        "(median over rounds): wall / ORT wall / Python CPU / thread CPU"
    )
    for part in PARTS:
        line = f"  {part:<7} {rounds[0][old_io][part]['decode_calls']:5d} calls"
        for io in (old_io, new_io):
            x = [statistics.median(per_call(rd[io][part])[i] for rd in rounds) for i in range(4)]
            line += f"  {io:>8} {x[0]:7.1f} / {x[1]:7.1f} / {x[2]:5.1f} / {x[3]:7.1f}"
        print(line)

    def whole(rd: dict[str, dict[str, int]]) -> dict[str, int]:
        total: dict[str, int] = {}
        for part in PARTS:
            total = add_splits(total, rd[part])
        return total

    names = ("wall", "ORT wall", "Python CPU", "thread CPU")
    ratios: dict[str, list[float]] = {k: [] for k in names}
    for rd in rounds:
        old, new = per_call(whole(rd[old_io])), per_call(whole(rd[new_io]))
        for i, key in enumerate(names):
            ratios[key].append(new[i] / old[i])
    for key, xs in ratios.items():
        print(
            f"  {new_io}/{old_io} {key:<10} per call: median {statistics.median(xs):.3f} "
            f"(range {min(xs):.3f}–{max(xs):.3f}; rounds {' '.join(f'{x:.3f}' for x in xs)})"
        )
    print(
        f"  token outputs identical on both paths: {'yes' if identical else 'NO'} "
        f"({tokens} tokens a pass)"
    )
    if not identical:
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="a pair folder, a shipped pair's name, or target/+drafter/")
    ap.add_argument("--windows", type=int, default=6, help="test windows (the first N)")
    ap.add_argument("--limit", type=int, default=64, help="tokens per window and part")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per path")
    a = ap.parse_args()
    try:
        measure(pair_for(a.models), a)
    except UserError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
