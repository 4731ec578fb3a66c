"""Quality and cost of the bundled models on this CPU (ONNX Runtime, 1 intra-op thread each).

Usage: python benchmarks/model_quality.py [--split test] [--limit N] [--json out.json] [--sd-windows N] [--costs-only]

Reports, per setting:
- WER of the target (greedy; also its character error rate), the drafter run on its own history (the As²d source) and the
  CTC source by 2.56 s chunks (English windows only: the other languages are ineligible);
- each source's agreement with the target's tokens: acceptance = matched source tokens /
  source tokens, coverage = matched target tokens / target tokens (difflib alignment);
- prefix-conditioned drafter (SD): mean tokens accepted per 8-token draft along the target
  path (on --sd-windows windows per setting);
- batched (K=8 chunks along the reference) vs sequential (K=1) target decisions: every
  disagreement with its first divergent position and top-2 logit margin (paper F.6);
- the target's reference words recognised by quarter of the window (word position);
- where the drafter departs from the target: the share of the target's words there that are
  wrong against the reference (``tgt_wrong_departed``), against the same share where the
  drafter keeps the target's word (``tgt_wrong_kept``);
and per-call costs (median ms, one thread): encoders on 10 s of audio, target decoder
K=1/2/4/8/16, drafter K=1, CTC per chunk. All figures come from this one run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.corpus.manifest import SETTINGS, load_corpus  # noqa: E402
from as2d_cli.corpus.text import char_errors, normalize_text, word_errors  # noqa: E402
from as2d_cli.models.drafter import OrtDrafter  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from as2d_cli.models.session import Seq2SeqModel  # noqa: E402
from as2d_cli.models.sources import CtcRecognizer, CtcSource, DrafterSource  # noqa: E402
from as2d_cli.models.target import OrtTarget, greedy_decode  # noqa: E402


def matched_positions(a: Sequence[Hashable], b: Sequence[Hashable]) -> set[int]:
    """Positions of ``a`` inside a difflib matching block against ``b``."""
    ok: set[int] = set()
    for i, _, n in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        ok.update(range(i, i + n))
    return ok


def matched(a: list[int], b: list[int]) -> int:
    return len(matched_positions(a, b))


def words_right_by_quarter(ref_text: str, hyp_text: str) -> list[tuple[int, int]]:
    """Per quarter of the reference (by word position): (words the hypothesis has in an
    aligned matching block, words). A decoder that loses its place late in long windows
    shows as a falling profile."""
    ref = ref_text.split()
    ok = matched_positions(ref, hyp_text.split())
    out = [[0, 0] for _ in range(4)]
    for i in range(len(ref)):
        q = 4 * i // len(ref)
        out[q][0] += i in ok
        out[q][1] += 1
    return [(a, b) for a, b in out]


def target_wrong_by_departure(
    ref_text: str, target_text: str, drafter_text: str
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The target's words split by whether the drafter's sequence has them (difflib on
    normalised words): (wrong against the reference, words) where the drafter departs, and
    the same where it keeps the target's word. Departures that fall on the target's own
    errors are source-quality loss no better transcription can remove."""
    ref, tgt = normalize_text(ref_text).split(), normalize_text(target_text).split()
    right = matched_positions(tgt, ref)
    kept = matched_positions(tgt, normalize_text(drafter_text).split())
    dep = [i for i in range(len(tgt)) if i not in kept]
    return (
        (sum(i not in right for i in dep), len(dep)),
        (sum(i not in right for i in kept), len(kept)),
    )


