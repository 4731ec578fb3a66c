"""Small hand-priced profiles and windows for the replay tests (round-number costs, so
expected times can be computed by hand)."""

from __future__ import annotations

from as2d_cli.formats.profile import CostProfile, DrafterCosts, Fit, SourceCosts
from as2d_cli.formats.trace import Chunk, DrafterTrace, SourceTrace, WindowTrace

EOS = 0


def hand_profile(
    *,
    widths=range(1, 26),
    verify=None,
    ratio=2.0,
    align_ms=0.0,
    qwen_step=20.0,
    qwen_startup=10.0,
    qwen_ratio=1.5,
    publish=1.0,
    chunk=40.0,
) -> CostProfile:
    v = verify or {k: 50.0 + 10.0 * (k - 1) for k in widths}
    return CostProfile(
        device={"name": "hand"},
        target_step_ms=45.0,
        verify_idle_ms=dict(v),
        verify_concurrent_ratio={k: ratio for k in v},
        loop_ms=5.0,
        align_ms=align_ms,
        drafter=DrafterCosts(
            step_ms=10.0,
            catch_up_ms=10.0,
            paired_ms=15.0,
            row_ms=1.0,
            refresh_ms={w: 2.0 * w for w in range(1, 25)},
        ),
        sources={
            "qwen": SourceCosts(
                "qwen",
                "autoregressive",
                step_ms_idle=qwen_step,
                publish_ms=publish,
                startup_ms=qwen_startup,
                concurrent_ratio=qwen_ratio,
            ),
            "chunky": SourceCosts(
                "chunky",
                "chunked",
                chunk_ms_idle=chunk,
                publish_ms=publish,
                startup_ms=qwen_startup,
                concurrent_ratio=1.0,
            ),
        },
        fit=Fit("hand-made for tests"),
        path="hand.yaml",
    )


def hand_window(
    ref,
    qwen=None,
    *,
    chunks=None,
    cap=4,
    max_tokens=64,
    conts=None,
    wid="w0",
    eligible=True,
    dataset="d",
) -> WindowTrace:
    ref = tuple(ref)
    qwen = tuple(ref if qwen is None else qwen)
    if conts is None:  # a perfect drafter: the reference continuation, padded
        conts = [tuple((list(ref[n + 1 :]) + [7] * cap)[:cap]) for n in range(len(ref))]
    sources = {"qwen": SourceTrace("autoregressive", qwen, tuple(0.9 for _ in qwen))}
    if chunks is not None:
        flat = tuple(t for c in chunks for t in c)
        sources["chunky"] = SourceTrace(
            "chunked",
            flat,
            None,
            tuple(Chunk(tuple(c), 2.56 * (i + 1)) for i, c in enumerate(chunks)),
            eligible=eligible,
        )
    return WindowTrace(
        wid,
        dataset,
        "test",
        10.0,
        "asr",
        "en",
        ref,
        ref[-1] == EOS,
        ref[-1] != EOS,
        max_tokens,
        EOS,
        sources,
        DrafterTrace(cap, tuple(conts), None),
        default_source="qwen",
    )
