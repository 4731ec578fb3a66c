"""Output quality per task of a model pair, read from its traces (no model runs).

Usage: python benchmarks/task_quality.py [--models audio-llm] [--split test] [--json out.json]

A trace holds every request's target greedy output (its ``reference`` tokens) and the
drafter's own-history output (source ``drafter``); decoded with the pair's tokenizer they are
scored against the corpus's references (docs/corpus.md, "Tasks"):

- ``transcribe``: word error rate (pooled edits / reference words);
- ``translate``: chrF (character 6-grams, beta 2, the sacreBLEU default) and BLEU-4 (corpus
  level, brevity penalty, no smoothing) against the English reference;
- ``answer``: exact match and token F1 (SQuAD's: normalised words, bag overlap).

Per task also the drafter's agreement with the target: the share of the target's tokens
inside difflib matching blocks with the drafter's (coverage). Without ``--models`` the
bundled encoder–decoder pair is scored on its ASR traces.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.corpus.text import wer  # noqa: E402

TASKS = ("transcribe", "translate", "answer")
BUNDLED_TRACES = ROOT / "as2d_cli" / "assets" / "traces"


def _ngrams(seq: str | list[str], n: int) -> Counter:
    return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def chrf(refs: list[str], hyps: list[str], order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF in percent: character n-gram precision and recall (spaces removed, as
    sacreBLEU does) averaged over n = 1..order from corpus totals, then F-beta."""
    prec, rec = [], []
    for n in range(1, order + 1):
        match = hyp_total = ref_total = 0
        for r, h in zip(refs, hyps, strict=True):
            rg, hg = _ngrams(r.replace(" ", ""), n), _ngrams(h.replace(" ", ""), n)
            match += sum((rg & hg).values())
            hyp_total += sum(hg.values())
            ref_total += sum(rg.values())
        prec.append(match / hyp_total if hyp_total else 0.0)
        rec.append(match / ref_total if ref_total else 0.0)
    mp, mr = sum(prec) / order, sum(rec) / order
    if mp + mr == 0:
        return 0.0
    return 100 * (1 + beta**2) * mp * mr / (beta**2 * mp + mr)


def bleu(refs: list[str], hyps: list[str], order: int = 4) -> float:
    """Corpus BLEU-4 in percent (word n-grams, brevity penalty, no smoothing)."""
    logs = []
    hyp_len = sum(len(h.split()) for h in hyps)
    ref_len = sum(len(r.split()) for r in refs)
    for n in range(1, order + 1):
        match = total = 0
        for r, h in zip(refs, hyps, strict=True):
            rg, hg = _ngrams(r.split(), n), _ngrams(h.split(), n)
            match += sum((rg & hg).values())
            total += sum(hg.values())
        if match == 0 or total == 0:
            return 0.0
        logs.append(math.log(match / total))
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / max(hyp_len, 1))
    return 100 * bp * math.exp(sum(logs) / order)


def _answer_words(text: str) -> list[str]:
    """SQuAD-style answer normalisation: lower case, letters, digits and apostrophes."""
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


def answer_scores(refs: list[str], hyps: list[str]) -> tuple[float, float]:
    """(exact match share, mean token F1) in percent."""
    em = f1 = 0.0
    for r, h in zip(refs, hyps, strict=True):
        rw, hw = _answer_words(r), _answer_words(h)
        em += float(rw == hw)
        common = sum((Counter(rw) & Counter(hw)).values())
        if common:
            p, q = common / len(hw), common / len(rw)
            f1 += 2 * p * q / (p + q)
    n = max(len(refs), 1)
    return 100 * em / n, 100 * f1 / n


def coverage(target: list[int], drafter: list[int]) -> tuple[int, int]:
    """(target tokens inside a matching block with the drafter's, target tokens)."""
    blocks = difflib.SequenceMatcher(a=target, b=drafter, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks), len(target)


def score_task(task: str, traces: Path, pair: Any, corpus: Any) -> dict[str, Any]:
    from as2d_cli.formats.trace_io import load_traces

    ts = load_traces(traces)
    refs, hyps, drafts = [], [], []
    covered = total = 0
    for w in ts.windows:
        body = [t for t in w.reference if t != w.eos_id]
        refs.append(corpus.get(w.id).reference)
        hyps.append(pair.vocab.decode(body))
        src = w.sources.get("drafter")
        if src is not None:
            mine = [t for t in src.tokens if t != w.eos_id]
            drafts.append(pair.vocab.decode(mine))
            c, n = coverage(body, mine)
            covered += c
            total += n
    out: dict[str, Any] = {"requests": len(refs), "drafter_coverage": covered / max(total, 1)}
    if task == "transcribe":
        out["wer"] = wer(refs, hyps)
        if drafts:
            out["drafter_wer"] = wer(refs, drafts)
    elif task == "translate":
        out["chrf"] = chrf(refs, hyps)
        out["bleu"] = bleu(refs, hyps)
        if drafts:
            out["drafter_chrf"] = chrf(refs, drafts)
    else:
        out["exact_match"], out["f1"] = answer_scores(refs, hyps)
        if drafts:
            out["drafter_exact_match"], out["drafter_f1"] = answer_scores(refs, drafts)
    out["examples"] = [{"reference": r, "target": h} for r, h in list(zip(refs, hyps))[:3]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=None, help="a pair folder or a shipped pair's name")
    ap.add_argument("--split", default="test")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from as2d_cli.evaluate.inputs import pair_traces
    from as2d_cli.models.model_pair import load_pair
    from as2d_cli.models.prompting import PromptSpec
    from as2d_cli.models.shipped import resolve_models

    corpus = load_corpus()
    result: dict[str, Any] = {}
    if args.models is None:
        pair = load_pair(None, check_hashes=False)
        result["transcribe"] = score_task(
            "transcribe", BUNDLED_TRACES / f"{args.split}.jsonl.gz", pair, corpus
        )
    else:
        folder = resolve_models(args.models)
        for task in TASKS:
            pair = load_pair(folder, check_hashes=False, prompt=PromptSpec(task=task))
            path = pair_traces(pair) / f"{args.split}.jsonl.gz"
            if path.is_file():
                result[task] = score_task(task, path, pair, corpus)
    for task, r in result.items():
        figures = {
            k: round(v, 4) if isinstance(v, float) else v for k, v in r.items() if k != "examples"
        }
        print(task, json.dumps(figures))
        for ex in r["examples"]:
            print(f"    ref: {ex['reference'][:90]}\n    hyp: {ex['target'][:90]}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
