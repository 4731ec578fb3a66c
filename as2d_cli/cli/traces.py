"""`as2d traces build`: real-model traces of the corpus for replay, selection and evaluation."""

from __future__ import annotations

from pathlib import Path

import typer

from as2d_cli.cli import options
from as2d_cli.cli.groups import PROMPT, grouped, subcommands
from as2d_cli.cli.paths import file_target_option
from as2d_cli.cli.progress import Steps
from as2d_cli.models.prompting import PromptSpec


@grouped(prompt=PROMPT)
def build(
    split: str = typer.Option(..., "--split", help="dev, val or test."),
    out: Path | None = options.out_folder(
        None,
        "Output file (default: the bundled traces folder).",
        callback=file_target_option,
    ),
    processes: int | None = options.processes(
        "Worker processes (default: one per CPU; with --ray local, Ray's CPUs)."
    ),
    ray: str | None = options.ray(),
    limit: int | None = options.limit(
        None, "--limit", help="Only the first N windows (a quick look)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing output file."),
    models: Path | None = options.models(),
    prompt: PromptSpec = PromptSpec(),
    max_tokens: int | None = options.limit(
        None, "--max-tokens", help="Cap each window's reference (default: the target's limit)."
    ),
    quiet: bool = options.quiet(),
) -> None:
    """Run the target, the sources and the drafter over a corpus split (resumable)."""
    pair = options.model_pair(models, prompt)  # loaded once; refused before any work
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.evaluate.inputs import ASSET_TRACES, pair_traces
    from as2d_cli.execution import open_executor
    from as2d_cli.tracegen.build import build_traces, check_out

    load_corpus().split(
        split
    )  # an unknown split: its one-line error before the progress bar starts
    folder = pair_traces(pair) if pair is not None else ASSET_TRACES
    path = out or folder / f"{split}.jsonl.gz"
    check_out(path, force)  # before a Ray instance starts
    with open_executor(ray, processes) as executor, Steps(f"tracing {split}", quiet=quiet) as steps:

        def progress(n: int, total: int, wid: str) -> None:
            steps.update(wid, n, total)

        written = build_traces(
            split,
            path,
            pair=pair,
            processes=processes,
            limit=limit,
            progress=progress,
            force=force,
            max_tokens=max_tokens,
            executor=executor,
        )
    typer.echo(f"wrote {written}")


def register(app: typer.Typer) -> None:
    subcommands(app, "traces", "Build and inspect as2d.trace files.", {"build": build})
