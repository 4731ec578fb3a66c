"""`as2d compare RUN_A RUN_B`: two evaluations of the same windows, with significance."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from as2d_cli.cli import options
from as2d_cli.cli.paths import folder_in_option


def compare(
    run_a: Path = typer.Argument(
        ...,
        callback=folder_in_option,
        help="The first evaluation folder (`as2d eval` wrote it).",
    ),
    run_b: Path = typer.Argument(
        ...,
        callback=folder_in_option,
        help="The second evaluation folder, over the same windows.",
    ),
    as_json: bool = options.as_json(),
    markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table."),
    resamples: int = options.count(
        2000,
        "--resamples",
        minimum=100,
        help="Bootstrap resamples of the pooled ratio (at least 100).",
    ),
    seed: int = options.seed(
        0, "--seed", help="Bootstrap seed (the same seed gives the same interval)."
    ),
    native: bool = typer.Option(
        False,
        "--native",
        help="Compare the runs' native measurements (`eval --native`) instead of their replays.",
    ),
) -> None:
    """Per method and dataset: pooled TPS of both runs, B/A, Wilcoxon p and bootstrap CI."""
    from as2d_cli.evaluate.compare import compare_runs, render_compare

    res = compare_runs(run_a, run_b, resamples=resamples, seed=seed, native=native)
    if as_json:
        typer.echo(json.dumps(res, allow_nan=False))
    else:
        typer.echo(render_compare(res, markdown), nl=False)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
