"""History candidates in a sustained stream: As²d with and without them against target-only.

    python benchmarks/stream_history.py [--minutes 3] [--repeats 2] [--source drafter]

Streams the corpus recording (English read speech joined, as `as2d stream` does) in 4 s
blocks with 12 s context through the bundled models in this process, with the arrival
waits skipped (each block's decode is timed on the wall clock): target-only, As²d with the
drafter, As²d with the drafter and history candidates (engine/history.py), and the history
alone, rotating their order per repeat. Prints per method the pooled decode throughput
(committed tokens over decode seconds, all blocks), its ratio to target-only, the capped
blocks, the accepted share of the decoded tokens and the part of it history candidates
gave, and whether every block committed target-only's tokens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from native.request import load_models  # noqa: E402
from native.stream.clock import SkipClock  # noqa: E402
from native.stream.loop import run_stream  # noqa: E402
from native.stream.recording import stream_audio  # noqa: E402
from as2d_cli.engine.methods import spec_of  # noqa: E402
from native.stream.settings import StreamSettings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--source", default="drafter")
    ap.add_argument("--budget", type=int, default=7)
    a = ap.parse_args()
    from as2d_cli.corpus.manifest import load_corpus

    ids = [w.id for w in load_corpus().split("test") if w.language == "en" and w.setting == "read"]
    audio, lang = stream_audio({"windows": ids, "seconds": a.minutes * 60}, None)
    models = load_models()
    settings = {
        "target-only": StreamSettings(spec_of("target-only")),
        "as2d": StreamSettings(spec_of("as2d", source=a.source, budget=a.budget)),
        "as2d+history": StreamSettings(
            spec_of("as2d", source=a.source, budget=a.budget, history=True)
        ),
        "history alone": StreamSettings(spec_of("as2d", source="history", budget=a.budget)),
    }
    names = list(settings)
    tot = {
        m: {"tokens": 0, "decode_s": 0.0, "capped": 0, "accepted": 0, "hist": 0, "decoded": 0}
        for m in names
    }
    outputs: dict[str, list[list[int]]] = {}
    try:
        for rep in range(a.repeats):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for m in order:
                run = run_stream(models, audio, settings[m], language=lang, make_clock=SkipClock)
                t = tot[m]
                for b in run.blocks:
                    t["tokens"] += len(b["tokens"])
                    t["decode_s"] += b["decode_s"]
                    t["capped"] += int(b["capped"])
                    t["accepted"] += b["summary"]["accepted"]
                    t["hist"] += b["summary"].get("history_accepted", 0)
                    t["decoded"] += len(b["tokens"]) - 1
                outputs.setdefault(m, [b["tokens"] for b in run.blocks])
                print(f"[{rep + 1}/{a.repeats}] {m}: {len(run.blocks)} blocks", file=sys.stderr)
    finally:
        models.close()
    base = tot["target-only"]["tokens"] / tot["target-only"]["decode_s"]
    blocks = len(outputs["target-only"])
    print(
        f"\n{a.minutes:g} min stream, {blocks} blocks of 4 s, {a.repeats} repeats, source {a.source}, budget {a.budget}"
    )
    for m in names:
        t = tot[m]
        tps = t["tokens"] / t["decode_s"]
        exact = outputs[m] == outputs["target-only"]
        print(
            f"  {m:<13} decode {tps:8.1f} tok/s  ×TO {tps / base:5.3f}  capped {t['capped'] // a.repeats}/{blocks}  "
            f"accepted {t['accepted'] / max(t['decoded'], 1):.3f} (history {t['hist'] / max(t['decoded'], 1):.3f})  "
            f"exact {'yes' if exact else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
