"""Run `as2d eval` (replay part): inputs → deployment (selected if missing) → results folder.

Writes ``results/<device>-<split>-<time>/`` with ``results.json`` (``as2d.results``, kind
``eval``), ``table.txt``, the tidy tables, ``tables.md`` and the figures; an existing folder
is never reused. Every file is written atomically; the folder is marked incomplete (its
manifest and an ``INCOMPLETE`` note naming the command that redoes it) until the last one is
written, and its ``manifest.json`` then records each file's size and sha256.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.engine.methods import DEFAULT_ALIGN, HISTORY, MethodSpec
from as2d_cli.errors import As2dError, Interrupted, UserError
from as2d_cli.evaluate.fixed import (
    FixedEval,
    derived_sensitivity,
    evaluate_fixed,
    render_table,
)
from as2d_cli.evaluate.inputs import (
    ACCEPT_FLAG,
    MIN_DEV_WINDOWS,
    check_pair,
    deployment_candidates,
    describe_deployment,
    describe_pair,
    find_profile,
    load_trace_files,
    pair_traces,
    profile_mismatch,
    require_validated,
    trace_files,
    validation_failures,
)
from as2d_cli.evaluate.report import plot_cdf
from as2d_cli.evaluate.settings import EvalSettings
from as2d_cli.execution import Executor
from as2d_cli.formats.common import (
    MANIFEST,
    atomic_files,
    fresh_folder,
    mark_complete,
    mark_writing,
    write_atomic,
)
from as2d_cli.formats.deployment_io import load_deployment, rules_for
from as2d_cli.formats.layout import deployment_path, device_part, result_folder
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.results import input_ref, make_results, write_results
from as2d_cli.reporting import Progress, Say

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

WRITER = "as2d eval"  # the writer a manifest names while the replay part writes the folder
# What the replay part writes (rk only when the profile's file is there), figures in the
# format asked for (eval_files).
EVAL_FILES = (
    "results.json",
    "table.txt",
    "per_window.csv",
    "per_window.parquet",
    "summary.csv",
    "cdf.png",
    "tables.md",
    "datasets.png",
    "rk.png",
)


def eval_files(fmt: str = "png") -> tuple[str, ...]:
    """What the replay part writes with its figures as ``fmt``."""
    from as2d_cli.evaluate.report import TABLE_FILES

    figs = tuple(n.replace(".png", f".{fmt}") for n in EVAL_FILES)
    return (*figs, *TABLE_FILES)


@dataclass
class EvalOutput:
    folder: Path
    results: Path
    table: str
    plot: Path
    evaluation: FixedEval
    deployment_path: Path
    selected_now: bool
    profile_path: Path


@dataclass
class _Inputs:
    """The checked inputs of one evaluation: profile, traces, the device's folder name."""

    profile_path: Path
    prof: Any
    files: list[Path]
    ts: Any
    device: str


@dataclass
class _Chosen:
    """The deployment an evaluation uses, and how it was found."""

    path: Path
    dep: Any
    failures: list[str]
    selected_now: bool


def run_eval(
    s: EvalSettings,
    *,
    say: Say = lambda s: None,
    executor: Executor | None = None,
    native: Any = None,
    progress: Progress | None = None,
) -> EvalOutput:
    """The replay part of ``as2d eval`` with settings ``s``. ``native``: the identity of the
    device the native part will measure (device_agents ``DeviceIdentity``): a profile found
    for it (no ``profile`` given) that is synthetic or another device's is refused before
    anything is written. ``executor``: where the catalog sweeps (oracle, a selection made
    now) run (default: the local pool). ``progress`` hears of each selection sweep, method
    replay and the oracle sweep as it starts.

    Ctrl-C becomes :class:`~as2d_cli.errors.Interrupted`, saying whether a folder was begun
    (it stays marked incomplete) and what to run."""
    with _nothing_written_yet(s.results, s.redo):
        inp = _inputs(s, native)
        chosen = _deployment(s, inp, say, executor, progress)
        say(f"replaying every method over the {s.split} split with {inp.profile_path}")
        ev = evaluate_fixed(
            inp.ts, inp.prof, chosen.dep, split=s.split, executor=executor, progress=progress
        )
        sensitivity = derived_sensitivity(inp.ts, inp.prof, chosen.dep, split=s.split)
    return _write(s, inp, chosen, ev, sensitivity)


