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
from typing import Any

from as2d_cli.engine.methods import DEFAULT_ALIGN, MethodSpec
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
from as2d_cli.execution import Executor
from as2d_cli.formats.common import (
    MANIFEST,
    atomic_files,
    fresh_folder,
    mark_complete,
    mark_writing,
    next_free,
    safe_name,
    write_atomic,
)
from as2d_cli.formats.deployment_io import load_deployment, rules_for
from as2d_cli.formats.profile_io import load_profile
from as2d_cli.formats.results import input_ref, make_results, write_results
from as2d_cli.models.prompting import PromptSpec
from as2d_cli.reporting import Progress, Say
from device_agents.identity import results_stem

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


def run_eval(
    phone: str,
    *,
    profile: Path | None = None,
    traces: Path | None = None,
    deployment: Path | None = None,
    split: str = "test",
    calibrations: Path = Path("calibrations"),
    results: Path = Path("results"),
    say: Say = lambda s: None,
    models: Path | None = None,
    prompt: PromptSpec | None = None,
    allow_unconfirmed: bool = False,
    align: str | None = None,
    executor: Executor | None = None,
    command: str | None = None,
    allow_implausible: bool = False,
    accept_unvalidated: bool = False,
    native: Any = None,
    figure_format: str = "png",
    progress: Progress | None = None,
) -> EvalOutput:
    """``accept_unvalidated``: use a deployment that failed its own checks — NOT retained
    on val, never checked there (selected on dev only), or selected on fewer than
    ``MIN_DEV_WINDOWS`` dev windows — and record that in the results; refused otherwise
    (inputs.require_validated). ``allow_unconfirmed`` is its older name and does the same.
    ``native``: the identity of the device the native part will measure (device_agents
    ``DeviceIdentity``): a profile found for it (no ``profile`` given) that is synthetic or
    another device's is refused before anything is written. ``align``: the alignment rules (a
    deployment selected under them is found or selected; None: a given deployment's own,
    else the default rules). ``executor``: where the catalog sweeps (oracle, a selection made
    now) run (default: the local pool). ``command``: the command line that redoes this
    evaluation, for the incomplete folder's note (default: ``as2d eval --phone PHONE``).
    ``figure_format``: the figures' format (png, pdf or svg). ``progress`` hears of each
    selection sweep, method replay and the oracle sweep as it starts.

    Ctrl-C becomes :class:`~as2d_cli.errors.Interrupted`, saying whether a folder was begun
    (it stays marked incomplete) and what to run."""
    redo = command or f"as2d eval --phone {phone}"
    with _nothing_written_yet(results, redo):
        pair = _pair(models, prompt)
        profile_path = profile or find_profile(phone, calibrations, pair, models)
        prof = load_profile(profile_path, check=True, allow_implausible=allow_implausible)
        if native is not None and profile is None:
            refuse_foreign_profile(prof, Path(profile_path), native, phone)
        accept = accept_unvalidated or allow_unconfirmed
        files = trace_files(
            traces
            if traces is not None or models is None
            else pair_traces(Path(models), (prompt or PromptSpec()).task)
        )
        ts = load_trace_files(files)
        check_pair(
            prof,
            ts,
            str(files[0]) if len(files) == 1 else f"the traces in {files[0].parent}",
            pair,
            models is not None,
        )
        if not any(w.split == split for w in ts.windows):
            raise UserError(f"the traces hold no {split!r} windows; pass traces with that split")
        device = safe_name(str(prof.device.get("name") or phone), "device")
        candidates = (
            []
            if deployment is not None
            else deployment_candidates(
                profile_path, device, calibrations, files, align or DEFAULT_ALIGN
            )
        )
        dep_path = deployment or (candidates[0][0] if candidates else None)
        selected_now = False
        if dep_path is None and not accept and not any(w.split == "val" for w in ts.windows):
            raise UserError(
                "no deployment chosen on this profile and these traces yet, and the traces hold no 'val' "
                f"windows to confirm a new selection on; pass traces with val windows (or "
                f"{ACCEPT_FLAG}, or --allow-unconfirmed, to select on dev only)"
            )
        n_dev = sum(w.split == "dev" for w in ts.windows)
        if dep_path is None and not accept and 0 < n_dev < MIN_DEV_WINDOWS:
            raise UserError(
                f"no deployment chosen on this profile and these traces yet, and the traces hold "
                f"{n_dev} dev windows, fewer than the {MIN_DEV_WINDOWS} a selection is trusted on; "
                f"pass traces with at least {MIN_DEV_WINDOWS} dev windows (or {ACCEPT_FLAG} to "
                "select on these anyway)"
            )
        if dep_path is None:
            from as2d_cli.replay.report import with_target_only, write_selection
            from as2d_cli.replay.selection import select_budget

            say(
                f"no deployment chosen on {profile_path} yet: selecting one on the dev/val splits first"
            )
            setting = MethodSpec("as2d", align=align or DEFAULT_ALIGN)
            sel = select_budget(
                ts,
                prof,
                settings=[setting],
                executor=executor,
                progress=None
                if progress is None
                else (lambda lab, d, t: progress(f"selecting: {lab}", d, t)),
            )
            if sel.retained is False and not accept:  # refused before the deployment is written
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
                "inputs": {"traces": [input_ref(f) for f in files]},
            }
            report = with_target_only(report, sel, ts, prof)
            if prof.allowed_implausible:
                report["allowed_implausible"] = list(prof.allowed_implausible)
            out = next_free(calibrations / device / "deployment.yaml")
            out.parent.mkdir(parents=True, exist_ok=True)
            dep_path = write_selection(sel, report, profile_path, out)
            selected_now = True
            say(f"selected {sel.source}/budget {sel.budget}; deployment written to {dep_path}")
        dep = load_deployment(dep_path, profile=profile_path)
        rules_for(dep, align, dep_path)
        failures = require_validated(
            Path(dep_path),
            dep.selection,
            given=deployment is not None,
            candidates=candidates,
            accept=accept,
        )
        say(describe_deployment(Path(dep_path), dep.source, dep.budget, dep.selection))
        if failures:
            flag = ACCEPT_FLAG if accept_unvalidated else "--allow-unconfirmed"
            say(
                f"warning: {dep_path} was {' and '.join(failures)}; used anyway ({flag}), "
                "as the results record"
            )
        say(f"replaying every method over the {split} split with {profile_path}")
        ev = evaluate_fixed(ts, prof, dep, split=split, executor=executor, progress=progress)
        sensitivity = derived_sensitivity(ts, prof, dep, split=split)
    at = time.time()
    prov = provenance(prof, Path(profile_path), dep, Path(dep_path), files, ts, failures)
    if sensitivity is not None:  # a derived cost priced this table: say so, and how much it matters
        prov["profile"]["derived"] = {sensitivity["cost"]: sensitivity["derived"]}
        prov["sensitivity"] = sensitivity
    from as2d_cli.replay.report import no_gain_note

    note = no_gain_note(dep.selection)  # said above the table
    table = ("" if note is None else f"{note}\n\n") + render_table(ev) + render_provenance(prov)
    inputs = {
        "profile": profile_path,
        "deployment": dep_path,
        **{f"traces{i}": f for i, f in enumerate(files)},
    }
    # results.json names its manifest: without one beside it the folder was damaged
    doc = make_results(
        "eval",
        {**ev.to_json(), "provenance": prov, "manifest": MANIFEST},
        inputs=inputs,
        device=dict(prof.device),
    )
    folder = fresh_folder(results / results_stem(device, split, at))
    try:
        mark_writing(
            folder,
            writing=WRITER,
            pending=eval_files(figure_format),
            command=redo,
            in_place=False,
            files={},
        )
        res_path = write_results(folder / "results.json", doc)
        write_atomic(folder / "table.txt", table.encode("utf-8"))
        from as2d_cli.evaluate.tables import run_columns, write_tables
        from as2d_cli.figures import date_text

        with atomic_files(folder) as scratch:  # the tidy tables, each moved in when written
            write_tables(ev, {w.id: w for w in ts.windows}, scratch, run=run_columns(prov))
        plot = plot_cdf(
            ev,
            folder / "cdf",
            f"{device} · profile {Path(profile_path).name} · {dep.source}/b{dep.budget} · {date_text(at)}",
            (figure_format,),
        )[0]
        from as2d_cli.evaluate.report import load_report, render_report

        # tables.md and its CSVs, datasets, rk: the paper's tables and figures, from the files
        render_report(folder, *load_report(folder), formats=(figure_format,), cdf=False)
        mark_complete(folder)
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
    return EvalOutput(
        folder, res_path, table, plot, ev, Path(dep_path), selected_now, Path(profile_path)
    )


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
        f"batch {d['batch']}; {val})\n"
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
    models: Path | None = None,
    prompt: PromptSpec | None = None,
) -> None:
    """The profile ``run_eval`` would find for ``phone`` (no ``--profile``: a farm's
    phones), refused when it is synthetic or another device's
    (:func:`refuse_foreign_profile`)."""
    path = find_profile(phone, calibrations, _pair(models, prompt), models)
    refuse_foreign_profile(load_profile(path), Path(path), identity, phone)


def _pair(models: Path | None, prompt: PromptSpec | None) -> dict | None:
    """The identity of the model pair ``models`` (None: the bundled pair)."""
    if models is None:
        return None
    from as2d_cli.models.bundle import load_bundle

    return load_bundle(models, check_hashes=False, prompt=prompt).identity()
