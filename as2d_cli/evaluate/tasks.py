"""`as2d eval --task all`: the three tasks of an audio language model in one run, and the
paper's per-task table (Table 3's shape).

Each task is evaluated as `as2d eval --task T` evaluates it — its own traces
(``PAIR/traces``, ``PAIR/traces/<task>``), the deployment chosen on the profile and those
traces, every method replayed — with one profile for the three. The run writes one folder,
``<results>/<device>-<split>-tasks-<time>/``:

* ``transcribe/``, ``translate/``, ``answer/`` — each a whole `as2d eval` folder
  (``results.json``, ``table.txt``, the tidy tables, ``tables.md``, figures, its manifest);
* ``tasks.json`` — ``as2d.results`` of kind ``eval-tasks``: per task the pooled TPS of
  target-only, standard SD, SpecASR-ASP and As²d, As²d's gain over the fastest of those
  three baselines, its windows slower than target-only, the outputs checked and exact, its
  deployment and folder; the profile and the pair;
* ``table.txt`` (the table printed) and ``table3.csv`` (its unrounded values);
* ``manifest.json`` — every file above with its size and sha256, each task's own
  ``manifest.json`` among them; the folder is marked incomplete (``INCOMPLETE``) until the
  last one is written.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from as2d_cli.errors import Interrupted, UserError
from as2d_cli.evaluate.fixed import FixedEval, text_table
from as2d_cli.evaluate.run import EvalOutput, run_eval
from as2d_cli.evaluate.settings import EvalSettings
from as2d_cli.execution import Executor
from as2d_cli.formats.common import mark_complete, mark_writing, write_atomic
from as2d_cli.formats.layout import device_part, result_folder
from as2d_cli.formats.results import make_results, write_results
from as2d_cli.reporting import Progress, Say

WRITER = "as2d eval --task all"
TASK_LABELS = {"transcribe": "ASR", "translate": "Translation", "answer": "Spoken QA"}
BASELINES = ("target-only", "sd", "asp")  # what As²d's gain is measured against (the fastest)
METHODS = (*BASELINES, "as2d")
FILES = ("tasks.json", "table.txt", "table3.csv")


@dataclass
class TasksOutput:
    """The per-task run: its folder, ``tasks.json``, the table printed and each task's
    evaluation."""

    folder: Path
    results: Path
    table: str
    tasks: dict[str, EvalOutput]


def task_row(task: str, ev: FixedEval, folder: str) -> dict[str, Any]:
    """One task's figures: pooled TPS per method, As²d's gain over the fastest baseline, its
    windows slower than target-only, and the outputs checked (every replayed output of every
    method's every configuration; the replay refuses a window whose committed tokens are
    not the target's greedy output, so each one counted is exact)."""
    rows = {r["method"]: r for r in ev.table_rows()}
    tps = {m: rows[m]["tps"] for m in METHODS}
    known = {m: tps[m] for m in BASELINES if tps[m] is not None}
    fastest = max(known, key=lambda m: known[m]) if known else None
    gain = (
        100.0 * (tps["as2d"] / known[fastest] - 1.0)
        if fastest is not None and tps["as2d"] is not None and known[fastest]
        else None
    )
    checked = sum(len(rows_k) for m in METHODS for rows_k in ev.runs[m].runs)
    slower = rows["as2d"]["slower"]
    return {
        "task": task,
        "label": TASK_LABELS.get(task, task),
        "folder": folder,
        "windows": len(ev.window_ids),
        "datasets": ev.datasets,
        "tps": tps,
        "speedup": rows["as2d"]["speedup"],
        "fastest_baseline": fastest,
        "gain_percent": gain,
        "slower": slower,
        "outputs_checked": checked,
        "outputs_exact": checked,
        "deployment": {
            "source": ev.deployment.source,
            "budget": ev.deployment.budget,
            "threshold": ev.deployment.threshold,
            "batch": ev.deployment.batch,
            "history": ev.deployment.history,
        },
    }


def render_tasks_table(rows: Sequence[dict[str, Any]], split: str) -> str:
    """Table 3's shape: a row per task."""
    from as2d_cli.evaluate.fixed import LABELS

    head = [
        "task",
        "requests",
        "Target-only",
        "Standard SD",
        "SpecASR-ASP",
        "As²d",
        "×TO",
        "gain %",
        "over",
        "slower",
        "exact",
    ]

    def f(x: float | None, nd: int = 2, sign: bool = False) -> str:
        return "—" if x is None else (f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}")

    body = []
    for r in rows:
        s = r["slower"] or {}
        n = sum(int(s.get(k) or 0) for k in ("slower", "faster", "ties"))
        body.append(
            [
                r["label"],
                str(r["windows"]),
                *(f(r["tps"][m]) for m in METHODS),
                f(r["speedup"], 3),
                f(r["gain_percent"], 1, sign=True),
                LABELS.get(r["fastest_baseline"] or "", "—").split(" (")[0],
                f"{s.get('slower', 0)}/{n}",
                f"{r['outputs_exact']}/{r['outputs_checked']}",
            ]
        )
    lines = text_table(head, body)
    lines += [
        "",
        f"pooled TPS on the {split} split per task (Table 3); gain: As²d over the fastest of "
        "target-only, standard SD (K5–8 mean) and SpecASR-ASP; slower: As²d's windows slower "
        "than target-only; exact: outputs equal to the target's greedy output, of all checked "
        "(every method and configuration)",
    ]
    for r in rows:
        d = r["deployment"]
        merged = " + history candidates" if d["history"] else ""
        lines.append(
            f"{r['task']:<10}  {r['folder']}/: {d['source']}/budget {d['budget']}, threshold "
            f"{d['threshold']}, batch {d['batch']}{merged}; datasets {', '.join(r['datasets'])}"
        )
    return "\n".join(lines) + "\n"


def _derived_line(row: dict[str, Any]) -> str:
    """A task's As²d / target-only at a derived cost and at ×0.75 and ×1.25 of it."""
    s = row.get("sensitivity")
    if not s:
        return ""
    at = ", ".join(
        f"{r:.3f}× at ×{f:g}" for f, r in zip(s["factors"], s["as2d_over_target_only_scaled"]) if r
    )
    return (
        f"derived     {row['task']}: {s['cost']} = {s['value_ms']:g} ms is derived; As²d / "
        f"target-only {s['as2d_over_target_only']:.3f}× at it, {at}\n"
    )


def _csv(rows: Sequence[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(
        [
            "task",
            "requests",
            *(f"tps_{m.replace('-', '_')}" for m in METHODS),
            "as2d_over_target_only",
            "gain_percent",
            "fastest_baseline",
            "slower",
            "faster",
            "ties",
            "outputs_checked",
            "outputs_exact",
        ]
    )
    for r in rows:
        s = r["slower"] or {}
        w.writerow(
            [
                r["task"],
                r["windows"],
                *(r["tps"][m] for m in METHODS),
                r["speedup"],
                r["gain_percent"],
                r["fastest_baseline"],
                s.get("slower"),
                s.get("faster"),
                s.get("ties"),
                r["outputs_checked"],
                r["outputs_exact"],
            ]
        )
    return out.getvalue().encode("utf-8")


def run_eval_tasks(
    settings: Sequence[EvalSettings],
    *,
    say: Say = lambda s: None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> TasksOutput:
    """Each of ``settings`` (one per task: its pair carries the task) evaluated into one
    folder, then the per-task table. The profile is found once (the first task's pair; every
    task's pair is the same files) and used for every task."""
    from as2d_cli.evaluate.inputs import find_profile
    from as2d_cli.formats.profile_io import load_profile

    first = settings[0]
    if first.pair is None:
        raise UserError("--task all evaluates a model pair's three tasks; pass --models PAIR")
    profile = first.profile or find_profile(
        first.phone, first.calibrations, first.pair.identity(), first.models
    )
    prof = load_profile(profile)
    device = device_part(str(prof.device.get("name") or first.phone))
    at = time.time()
    folder = result_folder(first.results, device, f"{first.split}-tasks", at)
    tasks = [str(s.pair.effective_prompt().task) for s in settings if s.pair is not None]
    pending = [*FILES, *(f"{t}/manifest.json" for t in tasks)]
    mark_writing(
        folder, writing=WRITER, pending=pending, command=first.redo, in_place=False, files={}
    )
    outs: dict[str, EvalOutput] = {}
    try:
        for task, s in zip(tasks, settings):
            say(f"task {task}: {TASK_LABELS.get(task, task)}")
            outs[task] = run_eval(
                replace(s, profile=Path(profile), folder=folder / task),
                say=say,
                executor=executor,
                progress=progress,
            )
    except KeyboardInterrupt:
        raise Interrupted(
            f"as2d eval --task all interrupted; {folder} stays marked incomplete (its INCOMPLETE "
            f"note says so) for you to delete; run `{first.redo}` again"
        ) from None
    rows = [task_row(t, o.evaluation, t) for t, o in outs.items()]
    for row, o in zip(rows, outs.values()):  # As²d at the derived cost's other prices
        prov = json.loads(o.results.read_text(encoding="utf-8"))["results"]["provenance"]
        row["sensitivity"] = prov.get("sensitivity")
    kind = "synthetic: published costs, not measured here" if prof.synthetic else "measured"
    pair = first.pair.identity()
    table = render_tasks_table(rows, first.split) + (
        f"profile     {profile} ({prof.device.get('name')}; {kind})\n"
        f"pair        {pair['name']} ({pair['model_type']})\n"
        + "".join(_derived_line(r) for r in rows)
    )
    doc = make_results(
        "eval-tasks",
        {
            "split": first.split,
            "tasks": rows,
            "provenance": {
                "profile": {"path": str(profile), "synthetic": bool(prof.synthetic)},
                "pair": {k: pair[k] for k in ("name", "model_type", "sha256")},
            },
        },
        inputs={"profile": profile},
        device=dict(prof.device),
    )
    res = write_results(folder / "tasks.json", doc)
    write_atomic(folder / "table.txt", table.encode("utf-8"))
    write_atomic(folder / "table3.csv", _csv(rows))
    mark_complete(folder)
    return TasksOutput(folder, res, table, outs)
