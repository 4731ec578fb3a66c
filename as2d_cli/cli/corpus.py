"""`as2d corpus list`: the bundled evaluation windows."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console, JustifyMethod
from rich.table import Table

from as2d_cli.cli import options
from as2d_cli.cli.groups import subcommands
from as2d_cli.cli.paths import folder_in_option
from as2d_cli.corpus.manifest import load_corpus


def list_windows(
    split: str | None = typer.Option(None, "--split", help="dev, val or test (default: all)."),
    as_json: bool = options.as_json("Print a JSON list instead of a table."),
    corpus_dir: Path | None = options.path(
        None, "--corpus", folder_in_option, "A corpus directory (default: bundled)."
    ),
) -> None:
    """List windows: id, setting, language, seconds, split."""
    corpus = load_corpus(corpus_dir)
    windows = corpus.split(split)
    rows = [
        {
            "id": w.id,
            "setting": w.setting,
            "language": w.language,
            "seconds": w.seconds,
            "split": w.split,
        }
        for w in windows
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table(show_edge=False, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("id", "left"),
        ("setting", "left"),
        ("language", "left"),
        ("seconds", "right"),
        ("split", "left"),
    )
    for col, just in columns:
        table.add_column(col, justify=just)
    for w in windows:
        table.add_row(w.id, w.setting, w.language, f"{w.seconds:.2f}", w.split)
    console = Console(width=100, highlight=False)
    console.print(table)
    console.print(f"{len(windows)} windows, {sum(w.seconds for w in windows) / 60:.1f} min")


def register(app: typer.Typer) -> None:
    subcommands(
        app, "corpus", "The bundled speech corpus (evaluation windows).", {"list": list_windows}
    )
