"""`as2d replay`: replay one method over trace files with a device cost profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_in_option, file_out_option
from as2d_cli.engine.methods import METHODS


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def replay(
    profile: Path = options.profile(..., checked=False),
    traces: list[Path] = options.traces(
        ..., "Trace file (as2d.trace JSON Lines, .jsonl or .jsonl.gz); repeat to merge files."
    ),
    method: str = typer.Option("as2d", "--method", help=f"One of: {', '.join(METHODS)}."),
    budget: int | None = options.budget(
        None,
        "--budget",
        help="As²d/w-o-TD budget (default: deployment's, else 7); ASP/w-o-BC cap (default 24 or the profile's largest width − 1).",
    ),
    source: str | None = options.source(
        "Target-decoupled source (default: deployment's, else the traces' default)."
    ),
    k: int | None = options.width(
        None, "--k", help="Standard SD: one physical width K instead of the K=5..8 mean."
    ),
    split: str | None = typer.Option(
        None, "--split", help="Replay only this split's windows (default: all)."
    ),
    deployment: Path | None = options.path(
        None,
        "--deployment",
        file_in_option,
        "Take source and budget from this deployment (checked against the profile).",
    ),
    as_json: bool = options.as_json("Print the machine-readable report (as2d.replay-report v2)."),
    align: str | None = options.align("default: the deployment's."),
    spans: bool = typer.Option(
        True,
        "--spans/--no-spans",
        help="Include each window's merged producer/verifier service spans (ns).",
    ),
    out: Path | None = options.out_folder(
        None,
        "Also store the report as an as2d.results file (never overwritten).",
        callback=file_out_option,
    ),
    allow_implausible: bool = options.allow_implausible(),
) -> None:
    """Replay a method on trace files with a phone cost profile (no device needed)."""
    from as2d_cli.engine.methods import check_method_options
    from as2d_cli.formats.profile_io import load_profile
    from as2d_cli.formats.results import make_results, write_results
    from as2d_cli.replay.report import replay_report

    check_method_options(method, budget=budget, k=k, source=source, align=align)
    # The profile's plausibility, before any replay (replay_report reads its format again).
    prof = load_profile(profile, check=True, allow_implausible=allow_implausible)
    rep = replay_report(
        profile,
        traces,
        method,
        budget=budget,
        source=source,
        k=k,
        split=split,
        deployment_path=deployment,
        spans=spans,
        align=align,
    )
    if prof.allowed_implausible:  # the override travels with the report (docs/replay.md)
        rep["allowed_implausible"] = list(prof.allowed_implausible)
    options.warn_implausible(profile, prof)
    written = None
    if out is not None:
        inputs = {"profile": profile, **{f"traces{i or ''}": t for i, t in enumerate(traces)}}
        if deployment is not None:
            inputs["deployment"] = deployment
        written = write_results(out, make_results("replay", rep, inputs=inputs))
    if as_json:
        typer.echo(json.dumps(rep, indent=1, allow_nan=False))
        return
    _print(rep, method, written)


def _print(rep: dict[str, Any], method: str, written: Path | None) -> None:
    """The per-dataset table, each configuration's accounting and the comparison with
    target-only."""
    console = Console(width=110, highlight=False)
    console.print(_table(rep, method))
    s = rep["summary"]
    for c in s["configs"]:
        a = c["accounting_ms"]
        console.print(
            f"{c['config']}: {c['tps']:.2f} TPS, {c['rounds']} rounds, accepted {c['accepted']}/{c['proposed']} "
            f"({100 * c['acceptance']:.1f}%), coverage {100 * c['coverage']:.1f}%; "
            f"D {a['D'] / 1e3:.1f}s V {a['V'] / 1e3:.1f}s O {a['O'] / 1e3:.1f}s H {a['H'] / 1e3:.1f}s"
        )
    vs = s.get("vs_target_only")
    if vs:
        sw = vs["windows"]
        console.print(
            f"vs target-only ({_f(vs['tps'])} TPS): ×{_f(vs['speedup'], '{:.3f}')}; windows faster {sw['faster']}, "
            f"slower {sw['slower']} (median loss {_f(sw['median_loss_percent'], '{:.1f}%')}, "
            f"max {_f(sw['max_loss_percent'], '{:.1f}%')}), ties {sw['ties']}"
        )
    if written is not None:
        console.print(f"wrote {written}")


def _table(rep: dict[str, Any], method: str) -> Table:
    """Windows, tokens, time and TPS per dataset and over all."""
    s = rep["summary"]
    table = Table(title=f"{method}: {', '.join(rep['configs'])}", show_edge=False, pad_edge=False)
    for col in ("dataset", "windows", "tokens", "time s", "TPS"):
        table.add_column(col, justify="left" if col == "dataset" else "right")
    by_ds: dict[str, list[dict]] = {}
    for w in rep["windows"]:
        by_ds.setdefault(w["dataset"], []).append(w)
    for ds, tps in s["tps_by_dataset"].items():
        ws = by_ds[ds]
        toks = sum(w["configs"][0]["tokens"] for w in ws)
        secs = sum(c["time_ms"] for w in ws for c in w["configs"]) / 1e3 / len(rep["configs"])
        table.add_row(ds, str(len(ws)), str(toks), f"{secs:.1f}", _f(tps))
    tot_t = sum(c["time_ms"] for c in s["configs"]) / 1e3 / len(s["configs"])
    table.add_row(
        "all",
        str(len(rep["windows"])),
        str(s["configs"][0]["tokens"]),
        f"{tot_t:.1f}",
        _f(s["tps"]),
    )
    return table


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
