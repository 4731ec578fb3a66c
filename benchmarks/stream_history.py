"""History candidates in a sustained stream: As²d with and without them against target-only.

    python benchmarks/stream_history.py [--minutes 3] [--rounds 2] [--source drafter] [--methods target-only,as2d,as2d+history,history,as2d@lookahead+history]

Streams the corpus recording (English read speech joined, as `as2d stream` does) in 4 s
blocks with 12 s context through the bundled models in this process, with the arrival
waits skipped (each block's decode is timed on the wall clock): target-only, As²d with the
drafter, As²d with the drafter and history candidates (engine/history.py), and the history
alone by default (``--methods``), rotating their order each round. Prints per method the
pooled decode throughput (committed tokens over decode seconds, all blocks), its ratio to
target-only in each round (against that round's target-only: the rounds alternate with the
host's state) as a median and range, the capped blocks, the accepted share of the decoded
tokens and the part of it history candidates gave, and whether every block of every round
committed target-only's tokens. Last, the ceiling of any source that looks the output up in
its own history: the share of target-only's tokens that the next token after an earlier
occurrence of their two preceding tokens (in the block's text context and output so far)
predicts, the most recent occurrence and any.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from as2d_cli.engine.methods import spec_of  # noqa: E402
from native.request import load_models  # noqa: E402
from native.stream_clock import SkipClock  # noqa: E402
from native.stream_loop import run_stream, text_context  # noqa: E402
from native.stream_pacer import Block, plan_blocks  # noqa: E402
from native.stream_recording import stream_audio  # noqa: E402
from native.stream_settings import StreamSettings  # noqa: E402


def _settings(name: str, source: str, budget: int) -> StreamSettings:
    """``target-only``, ``history`` (the history alone), or ``as2d[@SOURCE][+history]``."""
    if name == "target-only":
        return StreamSettings(spec_of("target-only"))
    if name == "history":
        return StreamSettings(spec_of("as2d", source="history", budget=budget))
    head, _, hist = name.partition("+")
    method, _, src = head.partition("@")
    if method != "as2d" or hist not in ("", "history"):
        raise SystemExit(
            f"error: unknown method {name!r}; e.g. as2d, as2d@lookahead+history, history"
        )
    return StreamSettings(spec_of("as2d", source=src or source, budget=budget, history=bool(hist)))


def history_ceiling(
    blocks: list[Block], outputs: list[list[int]], eos: int, cap: int
) -> tuple[float, float]:
    """Of the tokens committed in a target-only stream (``outputs``, one per block), the
    share the follower of the most recent earlier occurrence of their two preceding tokens
    predicts, and the share some earlier occurrence's follower does; earlier means in the
    block's text context (the stream's own rule) or its output so far."""
    recent = anywhere = total = 0
    for i, out in enumerate(outputs):
        seq = text_context(blocks, outputs, i, eos, cap)
        followers: dict[tuple[int, int], list[int]] = {}
        for k in range(len(seq) - 2):
            followers.setdefault((seq[k], seq[k + 1]), []).append(seq[k + 2])
        for t in out:
            if len(seq) >= 2:
                seen = followers.setdefault((seq[-2], seq[-1]), [])
                if seen:
                    recent += seen[-1] == t
                    anywhere += t in seen
                seen.append(t)
            total += 1
            seq.append(t)
    return recent / max(total, 1), anywhere / max(total, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--repeats", "--rounds", dest="repeats", type=int, default=2)
    ap.add_argument("--source", default="drafter")
    ap.add_argument("--budget", type=int, default=7)
    ap.add_argument(
        "--methods",
        default="target-only,as2d,as2d+history,history",
        help="comma list: target-only, history, as2d[@SOURCE][+history]",
    )
    a = ap.parse_args()
    from as2d_cli.corpus.manifest import load_corpus

    names = a.methods.split(",")
    if "target-only" not in names:
        print("error: --methods must include target-only (the ratios need it)", file=sys.stderr)
        return 2
    settings = {m: _settings(m, a.source, a.budget) for m in names}
    ids = [w.id for w in load_corpus().split("test") if w.language == "en" and w.setting == "read"]
    audio, lang = stream_audio({"windows": ids, "seconds": a.minutes * 60}, None)
    models = load_models()
    eos, cap = models.target.eos_id, models.target.model.max_positions // 2
    tot = {
        m: {"tokens": 0, "decode_s": 0.0, "capped": 0, "accepted": 0, "hist": 0, "decoded": 0}
        for m in names
    }
    per_round: dict[str, list[float]] = {m: [] for m in names}  # decode throughput per round
    outputs: dict[str, list[list[int]]] = {}
    exact = dict.fromkeys(names, True)
    try:
        for rep in range(a.repeats):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for m in order:
                run = run_stream(models, audio, settings[m], language=lang, make_clock=SkipClock)
                t = tot[m]
                tokens = sum(len(b["tokens"]) for b in run.blocks)
                decode_s = sum(b["decode_s"] for b in run.blocks)
                per_round[m].append(tokens / decode_s)
                t["tokens"] += tokens
                t["decode_s"] += decode_s
                for b in run.blocks:
                    t["capped"] += int(b["capped"])
                    t["accepted"] += b["summary"]["accepted"]
                    t["hist"] += b["summary"].get("history_accepted", 0)
                    t["decoded"] += len(b["tokens"]) - 1
                got = [b["tokens"] for b in run.blocks]
                outputs.setdefault(m, got)
                exact[m] = exact[m] and got == outputs[m]
                print(f"[{rep + 1}/{a.repeats}] {m}: {len(run.blocks)} blocks", file=sys.stderr)
    finally:
        models.close()
    blocks = len(outputs["target-only"])
    print(
        f"\n{a.minutes:g} min stream, {blocks} blocks of 4 s, {a.repeats} rounds, source {a.source}, budget {a.budget}"
    )
    print(
        "decode throughput ×TO: per round (each against that round's target-only), median and range"
    )
    for m in names:
        t = tot[m]
        ratios = [x / y for x, y in zip(per_round[m], per_round["target-only"])]
        same = exact[m] and outputs[m] == outputs["target-only"]
        print(
            f"  {m:<24} {t['tokens'] / t['decode_s']:8.1f} tok/s  ×TO median {statistics.median(ratios):5.3f} "
            f"({min(ratios):.3f}–{max(ratios):.3f})  capped {t['capped'] // a.repeats}/{blocks}  "
            f"accepted {t['accepted'] / max(t['decoded'], 1):.3f} (history {t['hist'] / max(t['decoded'], 1):.3f})  "
            f"exact {'yes' if same else 'NO'}"
        )
    plan = plan_blocks(
        len(audio), settings["target-only"].block_s, settings["target-only"].context_s
    )
    recent, anywhere = history_ceiling(plan, outputs["target-only"], eos, cap)
    print(
        "history's ceiling: target-only's tokens that follow an earlier occurrence of their "
        f"two preceding tokens: the most recent {recent:.3f}, any {anywhere:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
