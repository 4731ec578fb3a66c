"""`as2d report RUN_DIR` and `as2d plot rk PROFILE`: the paper's tables and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from as2d_cli.cli.paths import file_in_option, file_out_option, folder_in_option


def report(
    run: Path = typer.Argument(
        ..., callback=folder_in_option, help="An evaluation folder (`as2d eval` wrote it)."
    ),
) -> None:
    """Re-render tables.md and the figures of an evaluation from its stored files (checked
    against the folder's manifest first), and print the tables."""
    from rich.console import Console
    from rich.markdown import Markdown

    from as2d_cli.evaluate.report import write_report
    from as2d_cli.formats.common import MANIFEST

    paths = write_report(run)
    Console().print(Markdown(paths[0].read_text(encoding="utf-8")))
    typer.echo("wrote " + ", ".join(str(p) for p in paths))
    if not (run / MANIFEST).is_file():
        typer.echo(
            f"note: {run} has no {MANIFEST} (written before manifests): its files were read "
            "unverified",
            err=True,
        )


def rk(
    profile: Path = typer.Argument(
        ..., callback=file_in_option, help="A cost profile (as2d.profile YAML)."
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        callback=file_out_option,
        help="PNG to write (default: beside the profile, never overwritten).",
    ),
) -> None:
    """Draw R(K), the per-token verification saving by width (paper Figure 8), for any profile."""
    from as2d_cli.evaluate.report import plot_rk
    from as2d_cli.formats.common import next_free

    dest = out or next_free(
        profile.with_name(profile.name.removesuffix(".yaml").removesuffix(".profile") + ".rk.png")
    )
    typer.echo(f"wrote {plot_rk(profile, dest)}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)

    plot = typer.Typer(help="Figures from stored files.", no_args_is_help=True)
    app.add_typer(plot, name="plot")

    plot.command("rk")(rk)