def _inputs(s: EvalSettings, native: Any) -> _Inputs:
    """The profile and traces, checked against each other, the pair and the split."""
    pair = _identity(s.pair)
    profile_path = s.profile or find_profile(s.phone, s.calibrations, pair, s.models)
    prof = load_profile(profile_path, check=True, allow_implausible=s.allow_implausible)
    if native is not None and s.profile is None:
        refuse_foreign_profile(prof, Path(profile_path), native, s.phone)
    files = trace_files(s.traces if s.traces is not None or s.pair is None else pair_traces(s.pair))
    ts = load_trace_files(files)
    where = str(files[0]) if len(files) == 1 else f"the traces in {files[0].parent}"
    check_pair(prof, ts, where, pair, s.pair is not None)
    if not any(w.split == s.split for w in ts.windows):
        raise UserError(f"the traces hold no {s.split!r} windows; pass traces with that split")
    device = device_part(str(prof.device.get("name") or s.phone))
    return _Inputs(Path(profile_path), prof, files, ts, device)


def _deployment(
    s: EvalSettings,
    inp: _Inputs,
    say: Say,
    executor: Executor | None,
    progress: Progress | None,
) -> _Chosen:
    """The given deployment, else the newest chosen on this profile and these traces, else
    one selected now; checked against its own validation (refused unless accepted)."""
    candidates = (
        []
        if s.deployment is not None
        else deployment_candidates(
            inp.profile_path, inp.device, s.calibrations, inp.files, s.align or DEFAULT_ALIGN
        )
    )
    dep_path = s.deployment or (candidates[0][0] if candidates else None)
    selected_now = dep_path is None
    if dep_path is None:
        _refuse_selecting(s, inp)
        dep_path = _select_now(s, inp, say, executor, progress)
    dep = load_deployment(dep_path, profile=inp.profile_path)
    rules_for(dep, s.align, dep_path)
    failures = require_validated(
        Path(dep_path),
        dep.selection,
        given=s.deployment is not None,
        candidates=candidates,
        accept=s.accept,
    )
    merged = f"{dep.source}+{HISTORY}" if dep.history else dep.source  # as MethodSpec labels it
    say(describe_deployment(Path(dep_path), merged, dep.budget, dep.selection))
    if failures:
        flag = ACCEPT_FLAG if s.accept_unvalidated else "--allow-unconfirmed"
        say(
            f"warning: {dep_path} was {' and '.join(failures)}; used anyway ({flag}), "
            "as the results record"
        )
    return _Chosen(Path(dep_path), dep, failures, selected_now)


def _refuse_selecting(s: EvalSettings, inp: _Inputs) -> None:
    """No deployment yet: selecting one now needs val windows and enough dev windows,
    unless accepted."""
    if s.accept:
        return
    windows = inp.ts.windows
    if not any(w.split == "val" for w in windows):
        raise UserError(
            "no deployment chosen on this profile and these traces yet, and the traces hold no 'val' "
            f"windows to confirm a new selection on; pass traces with val windows (or "
            f"{ACCEPT_FLAG}, or --allow-unconfirmed, to select on dev only)"
        )
    n_dev = sum(w.split == "dev" for w in windows)
    if 0 < n_dev < MIN_DEV_WINDOWS:
        raise UserError(
            f"no deployment chosen on this profile and these traces yet, and the traces hold "
            f"{n_dev} dev windows, fewer than the {MIN_DEV_WINDOWS} a selection is trusted on; "
            f"pass traces with at least {MIN_DEV_WINDOWS} dev windows (or {ACCEPT_FLAG} to "
            "select on these anyway)"
        )


def _select_now(
    s: EvalSettings,
    inp: _Inputs,
    say: Say,
    executor: Executor | None,
    progress: Progress | None,
) -> Path:
    """Select a deployment on the dev/val splits and write it; returns its path."""
    from as2d_cli.replay.report import with_target_only, write_selection
    from as2d_cli.replay.selection import default_history, select_budget

    say(
        f"no deployment chosen on {inp.profile_path} yet: selecting one on the dev/val splits first"
    )
    rules = s.align or DEFAULT_ALIGN  # and history candidates searched both ways unless paper
    settings = [MethodSpec("as2d", align=rules, history=h) for h in default_history(rules, None)]
    sel = select_budget(
        inp.ts,
        inp.prof,
        settings=settings,
        executor=executor,
        progress=None
        if progress is None
        else (lambda lab, d, t: progress(f"selecting: {lab}", d, t)),
    )
    if sel.retained is False and not s.accept:  # refused before the deployment is written
        failed = " and ".join(validation_failures(sel.to_json()))
        raise UserError(
            f"the configuration selected now on the dev split ({sel.source}/budget "
            f"{sel.budget}) was {failed}; nothing was written: pass {ACCEPT_FLAG} to use "
            "it anyway (recorded in the results), or select on more dev and val windows"
        )
    report: dict[str, Any] = {
        "catalog": sel.catalog,
        "dev": sel.dev,
        "val": sel.val,
        "ranking": [r.to_json() for r in sel.ranking[:10]],
        "inputs": {"traces": [input_ref(f) for f in inp.files]},
    }
    report = with_target_only(report, sel, inp.ts, inp.prof)
    if inp.prof.allowed_implausible:
        report["allowed_implausible"] = list(inp.prof.allowed_implausible)
    out = deployment_path(s.calibrations, inp.device)
    out.parent.mkdir(parents=True, exist_ok=True)
    dep_path = write_selection(sel, report, inp.profile_path, out)
    merged = f"{sel.source}+{HISTORY}" if sel.history else sel.source
    say(f"selected {merged}/budget {sel.budget}; deployment written to {dep_path}")
    return Path(dep_path)


