"""The synthetic K70-like cost profile: the paper's published K70 constants (D.2.2), the
idle verification curve through them for the other widths, and made-up round numbers for
the rest (its fit notes say which)."""

from __future__ import annotations

import math

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
