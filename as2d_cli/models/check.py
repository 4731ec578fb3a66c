"""`as2d models check`: does a model pair keep the engine's promises on this host?

For the target and the drafter: greedy-decode a few corpus windows; check that one K-wide
decoder call from a known root gives the same argmax as K sequential calls, K = 1..16
(where they differ, the smallest top-2 logit margin among the differing positions,
Appendix F.6: width-dependent numerics are real, reported rather than hidden); check that
rolling the cache back and repeating a call gives the same logits; and time the K-wide call
per width (median of repetitions). The target's differences fail the check; the drafter's
are reported as information (they can cost acceptance, never change what is committed).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from as2d_cli.models.loader import open_seq2seq
from as2d_cli.models.session import cache_length, top2_margin, truncate_cache

WIDTHS = tuple(range(1, 17))


def _reference(model: Any, cross: Any, length: int) -> tuple[list[int], Any]:
    """Greedy tokens after the prompt (first included), continued past EOS with the model's
    own choices so every width has tokens to verify; the cache after the prompt."""
    logits, base = model.decode(list(cross.prompt), model.empty_cache(), cross)
    toks = [int(logits[-1].argmax())]
    cache = base
    limit = min(length, model.max_positions - len(cross.prompt) - 1)
    while len(toks) < limit:
        logits, cache = model.decode([toks[-1]], cache, cross)
        toks.append(int(logits[-1].argmax()))
    return toks, base


def check_model(
    model: Any, audio: np.ndarray, language: str | None, reps: int = 3, question: str | None = None
) -> dict[str, Any]:
    """The width, rollback and cost checks for one model on one window."""
    cross = model.encode(audio, language, question)
    toks, base = _reference(model, cross, max(WIDTHS) + 2)
    widths = [k for k in WIDTHS if k <= len(toks)]
    # Sequential decisions at each position after the prompt, from the known root toks[0].
    seq_arg, seq_margin, cache = [], [], base
    for t in toks[: max(widths)]:
        logits, cache = model.decode([t], cache, cross)
        seq_arg.append(int(logits[-1].argmax()))
        seq_margin.append(float(top2_margin(logits[-1:])[0]))
    per_width: list[dict[str, Any]] = []
    mismatches: list[dict[str, Any]] = []
    for k in widths:
        times: list[float] = []
        wide = None
        for _ in range(reps + 1):
            t0 = time.perf_counter_ns()
            logits, _ = model.decode(toks[:k], base, cross)
            times.append((time.perf_counter_ns() - t0) / 1e6)
            wide = logits
        assert wide is not None
        arg = [int(x) for x in wide.argmax(axis=-1)]
        diff = [i for i in range(k) if arg[i] != seq_arg[i]]
        if diff:
            mismatches.append(
                {"width": k, "positions": diff, "min_margin": min(seq_margin[i] for i in diff)}
            )
        per_width.append({"width": k, "ms": statistics.median(times[1:]), "agree": not diff})
    # Rollback: extend the cache by 8 tokens, truncate back, repeat a call: same logits.
    long_logits, long_cache = model.decode(toks[:8], base, cross)
    back = truncate_cache(long_cache, cache_length(base))
    again, _ = model.decode(toks[:8], back, cross)
    finite = np.isfinite(long_logits)  # suppressed tokens are -inf in both
    same_mask = np.array_equal(finite, np.isfinite(again))
    rollback_diff = (
        float(np.max(np.abs(again[finite] - long_logits[finite]))) if same_mask else float("inf")
    )
    return {
        "tokens": toks,
        "widths": per_width,
        "mismatches": mismatches,
        "rollback_exact": same_mask
        and bool(np.array_equal(again.argmax(-1), long_logits.argmax(-1))),
        "rollback_max_abs_diff": rollback_diff,
    }


def conversion_cost(
    pair: Any, drafter: Any, audio: np.ndarray, language: str | None, question: str | None
) -> dict[str, Any]:
    """The As²d drafter source through the text conversion on one window: tokens it
    published in the target's vocabulary, and the conversion's time per published token."""
    from as2d_cli.models.sources import drafter_source

    src = drafter_source(
        "drafter",
        drafter,
        audio,
        target_vocab=pair.vocab,
        language=language,
        question=question,
        limit=pair.max_length(),
    )
    src.start()
    published = 0
    while (unit := src.step()) is not None:
        published += len(unit)
    conv = src.conversion
    return {
        "source_tokens": len(conv.tokens),
        "published": published,
        "convert_ms": conv.convert_ns / 1e6,
        "us_per_token": conv.convert_ns / 1e3 / max(published, 1),
        "held_back": conv.held_back,
    }


def check_pair(
    pair: Any, windows: list[Any], *, reps: int = 3, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Load the pair's target and drafter and check both on ``windows``."""
    from as2d_cli.models.target import OrtTarget, greedy_decode

    say = progress or (lambda _m: None)
    target = OrtTarget(pair)
    drafter = open_seq2seq(pair, "drafter")
    out: dict[str, Any] = {
        "pair": pair.name,
        "directory": str(pair.directory),
        "windows": [],
        "models": {name: info["kind"] for name, info in pair.manifest["models"].items()},
    }
    for w in windows:
        say(f"{w.id}: target greedy decode")
        audio = w.load_audio()
        t0 = time.perf_counter()
        toks = greedy_decode(target, audio, None, w.language, w.question)
        ms = (time.perf_counter() - t0) * 1e3
        row: dict[str, Any] = {
            "id": w.id,
            "language": w.language,
            "target_tokens": len(toks),
            "eos": toks[-1] == target.eos_id,
            "decode_ms": ms,
            "text": pair.vocab.decode(toks),
        }
        for name, model in (("target", target.model), ("drafter", drafter)):
            say(f"{w.id}: {name} widths 1..16 and rollback")
            row[name] = check_model(model, audio, w.language, reps, w.question)
        if pair.converts("drafter"):
            say(f"{w.id}: the drafter's text conversion")
            row["conversion"] = conversion_cost(pair, drafter, audio, w.language, w.question)
        out["windows"].append(row)
    out["ok"] = pair_ok(out["windows"])
    return out


