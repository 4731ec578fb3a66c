"""Deterministic synthetic traces and a K70-like cost profile of the paper's size.

Used by tests, the replay's tests and the speed benchmark — never as a measurement.
Everything is a pure function of ``seed``; files made from it say ``synthetic: true``.

Traces (:func:`synthetic_traces`): the paper's ASR cohort shape (D.1.2) — 688 windows
over LibriSpeech 165, AMI 53, FLEURS 91, KeSpeech 188, M4Singer 191, ~137 tokens per
window, exactly 94,511 tokens (first token and EOS included) with ``anchor=True``, one
FLEURS reference capped at ``max_tokens``, two capped Qwen source sequences. Sources:

* ``qwen`` — autoregressive, every language, with per-token confidences; its sequence is
  the reference with per-dataset substitution/insertion/deletion edits (lower
  confidence on edits).
* ``parakeet`` — chunked (2.56 s chunks), English only, noisier, no confidences.
* ``sensevoice`` — chunked, English and Chinese, no confidences.

The prefix-conditioned drafter is consistent as a real greedy model is: the continuation
from position n follows the reference until the first drafter error j > n and then a
fixed off-path tail that depends only on j (the same prefix gives the same tokens).

Profile (:func:`synthetic_profile`): the paper's published K70 constants (D.2.2) —
59.391 ms target step, 23.347 ms draft forward, 112.656 ms K8 and 142.825 ms K12
verification, 10.738 ms loop residual, 35.075 ms paired-branch forward, 0.951 ms per
confidence row — and, for the other widths, the curve
``v(K) = 59.391 + b·(K−1)^p`` through K1 = the target step and the K8/K12 anchors
(p ≈ 0.993, b ≈ 7.67), widths 1..25. Concurrent ratios, source and refresh costs are
made-up round numbers, documented in the file's fit notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from as2d_cli import __version__
from as2d_cli.engine.methods import DEFAULT_ASP_CAP
from as2d_cli.formats.trace import (
    AUTOREGRESSIVE,
    CHUNKED,
    Chunk,
    DrafterTrace,
    SourceInfo,
    SourceTrace,
    TraceSet,
    WindowTrace,
)
from as2d_cli.synthetic.profile import K70 as K70
from as2d_cli.synthetic.profile import k70_verify_curve as k70_verify_curve
from as2d_cli.synthetic.profile import synthetic_profile as synthetic_profile

# The paper's test cohort (D.1.2): windows per dataset, and shape knobs per dataset:
# mean reference tokens, source match rate, drafter per-token error rate, tokens/s audio.
DATASETS: dict[str, dict[str, Any]] = {
    "librispeech": {
        "n": 165,
        "mean": 204.0,
        "src_match": 0.93,
        "draft_err": 0.07,
        "rate": 3.6,
        "langs": ["en"],
    },
    "ami": {
        "n": 53,
        "mean": 200.0,
        "src_match": 0.66,
        "draft_err": 0.30,
        "rate": 2.4,
        "langs": ["en"],
    },
    "fleurs": {
        "n": 91,
        "mean": 160.0,
        "src_match": 0.85,
        "draft_err": 0.12,
        "rate": 3.0,
        "langs": ["en", "zh", "fr", "de", "es", "ja", "ko", "ar"],
    },
    "kespeech": {
        "n": 188,
        "mean": 106.0,
        "src_match": 0.80,
        "draft_err": 0.19,
        "rate": 2.0,
        "langs": ["zh"],
    },
    "m4singer": {
        "n": 191,
        "mean": 84.0,
        "src_match": 0.74,
        "draft_err": 0.16,
        "rate": 1.8,
        "langs": ["zh"],
    },
}
ANCHOR_WINDOWS = 688
ANCHOR_TOKENS = 94_511
ANCHOR_AUDIO_S = 11.0 * 3600
# Per-dataset token totals (sum 94,511) whose target-only pooled TPS at 59.391 ms round to
# Table 8's K70 row (16.92, 16.92, 16.94, 17.00, 17.04; all 16.96).
ANCHOR_DATASET_TOKENS = {
    "librispeech": 33_695,
    "ami": 10_759,
    "fleurs": 14_651,
    "kespeech": 19_458,
    "m4singer": 15_948,
}
VOCAB = 151_936
EOS_ID = 151_645
MAX_TOKENS = 1024
CHUNK_S = 2.56
# The languages each source transcribes; None: every language.
SOURCE_LANGS: dict[str, set[str] | None] = {
    "qwen": None,
    "parakeet": {"en"},
    "sensevoice": {"en", "zh"},
}


def _transcribes(source: str, lang: str) -> bool:
    langs = SOURCE_LANGS[source]
    return langs is None or lang in langs


def _lengths(
    rng: np.random.Generator,
    counts: dict[str, int],
    means: dict[str, float],
    totals: dict[str, int] | None,
    max_tokens: int,
) -> dict[str, np.ndarray]:
    """Lognormal reference lengths; with ``totals``, each dataset sums exactly to its total
    (the FLEURS window 0 is the capped one and stays at the cap)."""
    lo, hi = min(8, max_tokens - 1), max_tokens - 1
    out: dict[str, np.ndarray] = {}
    for name, n in counts.items():
        sigma = 0.55
        x = rng.lognormal(math.log(means[name]) - sigma**2 / 2, sigma, size=n)
        out[name] = np.clip(np.round(x), lo, hi).astype(np.int64)
    if totals is None:
        return out
    for name, v in out.items():
        fixed = 0
        if name == "fleurs":
            v[0] = max_tokens  # the one capped reference (D.1.2)
            fixed = 1
        free = v[fixed:]
        want = totals[name] - int(v[:fixed].sum())
        free[:] = np.clip(np.round(free * (want / free.sum())), lo, hi)
        diff = want - int(free.sum())
        order = rng.permutation(len(free))
        k = 0
        while diff != 0:
            i = order[k % len(order)]
            k += 1
            if diff > 0 and free[i] < hi:
                free[i] += 1
                diff -= 1
            elif diff < 0 and free[i] > lo:
                free[i] -= 1
                diff += 1
    return out


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    t = rng.integers(3, VOCAB - 400, size=n)  # keeps clear of EOS (151645)
    return t.tolist()


def _edit(rng: np.random.Generator, ref: list[int], match: float) -> tuple[list[int], list[float]]:
    """A source's own sequence: the reference with substitutions, insertions, deletions."""
    out: list[int] = []
    conf: list[float] = []
    u = rng.random(len(ref))
    hi = rng.beta(12, 1.2, size=len(ref))
    lo = rng.beta(2, 3, size=len(ref))
    noise = _tokens(rng, len(ref) * 2 + 2)
    k = 0
    miss = 1.0 - match
    for i, t in enumerate(ref):
        if u[i] < match:
            out.append(t)
            conf.append(float(hi[i]))
        elif u[i] < match + miss * 0.5:  # substitution
            out.append(noise[k])
            k += 1
            conf.append(float(lo[i]))
        elif u[i] < match + miss * 0.75:  # insertion before the token
            out.append(noise[k])
            k += 1
            conf.append(float(lo[i]))
            out.append(t)
            conf.append(float(hi[i]))
        # else: deletion
    return out, [round(c, 4) for c in conf]


