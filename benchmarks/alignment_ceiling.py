"""What candidate alignment recovers from each source: As²d's accepted share and speedup
over target-only with C.3 read strictly (``lookback=0``) and with the toolkit's bounded
look-back (docs/engine.md, rule 4), against the ceiling a perfect aligner would reach.

    python benchmarks/alignment_ceiling.py [--traces FILE] [--profile FILE] [--budget 7]
        [--threshold 0.4] [--batch 8] [--align suffix|paper] [--what-if]

``--threshold`` and ``--batch`` set As²d's confidence stop and publication batch in every
replay (default: the methods' defaults, the paper's 0.4 and 8; pass a deployment's).

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

Then, per source, where the accepted share goes, pooled and per window (median, 90th
percentile): *source quality* (1 − ceiling: target tokens the source never produces in
order), *aligner* (ceiling − instant: tokens the source has that the alignment does not
match), *source pace* (instant − free widths: candidates not ready when the target needs
them), and what the replay's rounds show — target calls at K1 with nothing ready (pace),
at K1 with candidates ready but none usable after the cursor (aligner), candidates offered
and rejected (quality) — and *width cost* (free widths × − profile ×).

Last, per source and setting (the traces' datasets, then all): ceiling (over the windows
the source serves), instant-source and actual accepted share, As²d / target-only on the
profile, and how the source's sequence departs from the target's (the same difflib
matching as the ceiling, per target token): target tokens it replaces with others, target
tokens it lacks, and tokens it adds — whether a setting's gap is wrong words or dropped
or invented ones.

``--what-if`` adds, for each autoregressive source, As²d on the profile with its step 0.9–0.5× as dear, and
with 25–75 % of the places where its sequence departs from the target's replaced by the
target's tokens: how much faster, or how much more often right, a drafter must be for a
given speedup.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from as2d_cli.engine.causes import CallCauses, call_causes
from as2d_cli.engine.methods import (
    ALIGN_MODES,
    DEFAULT_ALIGN,
    DEFAULT_ALIGN_LOOKBACK,
    DEFAULT_BATCH,
    DEFAULT_THRESHOLD,
    MethodSpec,
)
from as2d_cli.evaluate.native_replay import published_steps
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.trace_io import load_traces
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for
from as2d_cli.replay.run import pooled

ROOT = Path(__file__).resolve().parents[1]


def served_matches(windows, source: str) -> Iterator[tuple[Any, difflib.SequenceMatcher]]:
    """(window, target's sequence matched against the source's) for each window the source
    serves: difflib without its junk heuristic, the source's chunks joined by the loader."""
    for w in windows:
        s = w.sources.get(source)
        if s is not None and s.eligible:
            yield (
                w,
                difflib.SequenceMatcher(None, list(w.reference), list(s.tokens), autojunk=False),
            )


def aligned(sm: difflib.SequenceMatcher) -> int:
    """Target tokens a perfect aligner accepts from the source: every matching block less its
    first token, which the anchor call after a mismatch produces (the ceiling above)."""
    return sum(b.size - 1 for b in sm.get_matching_blocks() if b.size)


def ceiling(windows, source: str) -> tuple[int, float, float]:
    """(windows served, accepted share, speedup) for a perfect aligner."""
    n = acc = served = 0
    for w, sm in served_matches(windows, source):
        served += 1
        acc += aligned(sm)
        n += len(w.reference) - 1  # the first token comes from prefill
    return served, acc / n if n else 0.0, n / (n - acc) if n > acc else float("inf")


def departures(windows, source: str) -> tuple[float, float, float]:
    """Per target token over the windows the source serves: target tokens the source's
    sequence replaces, target tokens it lacks, and source tokens it adds (difflib opcodes,
    as in ``ceiling``)."""
    n = replaced = missing = extra = 0
    for w, sm in served_matches(windows, source):
        for op, i1, i2, j1, j2 in sm.get_opcodes():
            if op == "replace":
                replaced += i2 - i1
            elif op == "delete":
                missing += i2 - i1
            elif op == "insert":
                extra += j2 - j1
        n += len(w.reference)
    return (replaced / n, missing / n, extra / n) if n else (0.0, 0.0, 0.0)


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
            step_ms_idle=tiny if s.kind == "autoregressive" else s.step_ms_idle,
            chunk_ms_idle=s.chunk_ms_idle if s.kind == "autoregressive" else tiny,
        )
        for name, s in p.sources.items()
    }
    return dataclasses.replace(p, sources=sources)


