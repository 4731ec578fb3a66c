"""`as2d models import` and `as2d models check`: bring your own model pair."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.groups import PROMPT, grouped, subcommands
from as2d_cli.cli.paths import folder_in_option, folder_new_option
from as2d_cli.models.prompting import TASKS, PromptSpec


def import_(
    target: Path = options.path(
        ...,
        "--target",
        folder_in_option,
        "The target's export folder: Whisper (optimum-cli layout, flat or onnx/) or an audio LLM (ONNX-community layout).",
    ),
    drafter: Path = options.path(
        ...,
        "--drafter",
        folder_in_option,
        "The drafter's export folder (another tokenizer than the target's drafts through text).",
    ),
    out: Path = options.out_folder(
        ...,
        "The pair folder to write (never overwritten).",
        callback=folder_new_option,
    ),
    ctc: Path | None = options.path(
        None,
        "--ctc",
        folder_in_option,
        "A CTC model folder (ONNX + vocabulary) as a chunked source.",
    ),
    variant: str | None = typer.Option(
        None, "--variant", help="The target's file variant (quantized, int8, q4, fp16…)."
    ),
    drafter_variant: str | None = typer.Option(
        None, "--drafter-variant", help="The drafter's file variant."
    ),
    copy: bool = typer.Option(
        False, "--copy", help="Copy the ONNX files into the pair (default: reference them)."
    ),
    name: str | None = typer.Option(
        None, "--name", help="The pair's name (default: the folder's)."
    ),
    task: str = options.one_of(
        "transcribe",
        "--task",
        choices=TASKS,
        help="The pair's default task: transcribe, translate or answer (answer: audio LLM targets).",
    ),
    drafter_reads_target_encoder: bool = typer.Option(
        False,
        "--drafter-reads-target-encoder",
        help="The drafter reads the target's encoder states (a distilled drafter that kept its teacher's encoder; an audio LLM whose audio encoder file is the target's): one encoder pass per request.",
    ),
) -> None:
    """Validate a target and drafter export and write a pair folder with its manifest."""
    from as2d_cli.models.pair import import_pair

    err = Console(stderr=True)
    say = (
        (lambda m: err.print(f"[dim]{m}[/]")) if err.is_terminal else None
    )  # off a terminal: only the result
    path = import_pair(
        target,
        drafter,
        out,
        ctc=ctc,
        variant=variant,
        drafter_variant=drafter_variant,
        copy=copy,
        name=name,
        task=task,
        progress=say,
        drafter_reads_target_encoder=drafter_reads_target_encoder,
    )
    manifest = json.loads((path / "models.json").read_text(encoding="utf-8"))
    parts = ", ".join(
        f"{k}: {v['kind']} {v.get('layout', '')} {v.get('variant') or ''}".strip()
        for k, v in manifest["models"].items()
    )
    Console().print(
        f"imported pair [bold]{manifest['name']}[/] into {path} ({parts}); "
        f"next: as2d models check {path}"
    )


@grouped(prompt=PROMPT)
def check(
    pair: Path | None = typer.Argument(
        None, help="The pair folder or a shipped pair's name (default: the bundled pair)."
    ),
    windows: int = options.count(2, "--windows", help="Development windows to decode."),
    reps: int = options.count(3, "--reps", help="Timed repetitions per width."),
    prompt: PromptSpec = PromptSpec(),
    as_json: bool = options.as_json(),
) -> None:
    """Load a pair, decode a few windows, check K-wide = sequential (K=1..16) and rollback, time each width."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.models.check import check_pair, render_check
    from as2d_cli.models.model_pair import load_pair
    from as2d_cli.models.shipped import resolve_models

    folder = None if pair is None else resolve_models(pair)  # a shipped pair's name too
    loaded = load_pair(folder, prompt=prompt)  # every file against its hash, the prompt checked
    chosen = load_corpus().split("dev")[:windows]
    err = Console(stderr=True)
    say = (lambda m: err.print(f"[dim]{m}[/]")) if err.is_terminal else None
    res = check_pair(loaded, chosen, reps=reps, progress=say)
    if as_json:
        typer.echo(json.dumps(res))
    else:
        Console(highlight=False, soft_wrap=True).print(render_check(res), markup=False)
    if not res["ok"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    subcommands(
        app,
        "models",
        "Import and check model pairs (your own Whisper-family ONNX exports).",
        {"import": import_, "check": check},
    )