def pair_ok(windows: list[dict[str, Any]]) -> bool:
    """Only the target's numerics decide what is committed: its width or rollback differences
    fail the check. A drafter's (a dynamically quantized one always has some) can only cost
    acceptance, so they are reported as information."""
    return all(not r["target"]["mismatches"] and r["target"]["rollback_exact"] for r in windows)


def render_check(res: dict[str, Any]) -> str:
    lines = [
        f"pair {res['pair']} ({res['directory']}): "
        + ", ".join(f"{k} {v}" for k, v in res["models"].items())
    ]
    for r in res["windows"]:
        lines.append(
            f"{r['id']} [{r['language']}]: target {r['target_tokens']} tokens "
            f"({'EOS' if r['eos'] else 'capped'}) in {r['decode_ms']:.0f} ms: {r['text'][:70]!r}"
        )
        for m in ("target", "drafter"):
            c = r[m]
            bad = c["mismatches"]
            agree = (
                "K-wide = sequential for K=1..16"
                if not bad
                else (
                    f"K-wide differs from sequential at K={','.join(str(x['width']) for x in bad)} "
                    f"(smallest top-2 margin {min(x['min_margin'] for x in bad):.3g})"
                )
            )
            roll = (
                "rollback exact"
                if c["rollback_exact"]
                else f"rollback differs ({c['rollback_max_abs_diff']:.3g})"
            )
            note = (
                " (information: a drafter's numerics cannot change what the target commits)"
                if m == "drafter" and (bad or not c["rollback_exact"])
                else ""
            )
            lines.append(f"  {m}: {agree}; {roll}{note}")
        if "conversion" in r:
            c = r["conversion"]
            lines.append(
                f"  conversion: {c['source_tokens']} drafter tokens -> {c['published']} target "
                f"tokens, {c['us_per_token']:.0f} us per published token"
            )
    lines.append("call cost (ms, median) by width K on this host:")
    lines.append("  K       " + " ".join(f"{k:>6}" for k in WIDTHS))
    for m in ("target", "drafter"):
        cols: dict[int, list[float]] = (
            {w["width"]: [] for w in res["windows"][0][m]["widths"]} if res["windows"] else {}
        )
        for r in res["windows"]:
            for w in r[m]["widths"]:
                cols.setdefault(w["width"], []).append(w["ms"])
        lines.append(
            f"  {m:<8}"
            + " ".join(
                f"{statistics.median(cols[k]):>6.2f}" if k in cols else f"{'-':>6}" for k in WIDTHS
            )
        )
    lines.append(
        "pair OK" if res["ok"] else "the target has width or rollback differences (see above)"
    )
    return "\n".join(lines)