def _source_ar(
    rng: np.random.Generator,
    ref: list[int],
    eos: bool,
    match: float,
    cap_source: bool,
    max_tokens: int,
) -> SourceTrace:
    MAX_TOKENS = max_tokens  # noqa: N806
    body = ref[:-1] if eos else ref
    toks, conf = _edit(rng, body, match)
    if cap_source:  # the source runs to the generation limit without EOS
        pad = _tokens(rng, MAX_TOKENS)
        toks = (toks + pad)[:MAX_TOKENS]
        conf = (conf + [0.5] * MAX_TOKENS)[:MAX_TOKENS]
        return SourceTrace(AUTOREGRESSIVE, tuple(toks), tuple(conf), None, False, True)
    toks = toks[: MAX_TOKENS - 1] + [EOS_ID]
    conf = conf[: MAX_TOKENS - 1] + [0.99]
    return SourceTrace(AUTOREGRESSIVE, tuple(toks), tuple(conf), None, True, True)


def _source_chunked(
    rng: np.random.Generator,
    ref: list[int],
    eos: bool,
    match: float,
    audio_s: float,
    eligible: bool,
) -> SourceTrace:
    if not eligible:
        return SourceTrace(CHUNKED, (), None, (), True, False)
    body = ref[:-1] if eos else ref
    toks, _ = _edit(rng, body, match)
    toks = toks + [EOS_ID]
    n_chunks = max(1, math.ceil(audio_s / CHUNK_S))
    cuts = np.sort(rng.integers(0, len(toks) + 1, size=n_chunks - 1)).tolist()
    bounds = [0, *cuts, len(toks)]
    chunks = tuple(
        Chunk(
            tuple(toks[bounds[i] : bounds[i + 1]]),
            round(min((i + 1) * CHUNK_S, n_chunks * CHUNK_S), 4),
        )
        for i in range(n_chunks)
    )
    return SourceTrace(CHUNKED, tuple(toks), None, chunks, True, True)


