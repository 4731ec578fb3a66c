"""What candidate alignment recovers from each source: As²d's accepted share and speedup
over target-only with C.3 read strictly (``lookback=0``) and with the toolkit's bounded
look-back (docs/engine.md, rule 4), against the ceiling a perfect aligner would reach.

    python benchmarks/alignment_ceiling.py [--traces FILE] [--profile FILE] [--budget 7]

Three figures per source, all from the same trace file in this one run:

* ceiling: every matching block between the source's sequence and the target's greedy
  path (difflib, no junk heuristic) accepted, less its first token, which the anchor call
  after a mismatch produces; speedup = tokens / (tokens − accepted), i.e. one target step
  per round. Only windows the source serves.
* instant source: free widths, and the source's whole sequence published at time zero
  (no startup, step or publication cost) — what the aligner recovers when the source is
  never behind the target; the gap to the ceiling is the aligner's, the gap to free widths
  the source's speed.
* free widths: the replay with every verification width priced like one target step and
  no concurrency slowdown, loop or alignment cost — what the sources and the alignment
  allow when wide calls are free. Source timing (publication) stays the profile's.
* profile: the replay with the profile as it is (default: the K70 profile).

Replays cover every window (an ineligible source falls back as the catalog does, D.4.3).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from pathlib import Path

from as2d_cli.engine.methods import DEFAULT_ALIGN_LOOKBACK
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.trace_io import load_traces
from as2d_cli.replay.driver import Prepared, replay_window
from as2d_cli.engine.methods import MethodSpec
from as2d_cli.replay.run import pooled

ROOT = Path(__file__).resolve().parents[1]


def ceiling(windows, source: str) -> tuple[int, float, float]:
    """(windows served, accepted share, speedup) for a perfect aligner."""
    n = acc = served = 0
    for w in windows:
        s = w.sources.get(source)
        if s is None or not s.eligible:
            continue
        served += 1
        ref = list(w.reference)
        sm = difflib.SequenceMatcher(
            None, ref, list(s.tokens), autojunk=False
        )  # chunks joined by the loader
        acc += sum(b.size - 1 for b in sm.get_matching_blocks() if b.size)
        n += len(ref) - 1  # the first token comes from prefill
    return served, acc / n if n else 0.0, n / (n - acc) if n > acc else float("inf")


def free_widths(p: CostProfile) -> CostProfile:
    """``p`` with every width priced like one target step, no concurrency slowdown (the
    verifier's or a source's own) and no loop, alignment, context or in-loop extras."""
    step = p.verify_ms(1)
    sources = {
        name: dataclasses.replace(s, verify_concurrent_ratio={k: 1.0 for k in p.widths})
        if s.verify_concurrent_ratio
        else s
        for name, s in p.sources.items()
    }
    return dataclasses.replace(
        p,
        verify_idle_ms={k: step for k in p.widths},
        verify_concurrent_ratio={k: 1.0 for k in p.widths},
        sources=sources,
        loop_ms=0.0,
        align_ms=0.0,
        context=None,
        in_loop=None,
    )


def instant_sources(p: CostProfile) -> CostProfile:
    """``p`` with every source publishing its whole sequence at time zero (its start, steps,
    chunks and publications cost nothing)."""
    tiny = 1e-6  # the profile requires a positive step/chunk cost
    sources = {
        name: dataclasses.replace(
            s,
            startup_ms=0.0,
            startup_ms_per_audio_s=0.0,
            publish_ms=0.0,
            **({"step_ms_idle": tiny} if s.kind == "autoregressive" else {"chunk_ms_idle": tiny}),
        )
        for name, s in p.sources.items()
    }
    return dataclasses.replace(p, sources=sources)


def replay(windows, prof: CostProfile, spec: MethodSpec) -> tuple[float, float]:
    """(pooled TPS, accepted share of the decoded tokens)."""
    prep = Prepared(prof, spec)
    rows = [replay_window(w, prep, detail=False) for w in windows]
    return pooled(rows), sum(r.accepted for r in rows) / sum(r.tokens - 1 for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces", default=str(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    )
    ap.add_argument(
        "--profile", default=str(ROOT / "as2d_cli" / "assets" / "profiles" / "k70.profile.yaml")
    )
    ap.add_argument("--budget", type=int, default=7)
    args = ap.parse_args()

    ts = load_traces(args.traces)
    windows = list(ts.windows)
    prof = load_profile(args.profile)
    free = free_widths(prof)
    instant = instant_sources(free)
    sources = sorted({s for w in windows for s in w.sources})
    print(
        f"{args.traces}: {len(windows)} windows, {sum(w.n_tokens for w in windows)} tokens; "
        f"profile {args.profile}; budget {args.budget}"
    )
    base = {
        name: replay(windows, p, MethodSpec("target-only"))[0]
        for name, p in (("free", free), ("profile", prof))
    }
    print(
        f"{'source':<9} {'ceiling acc':>11} {'×':>6}  {'instant acc':>11} {'×':>6}  "
        + "  ".join(f"{'lookback ' + str(lb):>26}" for lb in (0, DEFAULT_ALIGN_LOOKBACK))
    )
    print(
        f"{'':<9} {'':>11} {'':>6}  {'':>11} {'':>6}  "
        + "  ".join(f"{'acc   free ×  profile ×':>26}" for _ in range(2))
    )
    for src in sources:
        served, c_acc, c_x = ceiling(windows, src)
        cells = []
        i_tps, i_acc = replay(windows, instant, MethodSpec("as2d", budget=args.budget, source=src))
        for lb in (0, DEFAULT_ALIGN_LOOKBACK):
            spec = MethodSpec("as2d", budget=args.budget, source=src, lookback=lb)
            f_tps, acc = replay(windows, free, spec)
            p_tps, _ = replay(windows, prof, spec)
            cells.append(f"{acc:5.3f}  {f_tps / base['free']:7.3f}  {p_tps / base['profile']:9.3f}")
        print(
            f"{src:<9} {c_acc:>11.3f} {c_x:>6.3f}  {i_acc:>11.3f} {i_tps / base['free']:>6.3f}  "
            + "  ".join(f"{c:>26}" for c in cells)
            + f"   (ceiling over {served} windows)"
        )


if __name__ == "__main__":
    main()