def drain(src) -> list[int]:
    src.start()
    out: list[int] = []
    while (step := src.step()) is not None:
        out += [t for t, _ in step]
    return out


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def costs(pair, reps: int = 40) -> dict:
    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(16000 * 10) * 0.05).astype(np.float32)
    out: dict[str, float] = {}
    for name in ("target", "drafter"):
        m = Seq2SeqModel(pair, name, 1)
        out[f"{name}_encoder_10s_ms"] = median_ms(partial(m.encode, audio), 7)
        cross = m.encode(audio)
        _, past = m.decode(list(range(4, 44)), m.empty_cache(), cross)  # 40 tokens of context
        for k in (1, 2, 4, 8, 16) if name == "target" else (1, 8):
            toks = list(range(5, 5 + k))
            out[f"{name}_K{k}_ms"] = median_ms(partial(m.decode, toks, past, cross), reps)
    rec = CtcRecognizer(pair, 1)
    out["ctc_chunk_2.56s_ms"] = median_ms(lambda: rec.transcribe(audio[:40960]), 15)
    out["drafter_over_target_K1"] = out["drafter_K1_ms"] / out["target_K1_ms"]
    out["target_K8_over_K1"] = out["target_K8_ms"] / out["target_K1_ms"]
    out["target_K16_over_K1"] = out["target_K16_ms"] / out["target_K1_ms"]
    return out


def batched_check(
    target: OrtTarget, audio: np.ndarray, ref: list[int], width: int = 8
) -> dict | None:
    """Verify the reference in chunks of ``width``; the first decision differing from K=1."""
    target.start(audio)
    pos = 0
    while pos < len(ref) - 1:
        chunk = ref[pos : pos + width]
        dec = target.verify(chunk)
        for i in range(min(len(chunk), len(ref) - pos - 1)):
            if dec[i] != ref[pos + 1 + i]:
                return {
                    "position": pos + 1 + i,
                    "sequential": ref[pos + 1 + i],
                    "batched": dec[i],
                    "top2_margin": float(target.last_margins[i])
                    if target.last_margins is not None
                    else float("nan"),
                }
        pos += len(chunk)
    return None


def sd_accept(
    drafter: OrtDrafter, audio: np.ndarray, ref: list[int], k: int = 8
) -> tuple[int, int]:
    """Tokens accepted over drafts of k at every target-path position (standard SD view)."""
    drafter.start(audio)
    accepted = drafts = 0
    for n in range(len(ref) - 1):
        d = drafter.draft(ref[: n + 1], k).tokens
        a = 0
        while a < len(d) and n + 1 + a < len(ref) and d[a] == ref[n + 1 + a]:
            a += 1
        accepted += a
        drafts += 1
    return accepted, drafts


@dataclass
class _Models:
    """The bundled pair's models as this benchmark runs them."""

    vocab: Any
    target: Any
    drafter: Any
    drafter_source: Any
    ctc: Any


Tally = dict[str, list[int]]


def _tally(s: Tally, key: str, done: int, of: int) -> None:
    s[key][0] += done
    s[key][1] += of


def _score_window(w: Any, ms: _Models, s: Tally, sd: bool) -> tuple[list[int], Any]:
    """Add one window's counts to its setting's tally ``s``; returns the target's output
    and the window's audio."""
    vocab = ms.vocab
    audio = w.load_audio()
    ref = greedy_decode(ms.target, audio)
    body = [t for t in ref if t != vocab.eot]
    text = vocab.decode(ref)
    _tally(s, "target_wer", *word_errors(w.text, text))
    _tally(s, "target_cer", *char_errors(w.text, text))
    for q, (right, words) in enumerate(words_right_by_quarter(w.text, text)):
        _tally(s, f"target_words_right_q{q + 1}", right, words)
    dtoks = drain(DrafterSource(ms.drafter_source, audio))
    dtext = vocab.decode(dtoks)
    _tally(s, "drafter_wer", *word_errors(w.text, dtext))
    departed, kept = target_wrong_by_departure(w.text, text, dtext)
    for key, (wrong, n) in (("tgt_wrong_departed", departed), ("tgt_wrong_kept", kept)):
        _tally(s, key, wrong, n)
    dbody = [t for t in dtoks if t != vocab.eot]
    m = matched(dbody, body)
    _tally(s, "drafter_accept", m, len(dbody))
    _tally(s, "drafter_cover", m, len(body))
    if ms.ctc.eligible(w.language):
        src = CtcSource(ms.ctc, audio)
        ctoks = [t for t in drain(src) if t != vocab.eot]
        _tally(s, "ctc_wer", *word_errors(w.text, " ".join(src.texts)))
        m = matched(ctoks, body)
        _tally(s, "ctc_accept", m, len(ctoks))
        _tally(s, "ctc_cover", m, len(body))
    if sd:
        _tally(s, "sd_accepted_per_draft8", *sd_accept(ms.drafter, audio, ref))
    return ref, audio


