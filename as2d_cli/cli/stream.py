"""`as2d stream`: pace a recording through a resident runner in blocks (paper D.6.2)."""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_in_option, folder_out_option
from as2d_cli.engine.methods import DEFAULT_BUDGET

METHODS = ("as2d", "target-only", "sd")
LIFETIMES = ("arrival", "consumption")


def stream(
    phone: str = typer.Option(
        "local", "--phone", help="local, a known phone name, or an adb serial."
    ),
    audio: Path | None = typer.Option(
        None,
        "--audio",
        callback=file_in_option,
        help="A 16 kHz mono recording (any file soundfile reads); default: the bundled corpus's "
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
    source: str | None = options.one_of(
        None,
        "--source",
        choices=("drafter", "lookahead", "ctc"),
        help="As²d's source (default drafter).",
    ),
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
    out: Path = typer.Option(
        Path("results"),
        "--out",
        callback=folder_out_option,
        help="Results folder (a fresh <device>-stream-<time>/ is made inside).",
    ),
    models: Path | None = options.models(),
    task: str | None = options.task(),
    language: str | None = options.language(),
    question: str | None = options.question(),
    prompt: str | None = options.prompt_text(),
    verifier_cores: str | None = options.verifier_cores(),
    producer_cores: str | None = options.producer_cores(),
    os_placement: bool = options.os_placement(),
    rest: float | None = options.rest(),
    interval: float | None = options.interval(),
    max_temp: float | None = options.max_temp(),
    temp_sensor: str | None = options.temp_sensor(),
    adb_port: int | None = options.adb_port(),
    figure_format: str = options.figure_format(),
    quiet: bool = options.quiet(),
) -> None:
    """Stream a recording in real time through resident models; report lag, RTF, throughput."""
    from as2d_cli.engine.methods import check_method_options

    # Options the method does not have, before anything else (one check for every command).
    check_method_options(
        method, budget=budget, source=source, methods=METHODS, offers=("--budget", "--source")
    )
    budget_ = DEFAULT_BUDGET if budget is None else budget
    source_ = source or "drafter"
    spec = options.prompt_spec(task, language, question, prompt, models)  # refused before any work
    from as2d_cli.errors import DeviceError, Interrupted, UserError
    from as2d_cli.formats.common import fresh_folder
    from as2d_cli.launch.host import open_runner
    from as2d_cli.stream.recording import corpus_recording, file_recording
    from as2d_cli.stream.results import mark_incomplete, write_stream
    from as2d_cli.stream.run import run_stream, settings_for
    from device_agents.identity import results_stem
    from device_agents.measurement import MeasureOptions, prepare

    if models is not None:  # missing, empty, an export instead of a pair: named before any work
        from as2d_cli.models.bundle import check_pair_folder

        check_pair_folder(models)
    if spec.task == "answer" and spec.question is None and spec.text is None:
        raise UserError(
            "--task answer on a stream needs --question TEXT (a stream's blocks carry no question)"
        )
    if context_s < block_s:
        raise UserError(
            f"--context-s {context_s:g} is shorter than --block-s {block_s:g}; "
            "the context holds at least one block"
        )
    measure = MeasureOptions(
        rest_s=rest,
        interval_s=interval,
        max_temp_c=max_temp,
        temp_sensor=temp_sensor,
        verifier_cores=verifier_cores,
        producer_cores=producer_cores,
        os_placement=os_placement,
    )
    m = prepare(phone, measure, adb_port=adb_port)
    recording = (
        file_recording(audio, minutes) if audio is not None else corpus_recording(minutes or 10.0)
    )
    settings = settings_for(
        method,
        budget=budget_,
        block_s=block_s,
        context_s=context_s,
        lifetime=lifetime,
        source=source_,
        check=check,
    )
    label = f"As²d ({source_}, b{budget_})" if method == "as2d" else method
    command = shlex.join(["as2d", "stream", *sys.argv[2:]])
    folder = fresh_folder(out / results_stem(m.identity.name, "stream", time.time()))
    mark_incomplete(folder, command)  # until stream.json is written, last
    view = _LiveView(quiet)
    view.steps.note(
        f"streaming {recording.seconds / 60 if recording.seconds else 'all of'} min "
        f"({'--audio ' + str(audio) if audio else f'{len(recording.windows)} corpus windows'}) on "
        f"{m.identity.name} with {label} in {block_s:g} s blocks; results in {folder}"
    )
    try:
        outcome = run_stream(
            m,
            recording,
            settings,
            folder,
            models=models,
            prompt=None if spec.empty else spec,
            open_runner=open_runner,
            on_start=view.start,
            on_block=view.block,
            say=view.steps.note,
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
            settings=settings,
            recording=recording.to_dict(),
            measurement=m.record(),
            command=command,
            label=label,
            figure_format=figure_format,
        )
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
        view.steps.note(
            f"warning: --check: {c['blocks'] - c['equal']} block(s) differ from target-only "
            f"(first: block {c['first_divergent_block']} at token {c['first_divergence']})"
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