def replay(windows, prof: CostProfile, spec: MethodSpec) -> tuple[float, float]:
    """(pooled TPS, accepted share of the decoded tokens)."""
    prep = Prepared(prof, spec)
    rows = [replay_window(w, prep, detail=False) for w in windows]
    return pooled(rows) or 0.0, sum(r.accepted for r in rows) / sum(r.tokens - 1 for r in rows)


def per_window_shares(windows, prof: CostProfile, spec: MethodSpec) -> dict[str, float]:
    """Each window's accepted share of its decoded tokens."""
    prep = Prepared(prof, spec)
    out = {}
    for w in windows:
        r = replay_window(w, prep, detail=False)
        if r.tokens > 1:
            out[w.id] = r.accepted / (r.tokens - 1)
    return out


def window_ceilings(windows, source: str) -> dict[str, float]:
    out = {}
    for w, sm in served_matches(windows, source):
        if len(w.reference) < 2:
            continue
        out[w.id] = aligned(sm) / (len(w.reference) - 1)
    return out


def round_causes(windows, prof: CostProfile, spec: MethodSpec) -> dict[str, float]:
    """What the target's calls saw, pooled over the windows (as2d_cli/engine/causes.py)."""
    prep = Prepared(prof, spec)
    tot = CallCauses()
    assert spec.source is not None  # an As²d spec
    for w in windows:
        timeline = timeline_for(w, prep, spec.source)
        pubs, n = [], 0
        for p in timeline[1].publications:
            n += len(p.tokens)
            pubs.append((p.at, n))
        rounds = replay_window(w, prep, detail=False, keep_rounds=True, timeline=timeline)
        tot.add(
            call_causes(
                ((r.width, r.start, r.cursor, r.offered, r.accepted) for r in rounds.round_records),
                pubs,
            )
        )
    return {"calls": tot.calls, **tot.shares()}


def _spread(values: list[float]) -> str:
    if not values:
        return "—"
    v = sorted(values)
    p90 = v[min(len(v) - 1, round(0.9 * (len(v) - 1)))]
    return f"{statistics.median(v):.3f} / {p90:.3f}"


def losses(
    windows,
    prof: CostProfile,
    free: CostProfile,
    instant: CostProfile,
    source: str,
    budget: int,
    base: dict[str, float],
    align: str,
    setting: dict,
) -> list[tuple[str, str, str]]:
    """(cause, pooled, per-window median / p90) rows for ``source`` at ``budget``."""
    spec = MethodSpec("as2d", budget=budget, source=source, align=align, **setting)
    ceil = window_ceilings(windows, source)
    served = [w for w in windows if w.id in ceil]
    inst = per_window_shares(served, instant, spec)
    act = per_window_shares(served, free, spec)
    _, c_acc, _ = ceiling(windows, source)
    i_tps, i_acc = replay(served, instant, spec)
    f_tps, a_acc = replay(served, free, spec)
    p_tps, _ = replay(served, prof, spec)
    rc = round_causes(served, prof, spec)
    b_free = replay(served, free, MethodSpec("target-only"))[0]
    b_prof = replay(served, prof, MethodSpec("target-only"))[0]
    ids = [w.id for w in served if w.id in inst and w.id in act]
    return [
        ("source quality (1 − ceiling)", f"{1 - c_acc:.3f}", _spread([1 - ceil[i] for i in ids])),
        (
            "aligner (ceiling − instant)",
            f"{c_acc - i_acc:.3f}",
            _spread([ceil[i] - inst[i] for i in ids]),
        ),
        (
            "source pace (instant − actual)",
            f"{i_acc - a_acc:.3f}",
            _spread([inst[i] - act[i] for i in ids]),
        ),
        ("accepted (actual, free widths)", f"{a_acc:.3f}", _spread([act[i] for i in ids])),
        ("calls at K1, nothing ready", f"{rc['k1_nothing_ready']:.3f}", f"of {rc['calls']} calls"),
        ("calls at K1, ready but unaligned", f"{rc['k1_ready_unaligned']:.3f}", ""),
        ("offered candidates rejected", f"{rc['rejected']:.3f}", ""),
        (
            "width cost (free × − profile ×)",
            f"{f_tps / b_free - p_tps / b_prof:.3f}",
            f"free {f_tps / b_free:.3f}× → profile {p_tps / b_prof:.3f}×",
        ),
    ]


def setting_groups(windows) -> dict[str, list]:
    """The windows per setting (the traces' datasets, in order), then all of them."""
    groups: dict[str, list] = {}
    for w in windows:
        groups.setdefault(w.dataset, []).append(w)
    return {**groups, "all": list(windows)}


