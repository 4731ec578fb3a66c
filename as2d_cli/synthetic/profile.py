"""The synthetic K70-like cost profile: the paper's published K70 constants (D.2.2), the
idle verification curve through them for the other widths, and made-up round numbers for
the rest (its fit notes say which)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from as2d_cli.formats.profile import CostProfile, DrafterCosts, Fit, SourceCosts
from as2d_cli.formats.trace import (
    AUTOREGRESSIVE,
    CHUNKED,
)

# Paper K70 constants (D.2.2), ms.
K70 = {
    "target_step": 59.391,
    "draft": 23.347,
    "verify_k8": 112.656,
    "verify_k12": 142.825,
    "loop": 10.738,
    "paired": 35.075,
    "row": 0.951,
}


def k70_verify_curve(max_width: int = 25) -> dict[int, float]:
    """Idle verification ms by width: 59.391 + b·(K−1)^p through the K8 and K12 anchors."""
    a = K70["target_step"]
    y8, y12 = K70["verify_k8"] - a, K70["verify_k12"] - a
    p = math.log(y12 / y8) / math.log(11 / 7)
    b = y8 / 7**p
    out = {1: a}
    for k in range(2, max_width + 1):
        out[k] = round(a + b * (k - 1) ** p, 6)
    out[8], out[12] = K70["verify_k8"], K70["verify_k12"]  # exact anchors, no rounding drift
    return out


def synthetic_profile(max_width: int = 25) -> CostProfile:
    """A K70-like profile from the paper's published constants (marked synthetic)."""
    verify = k70_verify_curve(max_width)
    ratio = {k: round(1.08 + 0.07 * (k - 1) / max(1, max_width - 1), 6) for k in verify}
    refresh = {w: round(6.0 + 1.1 * w, 6) for w in range(1, max_width)}
    drafter = DrafterCosts(
        step_ms=K70["draft"],
        catch_up_ms=K70["draft"],
        paired_ms=K70["paired"],
        row_ms=K70["row"],
        refresh_ms=refresh,
    )
    sources = {
        "qwen": SourceCosts(
            "qwen",
            AUTOREGRESSIVE,
            step_ms_idle=K70["draft"],
            publish_ms=0.2,
            startup_ms=30.0,
            concurrent_ratio=1.12,
        ),
        "parakeet": SourceCosts(
            "parakeet",
            CHUNKED,
            chunk_ms_idle=40.0,
            publish_ms=0.2,
            startup_ms=50.0,
            concurrent_ratio=1.15,
        ),
        "sensevoice": SourceCosts(
            "sensevoice",
            CHUNKED,
            chunk_ms_idle=65.0,
            publish_ms=0.2,
            startup_ms=60.0,
            concurrent_ratio=1.15,
        ),
    }
    samples = {
        "target_step": (K70["target_step"],),
        "drafter.step": (K70["draft"],),
        "verify.K8": (K70["verify_k8"],),
        "verify.K12": (K70["verify_k12"],),
        "loop": (K70["loop"],),
        "drafter.paired": (K70["paired"],),
        "drafter.row": (K70["row"],),
    }
    fit = Fit(
        method="synthetic: paper K70 constants (D.2.2); other widths v(K)=59.391+b*(K-1)^p through K8/K12",
        samples=samples,
        notes="Made-up values (not measured): concurrent ratio 1.08..1.15 linear in K; refresh 6+1.1*w ms; "
        "qwen step = draft forward, concurrent 1.12; parakeet 40 ms and sensevoice 65 ms per 2.56 s chunk; "
        "publication 0.2 ms; align 0.3 ms per round.",
    )
    device = {
        "name": "k70-synthetic",
        "model": "23117RK66C",
        "phone": "Redmi K70 Pro (synthetic profile)",
        "soc": "Snapdragon 8 Gen 3 (SM8650)",
    }
    return CostProfile(
        device=device,
        target_step_ms=K70["target_step"],
        verify_idle_ms=verify,
        verify_concurrent_ratio=ratio,
        loop_ms=K70["loop"],
        align_ms=0.3,
        drafter=drafter,
        sources=sources,
        fit=fit,
        synthetic=True,
        created="1970-01-01T00:00:00Z",
        path="<synthetic k70 profile>",
    )


# ----------------------------------------------------------------- a pair of other sizes

# The paper's two model sizes priced on the K70 (D.2.2): the Qwen3-ASR 0.6B drafter's forward
# (23.347 ms) and the 1.7B target's step (59.391 ms). ALPHA is the exponent of the power law
# cost ∝ size^ALPHA through those two points: ln(59.391/23.347) / ln(1.7/0.6) ≈ 0.897.
PAPER_SIZES_B = {"draft": 0.6, "target_step": 1.7}
ALPHA = math.log(K70["target_step"] / K70["draft"]) / math.log(
    PAPER_SIZES_B["target_step"] / PAPER_SIZES_B["draft"]
)


