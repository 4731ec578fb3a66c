"""`as2d report RUN_DIR…` and `as2d plot rk PROFILE`: the paper's tables and figures."""

from __future__ import annotations

from pathlib import Path

import typer

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_in_option, file_out_option


def report(
    runs: list[Path] = typer.Argument(
        ...,
        help="An evaluation folder (`as2d eval` wrote it), several side by side, or two or "
        "more stream folders (`as2d stream` wrote them).",
    ),
    figure_format: str | None = options.figure_format(
        None, "Figure file format: png, pdf or svg (default: all three)."
    ),
    out: Path = options.out_folder(
        Path("results"),
        "Several runs: the folder a fresh report-<time>/ is made in.",
    ),
) -> None:
    """Render the paper's tables (tables.md and a CSV each) and figures: of one evaluation
    again in its folder (checked against its manifest first), of several evaluations side by
    side (a column per phone), or of several streams overlaid (Table 16, Figure 9)."""
    from rich.console import Console
    from rich.markdown import Markdown

    from as2d_cli.errors import UserError
    from as2d_cli.figures import FORMATS
    from as2d_cli.formats.common import MANIFEST

    formats = FORMATS if figure_format is None else (figure_format,)
    for r in runs:
        if not r.is_dir():
            raise UserError(f"{r} is not a folder; give folders `as2d eval` or `as2d stream` wrote")
    streams = [(r / "stream.json").is_file() for r in runs]
    if any(streams) and not all(streams):
        raise UserError("give either evaluation folders or stream folders, not both")
    if len(set(r.resolve() for r in runs)) < len(runs):
        raise UserError("a folder is given twice; give each run once")
    if all(streams):
        if len(runs) < 2:
            raise UserError(
                f"{runs[0]} is one stream: its Table 16 and Figure 9 are in its folder; give two "
                "or more streams to set them side by side"
            )
        from as2d_cli.evaluate.stream_report import write_stream_report

        paths = write_stream_report(runs, out, formats)
    elif len(runs) > 1:
        from as2d_cli.evaluate.report import write_reports

        paths = write_reports(runs, out, formats)
    else:
        from as2d_cli.evaluate.report import write_report

        paths = write_report(runs[0], formats)
    Console().print(Markdown(paths[0].read_text(encoding="utf-8")))
    typer.echo("wrote " + ", ".join(str(p) for p in paths))
    for r in runs:
        if not all(streams) and not (r / MANIFEST).is_file():
            typer.echo(
                f"note: {r} has no {MANIFEST} (written before manifests): its files were read "
                "unverified",
                err=True,
            )


def rk(
    profile: Path = typer.Argument(
        ..., callback=file_in_option, help="A cost profile (as2d.profile YAML)."
    ),
    out: Path | None = options.out_folder(
        None,
        "Figure to write (default: PROFILE's name with .rk in the current folder, never "
        "overwritten); its suffix gives the format unless --format does.",
        callback=file_out_option,
    ),
    figure_format: str | None = options.figure_format(
        None, "Figure file format: png, pdf or svg (default: --out's suffix, else png)."
    ),
) -> None:
    """Draw R(K), the per-token verification saving by width (paper Figure 8), for any profile."""
    from as2d_cli.errors import UserError
    from as2d_cli.evaluate.report import plot_rk
    from as2d_cli.figures import FORMATS
    from as2d_cli.formats.common import next_free

    fmt = figure_format or (out.suffix.lstrip(".") if out is not None and out.suffix else "png")
    if fmt not in FORMATS:
        raise UserError(
            f"--out {out}: a {out.suffix if out else ''} figure is not one of png, pdf, svg; name it .png, .pdf or .svg"
        )
    stem = profile.name.removesuffix(".yaml").removesuffix(".profile") + ".rk"
    dest = (
        out.with_suffix(f".{fmt}")
        if out is not None
        else next_free(Path.cwd() / f"{stem}.{fmt}")  # never into the profile's (package) folder
    )
    if dest.exists():
        raise UserError(f"{dest} already exists and is never overwritten; choose another --out")
    base = dest.with_name(dest.name.removesuffix(dest.suffix))
    typer.echo(f"wrote {plot_rk(profile, base, formats=(fmt,))[0]}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)

    plot = typer.Typer(help="Figures from stored files.", no_args_is_help=True)
    app.add_typer(plot, name="plot")

    plot.command("rk")(rk)
