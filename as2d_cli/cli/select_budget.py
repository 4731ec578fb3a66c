"""`as2d select-budget`: pick one fixed source/budget on dev traces, confirm it on val,
write it as a deployment file (files only, no device needed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_out_option


def select_budget(
    profile: Path = options.profile(..., checked=False),
    traces: list[Path] = options.traces(
        ...,
        "Trace file(s) holding the dev and val windows; repeat to merge files (e.g. a dev and a val file).",
    ),
    sources: str | None = typer.Option(
        None,
        "--sources",
        help="Comma-separated sources to search (default: every trace source the profile has costs for).",
    ),
    budgets: str | None = options.budget_list(
        None,
        "--budgets",
        help=f"Budgets to search, e.g. 1-8,12 (each {options.MIN_BUDGET}-{options.MAX_BUDGET} and measured by the profile; default: those of {options.MIN_BUDGET}-{options.MAX_BUDGET} the profile's widths allow).",
    ),
    tolerance: float = options.fraction(
        0.01,
        "--tolerance",
        help="Validation retention: chosen TPS within this fraction of the val best.",
    ),
    processes: int | None = options.processes(
        "Worker processes (default: usable CPUs; with --ray local, Ray's CPUs)."
    ),
    ray: str | None = options.ray(),
    out: Path | None = options.out_folder(
        None,
        "Deployment file (default: calibrations/<device>/deployment.yaml, or -2, -3… if taken).",
        callback=file_out_option,
    ),
    as_json: bool = options.as_json("Print the machine-readable selection report."),
    threshold: str | None = options.fraction_list(
        None,
        "--threshold",
        help="As²d's confidence stop for the whole catalog (default: the methods' default), or a comma list to search, e.g. 0.4,0.6,0.7; the chosen one goes into the deployment.",
    ),
    batch: str | None = options.count_list(
        None,
        "--batch",
        help="The source's publication batch for the whole catalog (default: the methods' default), or a comma list to search, e.g. 1,2,8.",
    ),
    align: str | None = options.align("the whole catalog, recorded in the deployment."),
    history: str | None = options.switch_list(
        None,
        "--history",
        help="History candidates merged into As²d's source stream (docs/engine.md): off, on, "
        "or off,on to let the selection decide (default: off,on; off under --align paper or "
        "when --sources names only the paper's sources).",
    ),
    allow_implausible: bool = options.allow_implausible(),
    quiet: bool = options.quiet(),
) -> None:
    """Select the fixed As²d configuration (source × budget) by pooled dev TPS."""
    search = _search(profile, sources, budgets, threshold, batch, align, history, allow_implausible)
    sel, rep = _sweep(search, traces, tolerance, processes, ray, quiet)
    written = _write(search, sel, rep, out)
    options.warn_implausible(profile, search.prof)
    _report(sel, rep, written, as_json)


@dataclasses.dataclass(frozen=True)
class _Search:
    """One selection's search, built once from the options."""

    profile: Path
    prof: Any  # the profile loaded, its plausibility checked
    sources: list[str] | None  # None: every trace source the profile has costs for
    settings: list[Any]  # the catalog's MethodSpecs
    budgets: list[int]


def _search(
    profile: Path,
    sources: str | None,
    budgets: str | None,
    threshold: str | None,
    batch: str | None,
    align: str | None,
    history: str | None,
    allow_implausible: bool,
) -> _Search:
    """The options parsed and checked before any sweep: the catalog, then the profile's
    plausibility (select_report reads its format again), then the budgets it measured."""
    from as2d_cli.formats.profile_io import load_profile

    srcs = [s.strip() for s in sources.split(",") if s.strip()] if sources else None
    settings = _catalog(threshold, batch, align, history, srcs)
    prof = load_profile(profile, check=True, allow_implausible=allow_implausible)
    return _Search(profile, prof, srcs, settings, _budgets(budgets, prof, profile))


def _sweep(
    search: _Search,
    traces: list[Path],
    tolerance: float,
    processes: int | None,
    ray: str | None,
    quiet: bool,
) -> tuple[Any, dict[str, Any]]:
    """The selection and its report, swept in worker processes with a progress line."""
    from as2d_cli.cli.progress import Steps
    from as2d_cli.execution import open_executor
    from as2d_cli.replay.report import select_report

    with open_executor(ray, processes) as executor, Steps("sweeping", quiet=quiet) as steps:
        return select_report(
            search.profile,
            traces,
            sources=search.sources,
            budgets=search.budgets,
            settings=search.settings,
            tolerance=tolerance,
            processes=processes,
            executor=executor,
            progress=steps.update,
        )


def _write(search: _Search, sel: Any, rep: dict[str, Any], out: Path | None) -> Path:
    """The deployment file written (--out, else the profile's default path); the report
    names it and the implausibilities allowed."""
    from as2d_cli.replay.report import default_deployment_path, write_selection

    prof = search.prof
    dest = out if out is not None else default_deployment_path(prof)
    if prof.allowed_implausible:  # recorded in the deployment too (write_selection)
        rep["allowed_implausible"] = list(prof.allowed_implausible)
    written = write_selection(sel, rep, search.profile, dest)
    rep["deployment"] = str(written)
    return written