def decoder_macs(config: Mapping[str, Any]) -> int:
    """Per-token multiply-adds of a causal language model's decoder from its ``config.json``
    (an audio LLM's ``text_config``): per layer the query and output projections (heads ×
    head size), the key and value projections (KV heads × head size) and a gated MLP (gate,
    up, down: 3 × hidden × intermediate); then the output projection over the vocabulary.
    Attention over the cache grows with the context and is not counted."""
    t = config.get("text_config") or config
    hidden = int(t["hidden_size"])
    heads = int(t["num_attention_heads"])
    kv = int(t.get("num_key_value_heads") or heads)
    head = int(t.get("head_dim") or hidden // heads)
    attention = 2 * hidden * heads * head + 2 * hidden * kv * head
    mlp = 3 * hidden * int(t["intermediate_size"])
    return int(t["num_hidden_layers"]) * (attention + mlp) + int(t["vocab_size"]) * hidden


def scaled_draft_ms(target_macs: int, drafter_macs: int) -> float:
    """The drafter's forward on the K70: the paper's target step × (drafter / target
    per-token multiply-adds)^ALPHA (the paper's own pair gives back its 23.347 ms)."""
    return K70["target_step"] * (drafter_macs / target_macs) ** ALPHA


def pair_profile(
    target_config: Mapping[str, Any],
    drafter_config: Mapping[str, Any],
    pair: Mapping[str, Any],
    max_width: int = 25,
) -> CostProfile:
    """The synthetic K70 profile of an audio-LLM model ``pair`` (its identity, recorded as
    ``device.pair``): the target takes the paper's published K70 target costs, as the
    bundled pair's profile does; the drafter's forward is :func:`scaled_draft_ms` of the two
    models' per-token multiply-adds, and every other drafter-side figure (catch-up, paired
    forward, confidence row, refresh, the ``drafter`` source's step and startup) keeps its
    ratio to the draft forward in the bundled pair's profile. Those costs are marked
    ``derived``."""
    base = synthetic_profile(max_width)
    t_macs, d_macs = decoder_macs(target_config), decoder_macs(drafter_config)
    step = round(scaled_draft_ms(t_macs, d_macs), 3)
    f = step / K70["draft"]
    rule = (
        f"not measured on a phone: the paper's K70 target step ({K70['target_step']} ms) x "
        f"(drafter / target per-token decoder multiply-adds, {d_macs:,} / {t_macs:,})^{ALPHA:.4f}, "
        f"alpha fitted to the paper's 0.6B draft forward and 1.7B target step on the K70 "
        f"(ln(59.391/23.347) / ln(1.7/0.6)) = {step:.3f} ms; the other drafter figures keep "
        f"their ratio to the draft forward ({f:.4f} x the bundled pair's)"
    )
    d = base.drafter
    assert d is not None
    drafter = DrafterCosts(
        step_ms=step,
        catch_up_ms=round(d.catch_up_ms * f, 3),
        paired_ms=round(d.paired_ms * f, 3),
        row_ms=round(d.row_ms * f, 3),
        refresh_ms={w: round(v * f, 6) for w, v in d.refresh_ms.items()},
        derived=rule,
    )
    qwen = base.sources["qwen"]
    source = replace(
        qwen,
        name="drafter",
        step_ms_idle=step,
        startup_ms=round(qwen.startup_ms * f, 3),
        derived=rule,
    )
    # the drafter's figures are derived, not published: only the target's stay samples
    samples = {k: v for k, v in base.fit.samples.items() if not k.startswith("drafter.")}
    notes = (
        base.fit.notes
        + f" Model pair {pair.get('name')!r}: the target is priced with the paper's K70 target "
        f"costs; the drafter's forward is derived by model size, cost = target step x (drafter "
        f"/ target per-token decoder multiply-adds)^alpha with alpha = ln(59.391/23.347) / "
        f"ln(1.7/0.6) = {ALPHA:.4f} from the paper's two published sizes (target {t_macs:,}, "
        f"drafter {d_macs:,} multiply-adds per token: {step:.3f} ms); catch-up, paired forward, "
        f"row, refresh and the drafter source's startup keep their ratio to the draft forward "
        f"(x {f:.4f}). Generated by training/make_k70_profile.py --pair."
    )
    return replace(
        base,
        device={**base.device, "name": "k70", "pair": dict(pair)},
        drafter=drafter,
        sources={"drafter": source},
        fit=replace(base.fit, samples=samples, notes=notes),
        created="2026-11-29T00:00:00Z",
    )
