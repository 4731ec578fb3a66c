"""`as2d stream`: pace a recording through a resident runner in blocks (paper D.6.2)."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.groups import MEASURE, PROMPT, grouped, variant
from as2d_cli.cli.paths import file_in_option
from as2d_cli.engine.methods import DEFAULT_BUDGET
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

METHODS = ("as2d", "target-only", "sd")
LIFETIMES = ("arrival", "consumption")


@grouped(prompt=PROMPT, measure=variant(MEASURE, drop=("settle",)))
def stream(
    phone: str = options.phone(),
    audio: Path | None = options.path(
        None,
        "--audio",
        file_in_option,
        "A 16 kHz mono recording (any file soundfile reads); default: the bundled corpus's "
        "English read speech joined end to end.",
    ),
    minutes: float | None = options.positive(
        None, "--minutes", help="Stream length in minutes (default: 10, or all of --audio)."
    ),
    block_s: float = options.positive(4.0, "--block-s", help="Block interval and length (s)."),
    context_s: float = options.positive(
        12.0, "--context-s", help="Audio and text context kept before a reset (s)."
    ),
    method: str = options.one_of("as2d", "--method", choices=METHODS, help="Decoding method."),
    budget: int | None = options.budget(
        None,
        "--budget",
        help=f"As²d proposal budget b (physical K <= b+1; default {DEFAULT_BUDGET}).",
    ),
    source: str | None = options.source(
        "As²d's source (default drafter); history: the committed output's own repeats, no "
        "producer.",
        choices=("drafter", "lookahead", "ctc", "history"),
    ),
    history: bool = options.history(),
    lifetime: str = options.one_of(
        "arrival",
        "--source-lifetime",
        choices=LIFETIMES,
        help="When a block's source epoch stops: one block after its arrival, or when the "
        "target has consumed the block.",
    ),
    check: bool = typer.Option(
        False, "--check", help="Afterwards, re-run target-only on every block and compare."
    ),
    out: Path = options.out_folder(
        Path("results"), "Results folder (a fresh <device>-stream-<time>/ is made inside)."
    ),
    models: Path | None = options.models(),
    prompt: PromptSpec = PromptSpec(),
    measure: MeasureOptions = MeasureOptions(),
    adb_port: int | None = options.adb_port(),
    figure_format: str = options.figure_format(),
    quiet: bool = options.quiet(),
) -> None:
    """Stream a recording in real time through resident models; report lag, RTF, throughput."""
    from as2d_cli.engine.methods import check_method_options
    from device_agents.measurement import prepare

    # Options the method does not have, before anything else (one check for every command).
    check_method_options(
        method,
        budget=budget,
        source=source,
        history=history,
        methods=METHODS,
        offers=("--budget", "--source", "--history"),
    )
    pair = _checked_pair(models, prompt, block_s, context_s)  # loaded once, before any work
    m = prepare(phone, measure, adb_port=adb_port)
    settings, label = _settings(
        method, budget, source, history, block_s, context_s, lifetime, check
    )
    run = _Run(m, settings, label, pair, figure_format)
    folder, outcome, doc, late = _stream(run, audio, minutes, out, quiet)
    _report(folder, outcome, doc, late)


def _settings(
    method: str,
    budget: int | None,
    source: str | None,
    history: bool,
    block_s: float,
    context_s: float,
    lifetime: str,
    check: bool,
) -> tuple[dict[str, Any], str]:
    """The runner's stream settings, and the method's label (As²d's with its source)."""
    from as2d_cli.stream.run import settings_for

    budget_ = DEFAULT_BUDGET if budget is None else budget
    source_ = source or "drafter"
    settings = settings_for(
        method,
        budget=budget_,
        block_s=block_s,
        context_s=context_s,
        lifetime=lifetime,
        source=source_,
        check=check,
        history=history,
    )
    extra = " + history" if history and source_ != "history" else ""
    label = f"As²d ({source_}{extra}, b{budget_})" if method == "as2d" else method
    return settings, label


def _checked_pair(
    models: Path | None, prompt: PromptSpec, block_s: float, context_s: float
) -> ModelPair | None:
    """The pair loaded with its prompt settings (None: the bundled pair), and the block sizes,
    refused before any work."""
    from as2d_cli.errors import UserError

    pair = options.model_pair(models, prompt)
    if prompt.task == "answer" and prompt.question is None and prompt.text is None:
        raise UserError(
            "--task answer on a stream needs --question TEXT (a stream's blocks carry no question)"
        )
    if context_s < block_s:
        raise UserError(
            f"--context-s {context_s:g} is shorter than --block-s {block_s:g}; "
            "the context holds at least one block"
        )
    return pair


@dataclasses.dataclass(frozen=True)
class _Run:
    """One stream's settings, built once from the options."""

    m: Any  # the device_agents Measurement
    settings: dict[str, Any]
    label: str
    pair: ModelPair | None  # None: the bundled pair
    figure_format: str


def _stream(
    run: _Run, audio: Path | None, minutes: float | None, out: Path, quiet: bool
) -> tuple[Path, Any, dict[str, Any], list[int]]:
    """The stream into a fresh folder (marked incomplete until stream.json is written),
    then its files; a folder that got no block is removed."""
    from as2d_cli.formats.layout import result_folder
    from as2d_cli.launch.host import open_runner
    from as2d_cli.stream.recording import corpus_recording, file_recording
    from as2d_cli.stream.results import mark_incomplete, write_stream
    from as2d_cli.stream.run import StreamHooks, run_stream

    m = run.m
    recording = (
        file_recording(audio, minutes) if audio is not None else corpus_recording(minutes or 10.0)
    )
    command = shlex.join(["as2d", "stream", *sys.argv[2:]])
    folder = result_folder(out, m.identity.name, "stream", time.time())
    mark_incomplete(folder, command)  # until stream.json is written, last
    view = _LiveView(quiet)
    view.steps.note(
        f"streaming {recording.seconds / 60 if recording.seconds else 'all of'} min "
        f"({'--audio ' + str(audio) if audio else f'{len(recording.windows)} corpus windows'}) on "
        f"{m.identity.name} with {run.label} in {run.settings['block_s']:g} s blocks; results in {folder}"
    )
    try:
        outcome = run_stream(
            m,
            recording,
            run.settings,
            folder,
            pair=run.pair,
            open_runner=open_runner,
            hooks=StreamHooks(view.start, view.block, view.steps.note),
        )
    except BaseException:
        view.stop()
        _drop_if_empty(folder)  # failed before any block: no folder to delete by hand
        raise
    view.stop()
    with _ctrl_c_after() as late:  # the blocks measured are written whole first
        doc = write_stream(
            folder,
            outcome,
            settings=run.settings,
            recording=recording.to_dict(),
            measurement=m.record(),
            command=command,
            label=run.label,
            figure_format=run.figure_format,
        )
    return folder, outcome, doc, late


def _report(folder: Path, outcome: Any, doc: dict[str, Any], late: list[int]) -> None:
    """The table, then how the stream ended (an error when it did not end well)."""
    from as2d_cli.errors import DeviceError, Interrupted

    Console().print((folder / "table.md").read_text())
    kept = f"{len(outcome.blocks)} block(s) kept in {folder}"
    if outcome.interrupted:
        raise Interrupted(f"stream interrupted; {kept}")
    if late:
        raise Interrupted(f"interrupted after the stream ended; its files are written: {kept}")
    if outcome.stopped:
        raise DeviceError(f"stream stopped: {outcome.stopped}; {kept}")
    c = doc.get("check")
    if c is not None and c["equal"] != c["blocks"]:
        typer.echo(  # a warning: said with --quiet too
            f"warning: --check: {c['blocks'] - c['equal']} block(s) differ from target-only "
            f"(first: block {c['first_divergent_block']} at token {c['first_divergence']})",
            err=True,
        )


def _drop_if_empty(folder: Path) -> None:
    """Remove a stream folder that holds nothing but its INCOMPLETE note."""
    from as2d_cli.formats.common import INCOMPLETE

    if {p.name for p in folder.iterdir()} <= {INCOMPLETE}:
        (folder / INCOMPLETE).unlink(missing_ok=True)
        folder.rmdir()


@contextlib.contextmanager
def _ctrl_c_after() -> Iterator[list[int]]:
    """A Ctrl-C while the stream's files are written (about a second) takes effect once
    they are; the list says whether one came."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    old = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, old)


class _LiveView:
    """Blocks done, the current completion lag and the running RTF: a bar on a terminal,
    throttled lines elsewhere (cli/progress.Steps), nothing with --quiet."""

    def __init__(self, quiet: bool) -> None:
        from as2d_cli.cli.progress import Steps

        self.steps = Steps("stream", quiet=quiet)
        self.busy = 0.0
        self.audio = 0.0
        self.done = 0
        self.total = 0
        self.started = False

    def start(self, info: dict[str, Any]) -> None:
        self.steps.__enter__()
        self.started = True
        self.total = int(info["blocks"])
        self.steps.update("waiting for block 1", 0, self.total)

    def block(self, b: dict[str, Any]) -> None:
        if not self.started:
            return
        self.busy += b["finish_s"] - b["start_s"]
        self.audio += b["audio_end_s"] - b["audio_start_s"]
        self.done += 1
        lag = b["finish_s"] - b["arrival_s"]
        self.steps.update(
            f"lag {lag:.2f} s, queue {b['start_s'] - b['arrival_s']:.2f} s, "
            f"active RTF {self.busy / self.audio:.3f}",
            self.done,
            self.total,
        )

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.steps.__exit__(None, None, None)


def register(app: typer.Typer) -> None:
    app.command("stream")(stream)
