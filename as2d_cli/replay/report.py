"""File-level entry points for the CLI: load inputs, replay, build JSON-ready reports.

Nothing here prints or exits; errors are one-line :class:`~as2d_cli.errors.As2dError`s.
The report of ``as2d replay`` (``as2d.replay-report`` v2, printed by ``--json`` and
stored as the payload of an ``as2d.results`` file with ``--out``) is documented in
``docs/replay.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from as2d_cli.engine.methods import DEFAULT_ALIGN, MethodOptions, MethodSpec
from as2d_cli.errors import UserError
from as2d_cli.execution import Executor
from as2d_cli.formats import registry
from as2d_cli.formats.common import sha256_file
from as2d_cli.formats.deployment import Deployment
from as2d_cli.formats.deployment_io import (
    load_deployment,
    make_deployment,
    rules_for,
    write_deployment,
)
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.trace import TraceSet, WindowTrace
from as2d_cli.formats.trace_io import load_traces
from as2d_cli.replay.run import MethodRun, run_method, slowdowns
from as2d_cli.replay.selection import Selection, select_budget, windows_of
from as2d_cli.replay.sweep import AS2D, DEFAULT_BUDGETS
from as2d_cli.stats.compare import cdf

REPORT_SCHEMA, REPORT_VERSION = registry.name_version("as2d.replay-report")  # 2: "align"
# 2: "align"; 3: "history" (the chosen configuration's, each ranked row's, the catalog's)
SELECTION_SCHEMA, SELECTION_VERSION = registry.name_version("as2d.selection-report")


def _ref(path: str | Path) -> dict:
    return {"path": str(path), "sha256": sha256_file(path)}


def merge_traces(sets: Sequence[tuple[str, TraceSet]]) -> TraceSet:
    """One trace set from several files (e.g. a dev file and a val file): they must agree
    on EOS and on every declared source, and no window id may repeat."""
    (first_path, base), *rest = sets
    windows = list(base.windows)
    seen = {w.id: first_path for w in windows}
    sources = dict(base.sources)
    for path, ts in rest:
        if ts.eos_id != base.eos_id:
            raise UserError(
                f"{path}: EOS id {ts.eos_id} differs from {first_path}'s {base.eos_id}; pass traces of one target model"
            )
        if ts.default_source != base.default_source:
            raise UserError(
                f"{path}: default source {ts.default_source!r} differs from {first_path}'s {base.default_source!r}; pass traces made together"
            )
        for name, info in ts.sources.items():
            if name in sources and sources[name].kind != info.kind:
                raise UserError(
                    f"{path}: source {name!r} is {info.kind} but {sources[name].kind} in {first_path}; pass traces made together"
                )
            sources.setdefault(name, info)
        for w in ts.windows:
            if w.id in seen:
                raise UserError(
                    f"{path}: window {w.id} also appears in {seen[w.id]}; pass each window once"
                )
            seen[w.id] = path
            windows.append(w)
    return TraceSet(base.provenance, base.eos_id, sources, base.default_source, tuple(windows))


def _paths(traces_path: str | Path | Sequence[str | Path]) -> list[Path]:
    if isinstance(traces_path, (str, Path)):
        return [Path(traces_path)]
    paths = [Path(p) for p in traces_path]
    if not paths:
        raise UserError("no trace file given; pass --traces")
    return paths


def load_inputs(
    profile_path: str | Path, traces_path: str | Path | Sequence[str | Path]
) -> tuple[CostProfile, TraceSet]:
    """Load and validate the profile and one or more trace files (merged)."""
    from as2d_cli.formats.pairs import check_pair

    profile = load_profile(profile_path)
    paths = _paths(traces_path)
    sets = [(str(p), load_traces(p)) for p in paths]
    for where, ts in sets:
        check_pair(profile, ts, where)
    return profile, sets[0][1] if len(sets) == 1 else merge_traces(sets)


def _trace_refs(traces_path: str | Path | Sequence[str | Path]) -> dict | list[dict]:
    paths = _paths(traces_path)
    return _ref(paths[0]) if len(paths) == 1 else [_ref(p) for p in paths]


def _options(
    dep: Deployment | None,
    where: str,
    trace_source: str | None,
    budget: int | None,
    source: str | None,
    k: int | None,
    align: str | None,
) -> MethodOptions:
    """The replay's method settings: the given ones over the deployment's (its budget,
    source, batch, threshold, alignment rules and history candidates), else the trace's
    default source."""
    if dep is None:
        return MethodOptions(
            budget=budget,
            source=source,
            k=k,
            default_source=trace_source,
            align=align or DEFAULT_ALIGN,
        )
    return MethodOptions(
        budget=budget,
        source=source,
        k=k,
        default_source=dep.source,
        default_budget=dep.budget,
        batch=dep.batch,
        threshold=dep.threshold,
        align=rules_for(dep, align, where),
        history=dep.history,
    )


def _per_window(
    windows: Sequence[WindowTrace], run: MethodRun, wtps: list[float | None], spans: bool
) -> list[dict]:
    """One entry per window: its id, dataset, split, TPS and every configuration's replay."""
    return [
        {
            "window": w.id,
            "dataset": w.dataset,
            "split": w.split,
            "tps": wtps[i],
            "configs": [rows[i].to_json(spans=spans) for rows in run.runs],
        }
        for i, w in enumerate(windows)
    ]