def _drafter(rng: np.random.Generator, ref: list[int], err: float, cap: int) -> DrafterTrace:
    n = len(ref)
    errors = rng.random(n + 1) < err  # errors[j]: drafter's greedy token for position j is wrong
    errors[0] = False
    errors[n] = True  # past the end: the drafter wanders off (drafts to budget past EOS)
    on_conf = np.round(rng.beta(14, 1.0, size=n), 4).tolist()
    tails: dict[int, tuple[list[int], list[float]]] = {}
    next_err = [0] * (n + 1)
    nxt = n
    for j in range(n, -1, -1):
        if errors[j]:
            nxt = j
        next_err[j] = nxt

    def tail(j: int) -> tuple[list[int], list[float]]:
        if j not in tails:
            toks = _tokens(rng, cap)
            confs = np.round(rng.beta(2, 2.5, size=cap), 4).tolist()
            if j < n and rng.random() < 0.5:
                # Substitution, then back on the reference (lets ASP recycle adjacent matches).
                rest = ref[j + 1 : j + cap]
                toks = toks[:1] + rest + toks[1 + len(rest) :]
            confs[0] = round(float(rng.beta(1.5, 4)), 4)  # the wrong token tends to be unsure
            tails[j] = (toks, confs)
        return tails[j]

    conts: list[tuple[int, ...]] = []
    confs: list[tuple[float, ...]] = []
    for pos in range(n - 1):
        j = next_err[pos + 1]
        path = ref[pos + 1 : j][:cap]
        pc = on_conf[pos + 1 : j][:cap]
        if len(path) < cap:
            tt, tc = tail(j)
            path = path + tt[: cap - len(path)]
            pc = pc + tc[: cap - len(pc)]
        conts.append(tuple(path))
        confs.append(tuple(pc))
    return DrafterTrace(cap, tuple(conts), tuple(confs))


def synthetic_traces(
    seed: int = 20260915,
    *,
    scale: float = 1.0,
    anchor: bool = True,
    drafter: bool = True,
    drafter_cap: int = DEFAULT_ASP_CAP,
    split: str = "test",
    datasets: dict[str, int] | None = None,
    max_tokens: int = MAX_TOKENS,
    mean_scale: float = 1.0,
) -> TraceSet:
    """A deterministic synthetic trace set.

    ``anchor=True`` with ``scale=1`` and default datasets gives the paper's 688 windows
    and exactly 94,511 tokens. ``scale`` shrinks the per-dataset window counts (for fast
    tests); ``datasets`` overrides them; ``mean_scale`` shrinks reference lengths and
    ``max_tokens`` sets the output cap (small committed examples)."""
    rng = np.random.default_rng(seed)
    counts = datasets or {k: max(1, round(v["n"] * scale)) for k, v in DATASETS.items()}
    means = {k: DATASETS[k]["mean"] * mean_scale for k in counts}
    full = anchor and scale == 1.0 and datasets is None and mean_scale == 1.0 and max_tokens == 1024
    lengths = _lengths(rng, counts, means, ANCHOR_DATASET_TOKENS if full else None, max_tokens)
    if not full and "fleurs" in lengths and anchor:
        lengths["fleurs"][0] = max_tokens
    # Audio seconds proportional to tokens / rate, rescaled to 11.0 h for the anchor set.
    raw_audio = {
        k: lengths[k] / DATASETS[k]["rate"] * rng.uniform(0.8, 1.2, size=len(lengths[k]))
        for k in lengths
    }
    audio_scale = ANCHOR_AUDIO_S / sum(float(v.sum()) for v in raw_audio.values()) if full else 1.0
    windows: list[WindowTrace] = []
    shape = _Shape(split, drafter, drafter_cap, max_tokens)
    for name, lens in lengths.items():
        for i, n in enumerate(lens.tolist()):
            audio = round(float(raw_audio[name][i]) * audio_scale, 3)
            windows.append(_window(rng, shape, name, i, n, audio))
    return TraceSet(_provenance(seed), EOS_ID, dict(_SOURCES_INFO), "qwen", tuple(windows))