def by_setting(
    groups: dict[str, list],
    bases: dict[str, float],
    prof: CostProfile,
    free: CostProfile,
    instant: CostProfile,
    spec: MethodSpec,
) -> None:
    """Per setting and over all: the source's ceiling (over the windows it serves), the
    instant source's and the actual accepted share (free widths, every window), and As²d /
    target-only (``bases``: its TPS per group) on the profile, to say in which settings the
    remaining gap sits; then how the source's sequence departs from the target's there."""
    assert spec.source is not None  # an As²d spec
    print(f"  {spec.source}")
    print(
        f"    {'setting':<14} {'windows':>7} {'served':>7} {'ceiling':>8} {'instant':>8} "
        f"{'accepted':>9} {'profile ×':>10}  {'replaced':>8} {'missing':>8} {'extra':>6}"
    )
    for g, ws in groups.items():
        served, c_acc, _ = ceiling(ws, spec.source)
        _, i_acc = replay(ws, instant, spec)
        _, acc = replay(ws, free, spec)
        tps, _ = replay(ws, prof, spec)
        rep_, miss, extra = departures(ws, spec.source)
        print(
            f"    {g:<14} {len(ws):>7} {served:>7} {c_acc:>8.3f} {i_acc:>8.3f} {acc:>9.3f} "
            f"{tps / bases[g]:>10.3f}  {rep_:>8.3f} {miss:>8.3f} {extra:>6.3f}"
        )


def faster_source(p: CostProfile, source: str, factor: float) -> CostProfile:
    """``p`` with ``source``'s step (or chunk) cost times ``factor``."""
    s = p.sources[source]
    s = dataclasses.replace(
        s, step_ms_idle=s.step_ms_idle * factor, chunk_ms_idle=s.chunk_ms_idle * factor
    )
    return dataclasses.replace(p, sources={**p.sources, source: s})


def better_source(windows, source: str, share: float, seed: int = 1) -> list:
    """The windows with ``share`` of the places where the autoregressive ``source``'s
    sequence departs from the target's (difflib's non-equal opcodes, drawn with ``seed``)
    replaced by the target's tokens, at confidence 0.9: a source that agrees more often."""
    import random

    rng = random.Random(seed)
    out = []
    for w in windows:
        s = w.sources.get(source)
        if s is None or not s.eligible or s.chunks is not None:
            out.append(w)
            continue
        conf = list(s.confidences) if s.confidences is not None else None
        sm = difflib.SequenceMatcher(None, list(s.tokens), list(w.reference), autojunk=False)
        toks: list[int] = []
        confs: list[float] = []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal" or rng.random() >= share:
                toks += s.tokens[i1:i2]
                confs += conf[i1:i2] if conf is not None else []
            else:
                toks += w.reference[j1:j2]
                confs += [0.9] * (j2 - j1)
        better = dataclasses.replace(
            s,
            tokens=tuple(toks),
            confidences=tuple(confs) if conf is not None else None,
            # a self-speculating source keeps its pace: its steps cut or padded to the tokens
            steps=published_steps(list(s.steps), len(toks)) if s.steps is not None else None,
        )
        out.append(dataclasses.replace(w, sources={**w.sources, source: better}))
    return out


def what_if(windows, prof: CostProfile, spec: MethodSpec, base: float) -> None:
    """As²d on the profile with a faster source, and with one that agrees more often."""
    src = spec.source
    assert src is not None
    print(f"what if ({src}, budget {spec.budget}, on the profile as given):")
    print(f"  as it is: {replay(windows, prof, spec)[0] / base:.3f}×")
    for f in (0.9, 0.8, 0.7, 0.5):
        tps = replay(windows, faster_source(prof, src, f), spec)[0]
        print(f"  source step × {f}: {tps / base:.3f}×")
    for share in (0.25, 0.5, 0.75):
        ws = better_source(windows, src, share)
        _, c_acc, _ = ceiling(ws, src)
        tps = replay(ws, prof, spec)[0]
        print(
            f"  {share:.0%} of its departures from the target fixed: ceiling {c_acc:.3f}, {tps / base:.3f}×"
        )