def replay_report(
    profile_path: str | Path,
    traces_path: str | Path | Sequence[str | Path],
    method: str,
    *,
    budget: int | None = None,
    source: str | None = None,
    k: int | None = None,
    split: str | None = None,
    deployment_path: str | Path | None = None,
    spans: bool = True,
    align: str | None = None,
) -> dict:
    """Replay one method over the traces (optionally one split) and report every window,
    the pooled summary per dataset and overall, and slowdowns versus target-only.
    ``align``: the target-decoupled methods' alignment rules (default: the deployment's,
    else the default rules)."""
    profile, traces = load_inputs(profile_path, traces_path)
    windows = windows_of(traces, split)
    dep: Deployment | None = None
    if deployment_path is not None:
        dep = load_deployment(deployment_path, profile=profile_path)
    options = _options(dep, str(deployment_path), traces.default_source, budget, source, k, align)
    align = options.align
    run = run_method(windows, profile, method, options)
    summary = run.summary()
    if method != "target-only":
        base = run_method(windows, profile, "target-only", detail=False)
        summary["vs_target_only"] = {
            "tps": base.pooled_tps(),
            "speedup": (summary["tps"] / base.pooled_tps())
            if summary["tps"] and base.pooled_tps()
            else None,
            "windows": slowdowns(run.window_tps(), base.window_tps()),
        }
    wtps = run.window_tps()
    timed = [v for v in wtps if v is not None]
    summary["cdf"] = [list(p) for p in cdf(timed)] if timed else []
    per_window = _per_window(windows, run, wtps, spans)
    inputs = {"profile": _ref(profile_path), "traces": _trace_refs(traces_path)}
    if deployment_path is not None:
        inputs["deployment"] = _ref(deployment_path)
    return {
        "schema": REPORT_SCHEMA,
        "version": REPORT_VERSION,
        "method": method,
        "configs": [s.label for s in run.specs],
        "align": align if any(s.decoupled for s in run.specs) else None,
        "split": split,
        "profile": {"device": profile.device.get("name", ""), "synthetic": profile.synthetic},
        "inputs": inputs,
        "summary": summary,
        "windows": per_window,
    }