@dataclass(frozen=True)
class _Shape:
    """What every synthetic window shares: its split, whether it has a paired drafter
    (and that drafter's cap), and the output cap."""

    split: str
    drafter: bool
    drafter_cap: int
    max_tokens: int


_CAPPED_SOURCES = {("ami", 0), ("kespeech", 1)}  # two capped Qwen sequences (D.2.3)

_SOURCES_INFO = {
    "qwen": SourceInfo("qwen", AUTOREGRESSIVE, "synthetic-qwen"),
    "parakeet": SourceInfo("parakeet", CHUNKED, "synthetic-parakeet"),
    "sensevoice": SourceInfo("sensevoice", CHUNKED, "synthetic-sensevoice"),
}


def _window(
    rng: np.random.Generator, shape: _Shape, name: str, i: int, n: int, audio: float
) -> WindowTrace:
    """Window ``i`` of dataset ``name`` with ``n`` reference tokens (the generator drawn in
    a fixed order: body, language, the three sources, the drafter)."""
    spec = DATASETS[name]
    max_tokens = shape.max_tokens
    capped = n >= max_tokens
    body = _tokens(rng, n if capped else n - 1)
    ref = body if capped else body + [EOS_ID]
    lang = (
        spec["langs"][int(rng.integers(len(spec["langs"])))]
        if len(spec["langs"]) > 1
        else spec["langs"][0]
    )
    sources = {
        "qwen": _source_ar(
            rng, ref, not capped, spec["src_match"], (name, i) in _CAPPED_SOURCES, max_tokens
        ),
        "parakeet": _source_chunked(
            rng,
            ref,
            not capped,
            spec["src_match"] - 0.08,
            audio,
            _transcribes("parakeet", lang),
        ),
        "sensevoice": _source_chunked(
            rng,
            ref,
            not capped,
            spec["src_match"] - 0.05,
            audio,
            _transcribes("sensevoice", lang),
        ),
    }
    d = _drafter(rng, ref, spec["draft_err"], shape.drafter_cap) if shape.drafter else None
    return WindowTrace(
        id=f"{shape.split}-{name}-{i:04d}",
        dataset=name,
        split=shape.split,
        audio_seconds=audio,
        task="asr",
        language=lang,
        reference=tuple(ref),
        eos=not capped,
        capped=capped,
        max_tokens=max_tokens,
        eos_id=EOS_ID,
        sources=sources,
        drafter=d,
        default_source="qwen",
    )


def _provenance(seed: int) -> dict:
    """A synthetic trace set's provenance: made-up models, a fixed creation time."""
    return {
        "models": {
            "target": "synthetic-target",
            "drafter": "synthetic-drafter",
            "qwen": "synthetic-qwen",
            "parakeet": "synthetic-parakeet",
            "sensevoice": "synthetic-sensevoice",
        },
        "tokenizer": {"name": "synthetic", "vocab_size": VOCAB},
        "toolkit_version": __version__,
        "created": "1970-01-01T00:00:00Z",
        "synthetic": True,
        "seed": seed,
    }


# Small committed examples (tests/data/): one to two windows per dataset, short outputs,
# a capped FLEURS window at max_tokens 48, the full drafter cap 24.
EXAMPLE_DATASETS = {"librispeech": 2, "ami": 1, "fleurs": 2, "kespeech": 1, "m4singer": 1}
EXAMPLE_SEEDS = {"dev": 11, "val": 12, "test": 13}


def example_traces(split: str = "test") -> TraceSet:
    """The small example trace set committed as ``tests/data/example-<split>.jsonl``."""
    return synthetic_traces(
        EXAMPLE_SEEDS[split],
        anchor=True,
        datasets=dict(EXAMPLE_DATASETS),
        max_tokens=48,
        mean_scale=0.2,
        split=split,
    )