def _catalog(
    threshold: str | None,
    batch: str | None,
    align: str | None,
    history: str | None,
    sources: list[str] | None,
) -> list[Any]:
    """Every setting a list, parsed once; the catalog spans their product (llama-bench's way);
    the history axis, when not given, is the selection's default for these rules and sources."""
    from as2d_cli.engine.methods import DEFAULT_ALIGN, MethodSpec, spec_grid
    from as2d_cli.replay.selection import default_history

    rules = DEFAULT_ALIGN if align is None else align
    return spec_grid(
        MethodSpec("as2d", align=rules),
        {
            "threshold": [] if threshold is None else options.parse_fractions(threshold),
            "batch": [] if batch is None else options.parse_counts(batch),
            "history": default_history(rules, sources)
            if history is None
            else options.parse_switches(history),
        },
    )


def _budgets(budgets: str | None, prof: Any, profile: Path) -> list[int]:
    """The budgets searched: the given ones, each measured by the profile, or the default."""
    from as2d_cli.errors import UserError
    from as2d_cli.replay.sweep import DEFAULT_BUDGETS

    if budgets is None:
        return list(DEFAULT_BUDGETS)
    searched = options.parse_budgets(budgets)
    widest = prof.max_width
    unmeasured = [b for b in searched if b + 1 > widest]
    if unmeasured:
        raise UserError(
            f"--budgets {budgets}: {options.spans(unmeasured)} need widths up to K{max(unmeasured) + 1}, "
            f"but {profile} measured up to K{widest}; pass budgets up to {widest - 1}"
        )
    return searched


def _report(sel: Any, rep: dict[str, Any], written: Path, as_json: bool) -> None:
    """The notes on stderr, then the report as JSON or as lines."""
    from as2d_cli.evaluate.inputs import ACCEPT_FLAG, validation_failures
    from as2d_cli.replay.report import no_gain_note

    note = no_gain_note(rep)  # recorded in the deployment (selection.beats_target_only)
    failures = validation_failures({**rep, "retained": sel.retained})
    if failures:  # `as2d eval` refuses it without the override
        typer.echo(
            f"note: this deployment was {' and '.join(failures)}; `as2d eval` uses it only "
            f"with {ACCEPT_FLAG}",
            err=True,
        )
    if as_json:
        if note is not None:
            typer.echo(note, err=True)
        typer.echo(json.dumps(rep, indent=1, allow_nan=False))
        return
    c = Console(width=110, highlight=False)
    dev = rep["dev"]
    cat = rep["catalog"]
    several = len(cat["thresholds"]) * len(cat["batches"]) > 1
    # the history axis searched, or history candidates asked for alone: say which was chosen
    hist = len(cat["history"]) > 1 or sel.history
    chosen = (f", threshold {sel.threshold}, batch {sel.batch}" if several else "") + (
        _history(sel.history, ", ") if hist else ""
    )
    c.print(
        f"selected {sel.source} / budget {sel.budget} (K ≤ {sel.budget + 1}){chosen}: {dev['tps']:.2f} TPS pooled over "
        f"{dev['windows']} dev windows ({cat['configurations']} configurations)"
    )
    c.print(
        f"dev oracle {dev['oracle']['tps_oracle']:.2f} TPS, gap {dev['oracle']['gap_percent']:.2f}%"
    )
    _print_val(c, rep["val"], several, hist)
    if note is not None:
        c.print(note, soft_wrap=True)
    dropped = rep["catalog"].get("dropped_budgets") or []
    if dropped:
        c.print(
            f"budgets {options.spans(dropped)} left out: the profile lacks some of their widths"
        )
    for r in rep["ranking"][:5]:
        setting = (f" threshold {r['threshold']} batch {r['batch']:>2}" if several else "") + (
            _history(r["history"], " ") if hist else ""
        )
        c.print(f"  {r['source']:>12} budget {r['budget']:>2}{setting}: {r['tps']:.3f}")
    c.print(f"wrote {written}")


def _history(on: bool, sep: str) -> str:
    return f"{sep}history {'on' if on else 'off'}"


def _print_val(c: Console, v: dict[str, Any] | None, several: bool, hist: bool) -> None:
    if v is None:
        c.print("no val windows in the traces: retention not checked")
        return
    verdict = "retained" if v["retained"] else "NOT retained"
    vb = v["best"]
    vset = (f" threshold {vb['threshold']} batch {vb['batch']}" if several else "") + (
        _history(vb["history"], " ") if hist else ""
    )
    c.print(
        f"val: {v['tps']:.2f} TPS, rank {v['rank']} (best {vb['source']}/budget {vb['budget']}{vset} "
        f"{v['best']['tps']:.2f}); {verdict} at tolerance {100 * v['tolerance']:.1f}%"
    )


def register(app: typer.Typer) -> None:
    app.command("select-budget")(select_budget)
