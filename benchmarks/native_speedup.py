"""Native speed: As²d against target-only (and SD, ASP) on the bundled test windows.

``--models PAIR`` runs another model pair (a folder, or a shipped pair's name such as
``audio-llm``) and ``--task T`` its task's requests (``Corpus.requests``: the ASR windows,
the translation windows, or the spoken-QA requests, each asking its own question); the
default is the bundled pair on the ASR windows.

Methods run interleaved window by window (rotating their order) in one runner process so
they share machine conditions; with ``--repeats R`` every window runs R times per method,
the repetitions interleaved too, and a window's time is the median of its repetitions (as
``as2d eval --native`` and the paper's D.3 take the median native latency: one run's noise
on this host, 10–20 % per window, would otherwise decide which windows count as slower).
Prints pooled TPS per method and per setting (tokens over the windows' median times), the
As²d/target-only ratio, the fraction of windows slower than target-only, and the pooled
D, V, O, H of As²d (over all runs). Every output is checked against target-only's tokens
of the same repetition. For every As²d method it prints what the target's calls saw, as
``benchmarks/alignment_ceiling.py`` does for the replay: K1 calls with nothing published
past the cursor (pace), K1 calls with candidates published but none usable (aligner), and
the share of offered candidates rejected (quality).

    python benchmarks/native_speedup.py [--windows N] [--rounds 3] [--split test] [--budget 7] [--source drafter|lookahead|ctc] [--batch 8] [--threshold 0.4] [--align suffix|paper] [--history] [--models PAIR] [--task T] [--json out.json]

A method written ``as2d@paper`` (or ``as2d@suffix``) runs As²d with those alignment rules
beside the others, e.g. ``--methods target-only,as2d,as2d@paper`` compares the rules in
one run; ``as2d@b2`` sets the publication batch, ``as2d@t0.7`` the confidence stop, and
``as2d@paper+b2+t0.7`` all three; ``as2d@lookahead`` (or another source's name) runs that
source.

Goal on a 2-core host: As²d ≥ 1.5× target-only pooled, at most 5% of windows slower.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.engine.causes import CallCauses, call_causes  # noqa: E402
from as2d_cli.errors import UserError  # noqa: E402
from as2d_cli.evaluate.native import pick_windows  # noqa: E402
from as2d_cli.evaluate.native_render import split_text  # noqa: E402
from as2d_cli.evaluate.native_stats import time_split_per_token  # noqa: E402
from as2d_cli.launch.host import LocalRunner, default_cores  # noqa: E402
from as2d_cli.models.model_pair import ModelPair  # noqa: E402
from as2d_cli.models.prompting import TASKS  # noqa: E402
from native.protocol import MODEL_SOURCES as SOURCES  # noqa: E402  (--source, as2d@<source>)


def round_causes(res: dict) -> CallCauses:
    """What a native As²d run's target calls saw (as2d_cli/engine/causes.py)."""
    pubs = sorted(
        (e["t_ns"], e["offset"] + e["count"]) for e in res["events"] if e["op"] == "publish"
    )
    rounds = (
        (r["width"], r["start_ns"], r["cursor"], r["offered"], r["accepted"]) for r in res["rounds"]
    )
    return call_causes(rounds, pubs)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test")
    ap.add_argument(
        "--windows", type=int, default=40, help="windows to run (spread over the settings)"
    )
    ap.add_argument(
        "--repeats",
        "--rounds",
        dest="repeats",
        type=int,
        default=3,
        help="rounds: passes over the windows, each running every method on every window with "
        "the order rotating; a window's time is the median of its rounds, and the As²d / "
        "target-only ratio of each round gives the median and range printed",
    )
    ap.add_argument("--budget", type=int, default=7)
    ap.add_argument("--source", default="drafter", choices=SOURCES, help="As²d's source")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument(
        "--batch", type=int, default=8, help="As²d: tokens per publication batch (the paper: 8)"
    )
    ap.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="As²d: confidence stop (default: the methods' default, the paper's 0.4)",
    )
    ap.add_argument(
        "--align", default=None, choices=["suffix", "paper"], help="As²d's alignment rules"
    )
    ap.add_argument(
        "--history",
        action="store_true",
        help="As²d: history candidates merged into the source's stream (a deployment's "
        "config.history)",
    )
    ap.add_argument("--methods", default="target-only,as2d,sd,asp")
    ap.add_argument(
        "--models", default=None, help="a model pair folder or a shipped pair's name (audio-llm)"
    )
    ap.add_argument(
        "--task",
        default=None,
        choices=TASKS,
        help="the pair's task and its corpus requests (default: the pair's)",
    )
    ap.add_argument("--json", type=Path)
    return ap


def _pair(a: argparse.Namespace) -> ModelPair | None:
    """The pair ``--models`` names with ``--task`` (None: the bundled pair)."""
    if a.models is None and a.task is None:
        return None
    from as2d_cli.models.model_pair import load_pair
    from as2d_cli.models.prompting import PromptSpec
    from as2d_cli.models.shipped import resolve_models

    path = None if a.models is None else resolve_models(a.models)
    return load_pair(path, check_hashes=False, prompt=PromptSpec(a.task))