def _quality_table(per: dict[str, Tally]) -> dict[str, dict[str, float | None]]:
    """Each setting's rates, then all settings pooled."""
    table = {}
    for setting in [x for x in SETTINGS if x in per]:
        table[setting] = {k: (v[0] / v[1] if v[1] else None) for k, v in per[setting].items()}
    pooled: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0])
    for s in per.values():
        for k, v in s.items():
            pooled[k][0] += v[0]
            pooled[k][1] += v[1]
    table["all"] = {k: (v[0] / v[1] if v[1] else None) for k, v in pooled.items()}
    return table


COLUMNS = [
    "target_wer",
    "target_cer",
    "drafter_wer",
    "ctc_wer",
    "drafter_accept",
    "drafter_cover",
    "ctc_accept",
    "ctc_cover",
    "sd_accepted_per_draft8",
    "tgt_wrong_departed",
    "tgt_wrong_kept",
]


def _print_result(result: dict[str, Any]) -> None:
    table, disagreements = result["quality"], result["batched_vs_sequential_K8_disagreements"]
    print(
        f"{result['split']}: {result['windows']} windows, {result['target_tokens_excl_eos']} "
        "target tokens (excl. EOS)"
    )
    print(f"{'setting':<13}" + "".join(f"{c:>24}" for c in COLUMNS))
    for setting, row in table.items():
        cells = "".join(
            f"{'-' if row.get(c) is None else format(row[c], '.3f'):>24}" for c in COLUMNS
        )
        print(f"{setting:<13}{cells}")
    quarters = [table["all"].get(f"target_words_right_q{q}") for q in range(1, 5)]
    if all(x is not None for x in quarters):
        print(
            "target: reference words recognised by quarter of the window: "
            + " / ".join(f"{x:.3f}" for x in quarters)
        )
    print(f"batched K=8 vs sequential disagreements: {len(disagreements)}")
    for dis in disagreements:
        print(f"  {dis}")
    for k, v in result["costs_ms_one_thread"].items():
        print(f"{k:>28}: {v:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=None, help="windows per setting (default: all)")
    ap.add_argument(
        "--sd-windows", type=int, default=8, help="windows per setting for the SD acceptance"
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--costs-only", action="store_true", help="only the per-call costs (run on a quiet machine)"
    )
    args = ap.parse_args()

    pair = load_pair()
    if args.costs_only:
        for k, v in costs(pair).items():
            print(f"{k:>28}: {v:.3f}")
        return
    ms = _Models(
        pair.vocab,
        OrtTarget(pair),
        OrtDrafter(pair),
        Seq2SeqModel(pair, "drafter", 1),
        CtcRecognizer(pair, 1),
    )
    per: dict[str, Tally] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    disagreements = []
    n_tokens = 0
    seen: dict[str, int] = defaultdict(int)
    t_start = time.time()
    for w in load_corpus().split(args.split):
        if args.limit is not None and seen[w.setting] >= args.limit:
            continue
        seen[w.setting] += 1
        ref, audio = _score_window(w, ms, per[w.setting], seen[w.setting] <= args.sd_windows)
        n_tokens += len(ref) - (ref[-1] == ms.vocab.eot)
        dis = batched_check(ms.target, audio, ref)
        if dis is not None:
            disagreements.append({"window": w.id, **dis})
        print(f"{w.id}: {len(ref)} tokens", file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "split": args.split,
        "windows": sum(seen.values()),
        "target_tokens_excl_eos": n_tokens,
        "quality": _quality_table(per),
        "batched_vs_sequential_K8_disagreements": disagreements,
        "costs_ms_one_thread": costs(pair),
        "wall_seconds": round(time.time() - t_start, 1),
    }
    _print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
