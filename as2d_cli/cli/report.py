"""`as2d report RUN_DIR` and `as2d plot rk PROFILE`: the paper's tables and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(run: Path = typer.Argument(..., help="An evaluation folder (`as2d eval` wrote it).")) -> None:
        """Re-render tables.md and the figures of an evaluation from its stored files, and print the tables."""
        from rich.console import Console
        from rich.markdown import Markdown

        from as2d_cli.evaluate.report import write_report

        paths = write_report(run)
        Console().print(Markdown(paths[0].read_text(encoding="utf-8")))
        typer.echo("wrote " + ", ".join(str(p) for p in paths))

    plot = typer.Typer(help="Figures from stored files.", no_args_is_help=True)
    app.add_typer(plot, name="plot")

    @plot.command("rk")
    def rk(profile: Path = typer.Argument(..., help="A cost profile (as2d.profile YAML)."),
           out: Optional[Path] = typer.Option(None, "--out", help="PNG to write (default: beside the profile, never overwritten).")) -> None:
        """Draw R(K), the per-token verification saving by width (paper Figure 8), for any profile."""
        from as2d_cli.evaluate.report import plot_rk
        from as2d_cli.formats.common import next_free

        dest = out or next_free(profile.with_name(profile.name.removesuffix(".yaml").removesuffix(".profile") + ".rk.png"))
        if out is not None and out.exists():
            from as2d_cli.errors import UserError

            raise UserError(f"{out} already exists and is never overwritten; pass another --out")
        typer.echo(f"wrote {plot_rk(profile, dest)}")