def _refusal(a: argparse.Namespace, methods: list[str]) -> str | None:
    """Why these arguments cannot run (None: they can)."""
    if a.repeats < 1:
        return "--repeats must be at least 1"
    if a.json is not None and a.json.exists():
        return f"{a.json} exists (earlier results are never overwritten); name another file"
    if not {"target-only", "as2d"} <= set(methods):
        return "--methods must include target-only and as2d (the ratio and the exactness check need both)"
    return None


def _decode_cmd(m: str, window: str, a: argparse.Namespace) -> dict:
    """The runner's decode command of method ``m`` (``method@variant+…``: alignment rules,
    source, ``bN`` batch, ``tX`` threshold) on one window."""
    method, _, variant = m.partition("@")
    align = next((v for v in variant.split("+") if v in ("paper", "suffix")), "")
    source = next((v for v in variant.split("+") if v in SOURCES), a.source)
    batch = next((int(v[1:]) for v in variant.split("+") if v[:1] == "b"), a.batch)
    threshold = next((float(v[1:]) for v in variant.split("+") if v[:1] == "t"), a.threshold)
    cmd = {
        "op": "decode",
        "window": window,
        "method": method,
        "budget": a.budget,
        "k": a.k,
        "source": source,
        "batch": batch,
        "events": method == "as2d",  # rounds and publications: the causes below
    }
    if threshold is not None:
        cmd["threshold"] = threshold
    if align or a.align:
        cmd["align"] = align or a.align
    if a.history and method == "as2d":
        cmd["history"] = True
    return cmd


def _run_rounds(
    r: LocalRunner, picked: list, methods: list[str], a: argparse.Namespace
) -> list[dict]:
    """Every method on every window per round, the order rotating; one record per run."""
    runs = []
    for rep in range(a.repeats):
        for i, w in enumerate(picked):
            turn = i + rep
            order = methods[turn % len(methods) :] + methods[: turn % len(methods)]
            res = {m: r.call(_decode_cmd(m, w.id, a)) for m in order}
            ref = res["target-only"]["tokens"]
            for m in methods:
                x = res[m]
                runs.append(
                    {
                        "window": w.id,
                        "setting": w.setting,
                        "method": m,
                        "rep": rep,
                        "tokens": x["n_tokens"],
                        "time_ms": x["time_ms"],
                        "exact": x["tokens"] == ref,
                        "acc": x["accounting_ms"],
                        "causes": round_causes(x) if "rounds" in x else None,
                        "result": {
                            k: x.get(k) for k in ("time_split_ns", "n_tokens", "source_tokens")
                        },
                    }
                )
            print(
                f"[{rep + 1}/{a.repeats} {i + 1}/{len(picked)}] {w.id}: "
                + "  ".join(f"{m} {res[m]['tps']:.1f}" for m in methods),
                file=sys.stderr,
                flush=True,
            )
    return runs


def _median_rows(picked: list, methods: list[str], runs: list[dict]) -> list[dict]:
    """One row per window and method: the median time of its repetitions."""
    rows = []
    for w in picked:
        for m in methods:
            sel = [x for x in runs if x["window"] == w.id and x["method"] == m]
            rows.append(
                {
                    "window": w.id,
                    "setting": w.setting,
                    "method": m,
                    "tokens": sel[0]["tokens"],
                    "time_ms": statistics.median(x["time_ms"] for x in sel),
                }
            )
    return rows


def _pooled(sel: list[dict]) -> float:
    t = sum(x["time_ms"] for x in sel)
    return sum(x["tokens"] for x in sel) / (t / 1e3) if t else float("nan")


def _causes(runs: list[dict], methods: list[str]) -> dict:
    """Per method with recorded rounds: why its calls were what they were (printed too)."""
    out = {}
    for m in methods:
        c = [x for x in runs if x["method"] == m and x["causes"] is not None]
        if not c:
            continue
        tot = CallCauses()
        for x in c:
            tot.add(x["causes"])
        decoded = sum(x["tokens"] - 1 for x in c)
        out[m] = shares = {
            "calls": tot.calls,
            **tot.shares(),
            "accepted_share": tot.accepted / decoded if decoded else 0.0,
        }
        print(
            f"{m} calls (all runs): {tot.calls}; K1 with nothing ready {shares['k1_nothing_ready']:.3f} (pace), "
            f"K1 with candidates ready but none usable {shares['k1_ready_unaligned']:.3f} (aligner), "
            f"offered rejected {shares['rejected']:.3f} (quality); accepted share of the decoded tokens "
            f"{shares['accepted_share']:.3f}"
        )
    return out