def select_report(
    profile_path: str | Path,
    traces_path: str | Path | Sequence[str | Path],
    *,
    sources: Sequence[str] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    settings: Sequence[MethodSpec] = (AS2D,),
    tolerance: float = 0.01,
    processes: int | None = None,
    executor: Executor | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[Selection, dict]:
    """Run the selection on the traces' dev and val splits; return it and its report.
    ``settings``: As²d's settings the catalog spans (:func:`select_budget`)."""
    if not 0.0 <= tolerance < 1.0:
        raise UserError(f"--tolerance {tolerance}: give a fraction in [0, 1), e.g. 0.01 for 1 %")
    if processes is not None and processes < 1:
        raise UserError(f"--processes {processes}: give at least 1")
    profile, traces = load_inputs(profile_path, traces_path)
    for st in settings:
        if st.batch < 1 or (st.threshold is not None and not 0.0 <= st.threshold <= 1.0):
            raise UserError(
                f"--batch {st.batch} / --threshold {st.threshold}: give a batch >= 1 and a threshold in [0, 1]"
            )
    sel = select_budget(
        traces,
        profile,
        sources=sources,
        budgets=budgets,
        settings=settings,
        tolerance=tolerance,
        processes=processes,
        executor=executor,
        progress=progress,
    )
    report = {
        "schema": SELECTION_SCHEMA,
        "version": SELECTION_VERSION,
        "profile": {"device": profile.device.get("name", ""), "synthetic": profile.synthetic},
        "inputs": {"profile": _ref(profile_path), "traces": _trace_refs(traces_path)},
        **sel.to_json(),
    }
    return sel, with_target_only(report, sel, traces, profile)


def with_target_only(report: dict, sel: Selection, traces: TraceSet, profile: CostProfile) -> dict:
    """``report`` with target-only's pooled TPS on the dev windows the catalog was ranked on
    (``dev.target_only_tps``) and whether the selected configuration — the best of the
    catalog there — beats it (``beats_target_only``; a tie within 1e-9 does not). False:
    no As²d configuration of the catalog beat target-only on dev."""
    dev = windows_of(traces, sel.dev["split"])
    base = run_method(dev, profile, "target-only", detail=False).pooled_tps()
    out = {**report, "dev": {**report["dev"], "target_only_tps": base}}
    if base is not None:  # None: target-only took no decode time, nothing to beat
        out["beats_target_only"] = bool(sel.dev["tps"] > base * (1.0 + 1e-9))
    return out


def no_gain_note(selection: Mapping[str, Any]) -> str | None:
    """One line when the selection records that no As²d configuration beat target-only on
    dev (a deployment's ``selection``, or a selection report); None when one did or when it
    records nothing (deployments selected before it was recorded)."""
    if selection.get("beats_target_only") is not False:
        return None
    dev = selection.get("dev") or {}
    top = (selection.get("ranking_top") or selection.get("ranking") or [{}])[0]
    best = f"{top['source']}/budget {top['budget']}" if "source" in top else "the selected one"
    base = dev.get("target_only_tps")
    against = f" against target-only's {base:.2f}" if isinstance(base, (int, float)) else ""
    tps = dev.get("tps")
    at = f" {tps:.2f} TPS" if isinstance(tps, (int, float)) else ""
    return (
        f"no As²d configuration beats target-only on dev: the best, {best}, reached{at}"
        f"{against} over {dev.get('windows', '?')} dev windows; As²d is not expected to speed "
        "this device up with these sources"
    )


def catalog_axes(catalog: dict) -> str:
    """'source × budget', or with the As²d settings searched 'source × budget × threshold ×
    batch × history'."""
    axes = ["source", "budget"]
    if len(catalog.get("thresholds") or ()) > 1:
        axes.append("threshold")
    if len(catalog.get("batches") or ()) > 1:
        axes.append("batch")
    if len(catalog.get("history") or ()) > 1:
        axes.append("history")
    return " × ".join(axes)


def default_deployment_path(profile: CostProfile, root: str | Path = "calibrations") -> Path:
    """The next free deployment file of the profile's device (formats/layout.py)."""
    from as2d_cli.formats.layout import deployment_path

    return deployment_path(Path(root), str(profile.device.get("name") or "device"))


def write_selection(
    sel: Selection, report: dict, profile_path: str | Path, out: str | Path
) -> Path:
    """Write the chosen fixed configuration as an ``as2d.deployment`` file (never overwrites)."""
    profile = load_profile(profile_path)
    selection = {
        "method": f"pooled-TPS ranking of the {catalog_axes(report['catalog'])} catalog on the development split",
        "catalog": report["catalog"],
        "dev": {
            k: report["dev"][k]
            for k in ("split", "windows", "tokens", "tps", "target_only_tps")
            if k in report["dev"]
        },
        "dev_oracle_gap_percent": report["dev"]["oracle"]["gap_percent"],
        "val": report["val"],
        "retained": sel.retained,
        "traces": report["inputs"]["traces"],
        "ranking_top": report["ranking"][:5],
    }
    if "beats_target_only" in report:  # False: no configuration beat target-only on dev
        selection["beats_target_only"] = report["beats_target_only"]
    if report.get("allowed_implausible"):  # the profile failed its plausibility check
        selection["allowed_implausible"] = list(report["allowed_implausible"])
    if Path(out).exists():
        raise UserError(f"{out}: already exists and is never overwritten; pass another --out")
    dep = make_deployment(
        sel.source,
        sel.budget,
        sel.threshold,
        sel.batch,
        profile_path,
        str(profile.device.get("name", "")),
        selection,
        align=sel.align,
        history=sel.history,
    )
    return write_deployment(out, dep)