def _source_tables(
    windows: list,
    sources: list[str],
    profiles: tuple[CostProfile, CostProfile, CostProfile],
    base: dict[str, float],
    args: argparse.Namespace,
    setting: dict,
) -> None:
    """Per source: the ceiling, the instant source, and each alignment rule's acceptance and
    ratio on free and profile costs; then where the accepted share goes."""
    free, instant, prof = profiles
    rules = (  # (column, look-back, alignment rules)
        ("paper, look-back 0", 0, "paper"),
        (f"paper, look-back {DEFAULT_ALIGN_LOOKBACK}", DEFAULT_ALIGN_LOOKBACK, "paper"),
        ("suffix anchoring", DEFAULT_ALIGN_LOOKBACK, "suffix"),
    )
    print(
        f"{'source':<9} {'ceiling acc':>11} {'×':>6}  {'instant acc':>11} {'×':>6}  "
        + "  ".join(f"{name:>26}" for name, _, _ in rules)
    )
    print(
        f"{'':<9} {'':>11} {'':>6}  {'':>11} {'':>6}  "
        + "  ".join(f"{'acc   free ×  profile ×':>26}" for _ in rules)
    )
    for src in sources:
        served, c_acc, c_x = ceiling(windows, src)
        cells = []
        i_tps, i_acc = replay(
            windows,
            instant,
            MethodSpec("as2d", budget=args.budget, source=src, align=args.align, **setting),
        )
        for _, lb, align in rules:
            spec = MethodSpec(
                "as2d", budget=args.budget, source=src, align_lookback=lb, align=align, **setting
            )
            f_tps, acc = replay(windows, free, spec)
            p_tps, _ = replay(windows, prof, spec)
            cells.append(f"{acc:5.3f}  {f_tps / base['free']:7.3f}  {p_tps / base['profile']:9.3f}")
        print(
            f"{src:<9} {c_acc:>11.3f} {c_x:>6.3f}  {i_acc:>11.3f} {i_tps / base['free']:>6.3f}  "
            + "  ".join(f"{c:>26}" for c in cells)
            + f"   (ceiling over {served} windows)"
        )
    print()
    print(
        f"where the accepted share goes (As²d, budget {args.budget}, {args.align} rules, "
        f"look-back {DEFAULT_ALIGN_LOOKBACK}, "
        "windows the source serves; shares of the decoded tokens):"
    )
    for src in sources:
        rows = losses(windows, prof, free, instant, src, args.budget, base, args.align, setting)
        print(f"  {src}")
        print(f"    {'cause':<34} {'pooled':>8}  {'per window: median / p90':<28}")
        for cause, pooled_v, spread in rows:
            print(f"    {cause:<34} {pooled_v:>8}  {spread}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces", default=str(ROOT / "as2d_cli" / "assets" / "traces" / "test.jsonl.gz")
    )
    ap.add_argument(
        "--profile", default=str(ROOT / "as2d_cli" / "assets" / "profiles" / "k70.profile.yaml")
    )
    ap.add_argument("--budget", type=int, default=7)
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    ap.add_argument(
        "--align",
        default=DEFAULT_ALIGN,
        choices=list(ALIGN_MODES),
        help="the rules of the instant-source column and the loss table",
    )
    ap.add_argument(
        "--what-if",
        action="store_true",
        help="also: As²d with each autoregressive source's step cheaper, and with a share of "
        "its departures from the target fixed",
    )
    args = ap.parse_args()
    setting = {"threshold": args.threshold, "batch": args.batch}

    ts = load_traces(args.traces)
    windows = list(ts.windows)
    prof = load_profile(args.profile)
    free = free_widths(prof)
    instant = instant_sources(free)
    sources = sorted({s for w in windows for s in w.sources})
    print(
        f"{args.traces}: {len(windows)} windows, {sum(w.n_tokens for w in windows)} tokens; "
        f"profile {args.profile}; budget {args.budget}, threshold {args.threshold}, batch {args.batch}"
    )
    base = {
        name: replay(windows, p, MethodSpec("target-only"))[0]
        for name, p in (("free", free), ("profile", prof))
    }
    _source_tables(windows, sources, (free, instant, prof), base, args, setting)
    print()
    print(f"per setting (As²d, budget {args.budget}, {args.align} rules):")
    groups = setting_groups(windows)
    bases = {g: replay(ws, prof, MethodSpec("target-only"))[0] for g, ws in groups.items()}
    for src in sources:
        spec = MethodSpec("as2d", budget=args.budget, source=src, align=args.align, **setting)
        by_setting(groups, bases, prof, free, instant, spec)
    for src in sources if args.what_if else []:
        if ts.sources[src].kind != "autoregressive":
            continue
        print()
        spec = MethodSpec("as2d", budget=args.budget, source=src, align=args.align, **setting)
        what_if(windows, prof, spec, base["profile"])


if __name__ == "__main__":
    main()