def main() -> int:
    a = _parser().parse_args()
    methods = a.methods.split(",")
    why = _refusal(a, methods)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        pair = _pair(a)
        task = "transcribe" if pair is None else str(pair.effective_prompt().task)
        ws = {w.id: w for w in load_corpus().requests(task, a.split)}
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    picked = [
        ws[i] for i in pick_windows(list(ws), {i: w.setting for i, w in ws.items()}, a.windows)
    ]
    tc, pc = default_cores()
    r = LocalRunner()
    r.call({"op": "hello"})
    load: dict = {"op": "load", "target_cores": tc, "producer_cores": pc}
    if pair is not None:
        load["models"] = None if pair.bundled else str(pair.directory.resolve())
        load["prompt"] = None if pair.prompt.empty else pair.prompt.to_wire()
        print(f"model pair {pair.name} ({pair.directory}), task {task}", file=sys.stderr)
    r.call(load)
    t0 = time.time()
    runs = _run_rounds(r, picked, methods, a)
    r.close()
    rows = _median_rows(picked, methods, runs)
    out = {
        "pair": None if pair is None else pair.identity(),
        "windows": len(picked),
        "repeats": a.repeats,
        "wall_s": time.time() - t0,
        "methods": {m: _pooled([x for x in rows if x["method"] == m]) for m in methods},
        "settings": {
            s: {
                m: _pooled([x for x in rows if x["method"] == m and x["setting"] == s])
                for m in methods
            }
            for s in sorted({x["setting"] for x in rows})
        },
    }
    out.update(_report(out, runs, rows, a.repeats))
    out["as2d_causes"] = _causes(runs, methods)
    out["time_split"] = time_split(runs, methods)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


def _report(out: dict, runs: list[dict], rows: list[dict], repeats: int) -> dict:
    """The ratio, its rounds, the slower windows, the accounting and the inexact runs
    (printed, and returned for the JSON)."""
    base = {x["window"]: x["tokens"] / x["time_ms"] for x in rows if x["method"] == "target-only"}
    tpw = {x["window"]: x["tokens"] / x["time_ms"] for x in rows if x["method"] == "as2d"}
    slower = [w for w in tpw if tpw[w] / base[w] < 1 - 1e-9]
    acc: defaultdict[str, float] = defaultdict(float)
    for x in runs:
        if x["method"] == "as2d":
            for k, v in x["acc"].items():
                acc[k] += v
    extra: dict = {}
    extra["as2d_over_target_only"] = out["methods"]["as2d"] / out["methods"]["target-only"]
    extra["rounds"] = per_round = round_ratios(runs, repeats)
    extra["as2d_slower_fraction"] = len(slower) / len(tpw) if tpw else float("nan")
    extra["as2d_accounting_ms"] = dict(acc)
    extra["as2d_slower_windows"] = sorted(slower)
    extra["inexact"] = sorted(
        {(x["window"], x["method"], x["rep"]) for x in runs if not x["exact"]}
    )
    extra["per_window"] = rows  # median time of each window's repetitions, per method
    print("\npooled TPS:  " + "  ".join(f"{m} {v:.2f}" for m, v in out["methods"].items()))
    for s, d in out["settings"].items():
        print(f"  {s:<13}" + "  ".join(f"{m} {v:.2f}" for m, v in d.items()))
    print(f"As²d / target-only pooled: {extra['as2d_over_target_only']:.3f}×")
    print(
        f"As²d / target-only per round: median {statistics.median(per_round):.3f}×, range "
        f"{min(per_round):.3f}–{max(per_round):.3f}× over {len(per_round)} rounds "
        f"({', '.join(f'{x:.3f}' for x in per_round)})"
    )
    print(
        f"windows where As²d is slower than target-only: {len(slower)}/{len(tpw)} ({extra['as2d_slower_fraction']:.1%})"
        + (f": {', '.join(sorted(slower))}" if slower else "")
    )
    print(
        "As²d D, V, O, H (s): "
        + ", ".join(f"{k}={acc[k] / 1e3:.2f}" for k in ("T", "D", "V", "O", "H"))
    )
    print(f"outputs differing from target-only: {len(extra['inexact'])} of {len(runs)} runs")
    return extra


def round_ratios(runs: list[dict], rounds: int) -> list[float]:
    """As²d / target-only pooled over each round's windows (every window once per method):
    the rounds alternate with the host's state, so their median and range say what one
    pooled figure cannot."""
    out = []

    def tps(m: str, rep: int) -> float:
        sel = [x for x in runs if x["rep"] == rep and x["method"] == m]
        return sum(x["tokens"] for x in sel) / sum(x["time_ms"] for x in sel)

    for rep in range(rounds):
        out.append(tps("as2d", rep) / tps("target-only", rep))
    return out


def time_split(runs: list[dict], methods: list[str]) -> dict:
    """Where each method's time went, over all its runs, per token (µs): the target's thread
    per committed token and the source per published token, each split into ONNX Runtime
    calls, the Python around them and waiting for a CPU (as2d_cli/evaluate/native_stats.py)."""
    out: dict = {}
    print("\ntime per token (µs): ORT call / Python around it / waiting for a CPU")
    for m in methods:
        row = time_split_per_token([x["result"] for x in runs if x["method"] == m])
        if not row:
            continue
        out[m] = row
        print(f"  {m:<12} " + "; ".join(split_text(side, v) for side, v in row.items()))
    return out


if __name__ == "__main__":
    sys.exit(main())