def _write(
    s: EvalSettings, inp: _Inputs, chosen: _Chosen, ev: FixedEval, sensitivity: Any
) -> EvalOutput:
    """The results folder: results.json, table.txt, the tidy tables, tables.md, figures."""
    from as2d_cli.replay.report import no_gain_note

    at = time.time()
    dep, dep_path = chosen.dep, chosen.path
    prov = provenance(inp.prof, inp.profile_path, dep, dep_path, inp.files, inp.ts, chosen.failures)
    if sensitivity is not None:  # a derived cost priced this table: say so, and how much it matters
        prov["profile"]["derived"] = {sensitivity["cost"]: sensitivity["derived"]}
        prov["sensitivity"] = sensitivity
    note = no_gain_note(dep.selection)  # said above the table
    table = ("" if note is None else f"{note}\n\n") + render_table(ev) + render_provenance(prov)
    inputs = {
        "profile": inp.profile_path,
        "deployment": dep_path,
        **{f"traces{i}": f for i, f in enumerate(inp.files)},
    }
    # results.json names its manifest: without one beside it the folder was damaged
    doc = make_results(
        "eval",
        {**ev.to_json(), "provenance": prov, "manifest": MANIFEST},
        inputs=inputs,
        device=dict(inp.prof.device),
    )
    folder = (
        fresh_folder(s.folder)
        if s.folder is not None
        else result_folder(s.results, inp.device, s.split, at)
    )
    with _writing(folder, s.redo):
        mark_writing(
            folder,
            writing=WRITER,
            pending=eval_files(s.figure_format),
            command=s.redo,
            in_place=False,
            files={},
        )
        res_path = write_results(folder / "results.json", doc)
        write_atomic(folder / "table.txt", table.encode("utf-8"))
        plot = _write_tables_and_figures(s, inp, chosen, ev, prov, folder, at)
        mark_complete(folder)
    return EvalOutput(
        folder, res_path, table, plot, ev, dep_path, chosen.selected_now, inp.profile_path
    )


def _write_tables_and_figures(
    s: EvalSettings,
    inp: _Inputs,
    chosen: _Chosen,
    ev: FixedEval,
    prov: dict[str, Any],
    folder: Path,
    at: float,
) -> Path:
    """The tidy tables, the CDF figure, tables.md with its CSVs and the other figures."""
    from as2d_cli.evaluate.report import load_report, render_report
    from as2d_cli.evaluate.tables import run_columns, write_tables
    from as2d_cli.figures import date_text

    with atomic_files(folder) as scratch:  # the tidy tables, each moved in when written
        write_tables(ev, {w.id: w for w in inp.ts.windows}, scratch, run=run_columns(prov))
    dep = chosen.dep
    plot = plot_cdf(
        ev,
        folder / "cdf",
        f"{inp.device} · profile {inp.profile_path.name} · {dep.source}/b{dep.budget} · "
        f"{date_text(at)}",
        (s.figure_format,),
    )[0]
    # tables.md and its CSVs, datasets, rk: the paper's tables and figures, from the files
    render_report(folder, *load_report(folder), formats=(s.figure_format,), cdf=False)
    return plot


@contextmanager
def _writing(folder: Path, redo: str) -> Iterator[None]:
    """Ctrl-C or a write error while the folder is written: one line saying what is left
    and what to run."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(
            f"as2d eval interrupted while writing {folder}{_left(folder)}; run `{redo}` again"
        ) from None
    except OSError as exc:
        what = exc.strerror or str(exc)
        raise As2dError(
            f"could not write {folder} ({what}: {exc.filename or folder}){_left(folder)}; free "
            f"the space (or fix the cause), then run `{redo}` again"
        ) from None


@contextmanager
def _nothing_written_yet(results: Path, redo: str) -> Iterator[None]:
    """Ctrl-C before the results folder is begun: one line saying so and what to run."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        raise Interrupted(
            f"as2d eval interrupted before it began a results folder in {results}; run "
            f"`{redo}` again"
        ) from None


def _left(folder: Path) -> str:
    """What an interrupted write leaves, as the rest of a sentence: an empty folder is
    removed; anything else stays, marked incomplete, for the user to delete."""
    try:
        folder.rmdir()  # only when empty
        return " (removed: nothing was in it)"
    except OSError:
        return ", which stays marked incomplete (its INCOMPLETE note says so) for you to delete"


