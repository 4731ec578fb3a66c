"""Native runs as traces, priced by the frozen profile (D.3): the native-produced token
trajectories (target tokens, the source's published candidates, the serial drafts) are
replayed, and the signed TPS error 100·(TPS_replay/TPS_native − 1) is kept per run."""

from __future__ import annotations

from typing import Any

from as2d_cli.engine.methods import HISTORY
from as2d_cli.evaluate.native_record import run_spec
from as2d_cli.evaluate.native_stats import METHODS, divergence
from as2d_cli.evaluate.replay_gap import native_facts, replay_facts
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import (
    AUTOREGRESSIVE,
    CHUNKED,
    Chunk,
    DrafterTrace,
    SourceTrace,
    WindowTrace,
)
from as2d_cli.replay.driver import Prepared, replay_window, timeline_for


def published_steps(steps: list[int] | None, n: int) -> tuple[int, ...] | None:
    """A native run's tokens per producer step, cut to its ``n`` published tokens (steps
    after the last publication emitted tokens nobody saw); None when every step emitted one
    (the trace's default) or the run did not record them."""
    if not steps or all(k == 1 for k in steps):
        return None
    out: list[int] = []
    left = n
    for k in steps:
        if left <= 0:
            break
        out.append(min(k, left))
        left -= out[-1]
    return tuple(out + [1] * left)


def native_trace(
    window: str, dataset: str, res: dict, eos_id: int, audio_s: float = 0.0
) -> WindowTrace:
    """The trajectory a native run produced, as a one-window trace for replay (``audio_s``
    prices the profile's audio-length terms)."""
    ref = tuple(res["tokens"])
    sources = {}
    if res.get("source_tokens") is not None:
        toks = tuple(res["source_tokens"])
        confs = res.get("source_confidences")
        conf = None if confs is None or any(c is None for c in confs) else tuple(confs)
        if res["source"] == "ctc":
            chunks = tuple(
                Chunk(toks[off : off + n], 2.56 * (i + 1))
                for i, (_, off, n) in enumerate(res["publications_ms"])
            )
            sources[res["source"]] = SourceTrace(
                CHUNKED, toks, None, chunks, eos=True, eligible=True
            )
        else:
            sources[res["source"]] = SourceTrace(
                AUTOREGRESSIVE,
                toks,
                conf,
                None,
                eos=bool(toks) and toks[-1] == eos_id,
                steps=published_steps(res.get("source_steps"), len(toks)),
            )
    drafter = None
    if res.get("drafts"):
        longest: dict[int, dict] = {}
        for d in res["drafts"]:
            p = d["position"]
            if p not in longest or len(d["tokens"]) > len(longest[p]["tokens"]):
                longest[p] = d
        # ASP's drafts end at its confidence stop, which the replay's drafter reproduces from
        # the recorded confidences; the trace's cap is the method's, not the longest draft.
        spec = run_spec(res)
        asp_cap = spec.budget if spec.method == "asp" and spec.budget else 0
        cap = max([len(d["tokens"]) for d in longest.values()] + [asp_cap])
        conts = tuple(tuple(longest[p]["tokens"]) if p in longest else () for p in range(len(ref)))
        confs_ = tuple(
            tuple(longest[p]["confidences"] or ()) if p in longest else () for p in range(len(ref))
        )
        drafter = DrafterTrace(cap, conts, confs_)
    return WindowTrace(
        window,
        dataset,
        "test",
        audio_s,
        "asr",
        "",
        ref,
        bool(res["eos"]),
        bool(res["capped"]),
        int(res["max_tokens"]),
        eos_id,
        sources,
        drafter,
        None,
    )


def replay_native(
    profile: CostProfile, w: WindowTrace, res: dict
) -> tuple[float | None, dict[str, Any]]:
    """The replayed TPS of a native run's trajectory, and the replay's figures for the
    op-by-op comparison (``replay_gap``)."""
    spec = run_spec(res)  # the run's own settings, so the replay prices the same policy
    prep = Prepared(profile, spec)
    producer = spec.decoupled and spec.source not in (None, HISTORY)  # history alone: none
    tl = timeline_for(w, prep, spec.source) if producer and spec.source is not None else None
    r = replay_window(w, prep, detail=True, timeline=tl)
    return r.tps, replay_facts(r, tl[1] if tl is not None else None)


def collect_runs(
    runs: list[dict], windows: list[str], datasets: dict[str, str]
) -> tuple[list[dict], list[dict]]:
    """The run records (``native.runs.jsonl``) as measured rows in pass, window and method
    order, each with its divergence from target-only on the same window and pass; and the
    warm-up passes' divergences (``run`` names the method there)."""
    by = {(r["window"], r["rep"], r["method"]): r["res"] for r in runs}
    order = {w: i for i, w in enumerate(windows)}
    rows: list[dict] = []
    warm: list[dict] = []
    for wid, rep in sorted(
        {(w, rep) for w, rep, _ in by}, key=lambda k: (k[1], order.get(k[0], len(order)), k[0])
    ):
        got = {m: by[(wid, rep, m)] for m in METHODS if (wid, rep, m) in by}
        ref = got.get("target-only")
        if rep < 0:
            # (``d["method"]`` is the method's token there; the run is named apart)
            warm += [
                {"window": wid, "run": m, **d}
                for m in METHODS
                if m in got and ref is not None and (d := divergence(ref, got[m])) is not None
            ]
            continue
        for m, res in got.items():
            rows.append(
                {
                    "window": wid,
                    "dataset": datasets.get(wid, ""),
                    "rep": rep,
                    "method": m,
                    "res": res,
                    "divergence": divergence(ref, res) if ref is not None else None,
                }
            )
    return rows, warm


def price_rows(rows: list[dict], profile: CostProfile) -> list[dict]:
    """Replay each row's trajectory with ``profile``: ``tps_replay``, ``error_percent``, the
    native and replayed figures (``native_facts``, ``replay_facts``) and ``audio_s``."""
    from as2d_cli.corpus.manifest import load_corpus

    seconds = load_corpus().seconds()
    ref_s = (
        profile.context.ref_audio_s if profile.context is not None else 0.0
    )  # unknown window: no audio term
    eos_id = _eos(rows)
    for r in rows:
        res = r["res"]
        r["audio_s"] = seconds.get(r["window"], ref_s)
        w = native_trace(r["window"], r["dataset"], res, eos_id, r["audio_s"])
        r["tps_native"] = res["tps"]
        r["tps_replay"], r["replay_facts"] = replay_native(profile, w, res)
        r["native_facts"] = native_facts(res)
        r["error_percent"] = (
            100.0 * (r["tps_replay"] / r["tps_native"] - 1.0)
            if r["tps_replay"] and r["tps_native"]
            else None
        )
    return rows


def _eos(rows: list[dict]) -> int:
    for r in rows:
        if r["res"]["eos"]:
            return int(r["res"]["tokens"][-1])
    return -1
