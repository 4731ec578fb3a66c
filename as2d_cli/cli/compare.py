"""`as2d compare RUN_A RUN_B`: two evaluations of the same windows, with significance."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        run_a: Path = typer.Argument(..., help="The first evaluation folder (`as2d eval` wrote it)."),
        run_b: Path = typer.Argument(..., help="The second evaluation folder, over the same windows."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table."),
        resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples of the pooled ratio."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed (the same seed gives the same interval)."),
        native: bool = typer.Option(False, "--native", help="Compare the runs' native measurements (`eval --native`) instead of their replays."),
    ) -> None:
        """Per method and dataset: pooled TPS of both runs, B/A, Wilcoxon p and bootstrap CI."""
        from as2d_cli.errors import UserError
        from as2d_cli.evaluate.compare import compare_runs, render_compare

        if resamples < 100:
            raise UserError(f"--resamples {resamples}: give at least 100")
        res = compare_runs(run_a, run_b, resamples=resamples, seed=seed, native=native)
        if as_json:
            typer.echo(json.dumps(res, allow_nan=False))
        else:
            typer.echo(render_compare(res, markdown), nl=False)