def provenance(
    prof: Any,
    profile_path: Path,
    dep: Any,
    dep_path: Path,
    files: list[Path],
    ts: Any,
    failures: list[str] | None = None,
) -> dict[str, Any]:
    """What a table was computed from: the profile (and whether it is synthetic), the
    deployment (whether validation retained it, how many dev windows chose it, whether it
    beat target-only there, and — ``failures``, the checks it failed — whether it was used
    unvalidated), the traces and their model pair."""
    pair = ts.provenance.get("pair") or {"name": "bundled"}
    selection = dep.selection or {}
    retained = selection.get("retained")
    dev = selection.get("dev")
    dev = dev if isinstance(dev, dict) else {}
    beats = selection.get("beats_target_only")
    return {
        "profile": {
            "path": str(profile_path),
            "device": str(prof.device.get("name", "")),
            "synthetic": bool(prof.synthetic),
            "pair": (prof.device.get("pair") or {"name": "bundled"})["name"],
            **(
                {"allowed_implausible": list(prof.allowed_implausible)}
                if prof.allowed_implausible
                else {}
            ),
        },
        "deployment": {
            "path": str(dep_path),
            "source": dep.source,
            "budget": dep.budget,
            "threshold": dep.threshold,
            "batch": dep.batch,
            "history": dep.history,
            "validation_retained": retained,
            "dev_windows": dev.get("windows"),
            "beats_target_only_on_dev": beats if isinstance(beats, bool) else None,
            # used although it failed its own checks (--accept-unvalidated), and why
            "accepted_unvalidated": bool(failures),
            "validation_failures": list(failures or []),
        },
        "traces": [str(f) for f in files],
        "pair": {
            k: pair.get(k)
            for k in (
                "name",
                "model_type",
                "task",
                "language",
                "question",
                "prompt",
                "prompt_sha256",
            )
            if k in pair or k in ("name", "task", "language")
        },
    }


def render_provenance(prov: dict[str, Any]) -> str:
    p, d = prov["profile"], prov["deployment"]
    kind = "synthetic: published costs, not measured here" if p["synthetic"] else "measured"
    val = {
        True: "retained on validation",
        False: "NOT retained on validation",
        None: "not validated",
    }[d["validation_retained"]]
    if d.get("accepted_unvalidated"):
        val += "; used unvalidated"  # --accept-unvalidated (or --allow-unconfirmed)
    traces = prov["traces"]
    where = traces[0] if len(traces) == 1 else f"{len(traces)} files in {Path(traces[0]).parent}"
    out = (
        f"profile     {p['path']} ({p['device']}; {kind})\n"
        f"deployment  {d['path']} ({d['source']}/budget {d['budget']}, threshold {d['threshold']}, "
        f"batch {d['batch']}{', history candidates' if d.get('history') else ''}; {val})\n"
        f"traces      {where} (model pair {describe_pair(prov['pair'])})\n"
    )
    s = prov.get("sensitivity")
    if s is not None:
        at = ", ".join(
            f"{r:.3f}× at ×{f:g}"
            for f, r in zip(s["factors"], s["as2d_over_target_only_scaled"])
            if r
        )
        out += (
            f"derived     {s['cost']} = {s['value_ms']:g} ms is derived ({s['derived']}): "
            f"As²d / target-only {s['as2d_over_target_only']:.3f}× at it; {at}\n"
        )
    return out


def refuse_foreign_profile(prof: Any, profile_path: Path, identity: Any, phone: str) -> None:
    """Refuse, in one line, a profile found for a native evaluation that was not measured
    on the device being measured (synthetic, or another device's): its replay would report
    an expected error as agreement. ``--profile`` given explicitly runs it, labelled so."""
    why = profile_mismatch(prof, identity)
    if why is None:
        return
    raise UserError(
        f"{profile_path} is a {why}; its replay of native runs measures an expected error, "
        f"not agreement: calibrate this device first (`as2d calibrate --phone {phone}`), or "
        f"pass --profile {profile_path} explicitly to run anyway (the native report then "
        "labels the comparison an expected error)"
    )


def check_native_profile(
    phone: str,
    identity: Any,
    *,
    calibrations: Path = Path("calibrations"),
    pair: ModelPair | None = None,
) -> None:
    """The profile ``run_eval`` would find for ``phone`` and the model ``pair`` (no
    ``--profile``: a farm's phones), refused when it is synthetic or another device's
    (:func:`refuse_foreign_profile`)."""
    models = None if pair is None else pair.directory
    path = find_profile(phone, calibrations, _identity(pair), models)
    refuse_foreign_profile(load_profile(path), Path(path), identity, phone)


def _identity(pair: ModelPair | None) -> dict | None:
    """The identity of the model pair (None: the bundled pair, which records none)."""
    return None if pair is None else pair.identity()
