"""The range-checked options every command shares: one definition each, checked while the
command line is parsed, so bad input is refused before any work starts.

Each helper returns a ``typer.Option`` (use it as a parameter's default). Ranges:

* ports 1–65535 (``emulator_port``: 0 too, meaning any free port);
* seconds ≥ 0 (``seconds``), or > 0 where zero means nothing (``positive_seconds``);
* counts ≥ 1 (``count``: windows, repetitions, resamples…), or ≥ 0 where none is a
  choice (``count(..., minimum=0)``: warm-ups); limits and token caps ≥ 1;
* budgets 1–MAX_BUDGET and physical widths 1–MAX_BUDGET+1 (``budget``, ``width``, and
  ``parse_budgets`` for lists like ``1-8,12``); whether the profile measured those widths
  is checked against the profile;
* fractions 0–1 (``fraction``);
* core indices ≥ 0 here, and against the device's cores once it is resolved
  (``device_agents.measurement.prepare``; CPU lists by ``device_agents.affinity``).

A violation is a usage error that ``main()`` prints as one line naming the option.
Paths are checked in :mod:`as2d_cli.cli.paths`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from as2d_cli.engine.methods import DEFAULT_ASP_CAP
from as2d_cli.errors import UserError

# The supported budgets: 1 to ASP's cap of 24 proposals (physical K ≤ 25), the catalog
# `select-budget` searches by default; a profile may measure fewer widths.
MIN_BUDGET = 1
MAX_BUDGET = DEFAULT_ASP_CAP
MAX_WIDTH = MAX_BUDGET + 1
MAX_PORT = 65535
_RANGE = re.compile(r"^\s*(-?\d+)\s*(?:-\s*(-?\d+))?\s*$")


def _checked(check: Callable[[Any], object]) -> Callable[[Any], Any]:
    """A click callback running ``check`` on a given value (its result is ignored); its
    UserError becomes a usage error naming the option."""

    def callback(value: Any) -> Any:
        if value is None:
            return value
        try:
            for v in value if isinstance(value, (list, tuple)) else (value,):
                check(v)
        except UserError as exc:
            raise typer.BadParameter(str(exc)) from None
        return value

    return callback


def _more_than_zero(value: float) -> None:
    if not value > 0:
        raise UserError(f"{value:g} must be more than 0")


# ------------------------------------------------------------------ ports


def port(default: int | None, *flags: str, help: str) -> Any:
    """A TCP port, 1–65535."""
    return typer.Option(default, *flags, min=1, max=MAX_PORT, help=help)


def adb_port(help: str = "adb server port (default: $ANDROID_ADB_SERVER_PORT or 5037).") -> Any:
    """``--adb-port``: the adb server's port, 1–65535."""
    return port(None, "--adb-port", help=help)


def emulator_port(default: int, *flags: str, help: str) -> Any:
    """A port to listen on: 1–65535, or 0 for any free port."""
    return typer.Option(default, *flags, min=0, max=MAX_PORT, help=help)


# ------------------------------------------------------------------ time


def seconds(default: float | None, *flags: str, help: str) -> Any:
    """A duration in seconds, ≥ 0 (0: none)."""
    return typer.Option(default, *flags, min=0.0, help=help)


def positive_seconds(default: float | None, *flags: str, help: str) -> Any:
    """A duration in seconds, > 0 (a period or a time limit)."""
    return typer.Option(default, *flags, callback=_checked(_more_than_zero), help=help)


def positive(default: float | None, *flags: str, help: str) -> Any:
    """Any quantity that must be more than 0 (GHz, …)."""
    return typer.Option(default, *flags, callback=_checked(_more_than_zero), help=help)


# ------------------------------------------------------------------ counts


def count(default: int | None, *flags: str, help: str, minimum: int = 1) -> Any:
    """A number of things (windows, repetitions, processes, tokens…), ≥ ``minimum`` (1)."""
    return typer.Option(default, *flags, min=minimum, help=help)


def processes(help: str = "Worker processes (default: one per usable CPU).") -> Any:
    """``--processes``: worker processes, ≥ 1."""
    return count(None, "--processes", help=help)


def ray() -> Any:
    """``--ray ADDRESS``: run the fanned-out work on a Ray cluster (``local``: start one here)."""
    return typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run the work on a Ray cluster (HOST:6379 or ray://HOST:10001), or `local` to "
        "start Ray here; same results as without (needs Ray: the project's cluster extra).",
    )


def align(help: str = "") -> Any:
    """``--align suffix|paper``: As²d's alignment rules (None: the command's default)."""
    from as2d_cli.engine.methods import ALIGN_MODES

    return one_of(
        None,
        "--align",
        choices=ALIGN_MODES,
        help="As²d's alignment rules: suffix (suffix anchoring, the default) or paper (C.3's "
        "K1 anchor calls: the paper's figures)" + (f"; {help}" if help else "."),
    )


def limit(default: int | None, *flags: str, help: str) -> Any:
    """A cap on how many (windows, tokens…), ≥ 1."""
    return count(default, *flags, help=help)


def seed(default: int, *flags: str, help: str) -> Any:
    """A random seed, ≥ 0."""
    return typer.Option(default, *flags, min=0, help=help)


def fraction(default: float | None, *flags: str, help: str) -> Any:
    """A fraction, 0–1."""
    return typer.Option(default, *flags, min=0.0, max=1.0, help=help)


def parse_fractions(text: str) -> list[float]:
    """``0.4`` or ``0.4,0.6,0.7`` → distinct fractions in the order given; refuses a value
    outside 0–1 or one that is not a number, naming it."""
    out: list[float] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            v = float(part)
        except ValueError:
            raise UserError(
                f"{text!r}: {part.strip()!r} is not a number; pass fractions like 0.4 or 0.4,0.6"
            ) from None
        if not 0.0 <= v <= 1.0:
            raise UserError(f"{text!r}: {v:g} is outside 0–1; pass fractions like 0.4 or 0.4,0.6")
        if v not in out:
            out.append(v)
    if not out:
        raise UserError(f"{text!r}: no value given; pass fractions like 0.4 or 0.4,0.6")
    return out


def _ranges(text: str, example: str) -> list[int]:
    """``1-4,8`` → [1, 2, 3, 4, 8] in the order written (repeats kept); refuses what is not a
    whole number or range, a range that counts down, and an empty list, naming ``example``."""
    out: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _RANGE.match(part)
        if m is None:
            raise UserError(f"{text!r}: expected whole numbers and ranges like {example}")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if lo > hi:
            raise UserError(
                f"{text!r}: {part.strip()!r} counts down; write ranges low-high, like {example}"
            )
        out.extend(range(lo, hi + 1))
    if not out:
        raise UserError(f"{text!r}: no value given; pass values like {example}")
    return out


def parse_counts(text: str) -> list[int]:
    """``8`` or ``1,2,8`` (ranges like ``1-4`` too) → distinct counts ≥ 1 in the order given."""
    out = list(dict.fromkeys(_ranges(text, "8 or 1,2,8")))
    if min(out) < 1:
        raise UserError(f"{text!r}: {min(out)} is less than 1; give counts of at least 1")
    return out


def value_list(
    default: str | None, *flags: str, parse: Callable[[str], Any], metavar: str, help: str
) -> Any:
    """One value or a comma list of them, checked while parsing by ``parse`` (the command
    parses the string again with it)."""
    return typer.Option(default, *flags, callback=_checked(parse), metavar=metavar, help=help)


def fraction_list(default: str | None, *flags: str, help: str) -> Any:
    """One fraction or a comma list of them (``parse_fractions``)."""
    return value_list(default, *flags, parse=parse_fractions, metavar="X[,X…]", help=help)


def count_list(default: str | None, *flags: str, help: str) -> Any:
    """One count or a comma list of them (``parse_counts``)."""
    return value_list(default, *flags, parse=parse_counts, metavar="N[,N…]", help=help)


def parse_switches(text: str) -> list[bool]:
    """``off``, ``on`` or ``off,on`` → distinct switch values in the order given."""
    words = {"off": False, "on": True}
    out: list[bool] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if part and part not in words:
            raise UserError(f"{text!r}: {part!r} is neither on nor off; pass off, on or off,on")
        if part and words[part] not in out:
            out.append(words[part])
    if not out:
        raise UserError(f"{text!r}: no value given; pass off, on or off,on")
    return out


def switch_list(default: str | None, *flags: str, help: str) -> Any:
    """``off``, ``on`` or a comma list of them (``parse_switches``)."""
    return value_list(default, *flags, parse=parse_switches, metavar="off|on[,…]", help=help)


# ------------------------------------------------------------------ budgets and widths


def budget(default: int | None, *flags: str, help: str) -> Any:
    """A proposal budget b, 1–MAX_BUDGET (physical K ≤ b+1)."""
    return typer.Option(default, *flags, min=MIN_BUDGET, max=MAX_BUDGET, help=help)


def width(default: int | None, *flags: str, help: str) -> Any:
    """A physical verification width K, 1–MAX_WIDTH."""
    return typer.Option(default, *flags, min=1, max=MAX_WIDTH, help=help)


def parse_budgets(text: str) -> list[int]:
    """``1-24``, ``1-8,12`` … → sorted distinct budgets; refuses anything outside
    MIN_BUDGET–MAX_BUDGET, naming the budgets it refuses."""
    out = set(_ranges(text, "1-24 or 1-8,12"))
    bad = sorted(b for b in out if not MIN_BUDGET <= b <= MAX_BUDGET)
    if bad:
        raise UserError(
            f"{text!r}: {spans(bad)} {'is' if len(bad) == 1 else 'are'} outside the supported "
            f"budgets {MIN_BUDGET}-{MAX_BUDGET} (physical K ≤ {MAX_WIDTH}); pass budgets in that range"
        )
    return sorted(out)


def budget_list(default: str | None, *flags: str, help: str) -> Any:
    """A list of budgets (``parse_budgets``), checked while parsing; the command parses
    the string again with ``parse_budgets``."""
    return typer.Option(default, *flags, callback=_checked(parse_budgets), help=help)


def spans(values: list[int]) -> str:
    """[1, 2, 3, 7] → '1-3, 7'."""
    parts: list[str] = []
    start = prev = None
    for v in sorted(values):
        if prev is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


# ------------------------------------------------------------------ cores


def core(default: int | None, *flags: str, help: str) -> Any:
    """A CPU core index, ≥ 0; ``device_agents.measurement.prepare`` checks it against the device."""
    return typer.Option(default, *flags, min=0, help=help)


def models(
    help: str = "A model pair folder (`as2d models import`) or a shipped pair's name "
    "(audio-llm); default: the bundled pair.",
) -> Any:
    """``--models``: a pair folder, or the name of a pair shipped in the package
    (``models.shipped.resolve_models``, the one place a name becomes a folder)."""

    def resolve(value: Path | None) -> Path | None:
        from as2d_cli.models.shipped import resolve_models

        if value is None:
            return None
        try:
            return resolve_models(value)
        except UserError as exc:
            raise typer.BadParameter(str(exc).removeprefix("--models ")) from None

    return typer.Option(None, "--models", callback=resolve, metavar="PAIR", help=help)


def allow_implausible() -> Any:
    """``--allow-implausible``: price with a cost profile that fails the plausibility
    rules (``formats.profile.implausibilities``) instead of refusing it; the results record
    the problems accepted."""
    return typer.Option(
        False,
        "--allow-implausible",
        help="Use a cost profile that fails the plausibility checks (docs/formats.md, "
        "Plausibility) instead of refusing it; the results record what was accepted.",
    )


def warn_implausible(path: Path, prof: Any) -> None:
    """The one stderr line when ``--allow-implausible`` let an implausible profile through."""
    if prof.allowed_implausible:
        typer.echo(
            f"warning: {path} is implausible ({prof.allowed_implausible[0]}); "
            "used anyway (--allow-implausible)",
            err=True,
        )


# ------------------------------------------------------------------ shared options

# --phone: the one declaration and the one default. Every command that measures or
# evaluates defaults to this host, which is always there (`eval --phone k70` prices with the
# shipped K70 profile instead); commands that act on one particular phone (bundle deploy,
# devices gate, energy…) require it.
PHONE_DEFAULT = "local"
PHONE_HELP = "local (the default), a known phone name, or an adb serial."


def phone(default: Any = PHONE_DEFAULT, help: str = PHONE_HELP) -> Any:
    """``--phone``: a device (local, a known phone, an adb serial); ``...``: required."""
    return typer.Option(default, "--phone", help=help)


def phones(help: str) -> Any:
    """``--phone`` given once or more (a farm), PHONE_DEFAULT when not given."""
    return phone([PHONE_DEFAULT], help)


def as_json(help: str = "Print one JSON object.") -> Any:
    """``--json``: one JSON document on stdout and nothing else there."""
    return typer.Option(False, "--json", help=help)


def path(default: Any, flag: str, check: Any, help: str, **extra: Any) -> Any:
    """A path option checked while parsing by ``check`` (a ``cli.paths`` callback: a file or
    folder to read, a folder to write into, a new file…)."""
    return typer.Option(default, flag, callback=check, help=help, **extra)


def out_folder(default: Any, help: str, flag: str = "--out", callback: Any = None) -> Any:
    """``--out`` (or ``flag``): where a command writes; ``callback`` its path check
    (``cli.paths``; default: a folder to write into, made if missing, checked writable)."""
    from as2d_cli.cli.paths import folder_out_option

    return path(default, flag, callback or folder_out_option, help)


def calibrations(help: str = "Where profiles and deployments live.") -> Any:
    """``--calibrations``: the folder of profiles and deployments."""
    return out_folder(Path("calibrations"), help, "--calibrations")


def results(help: str = "Folder for the results (a new subfolder per run).") -> Any:
    """``--results``: the folder a run's results folder is made in."""
    return out_folder(Path("results"), help, "--results")


def profile(
    default: Any = None,
    help: str = "Device cost profile (as2d.profile YAML).",
    checked: bool = True,
) -> Any:
    """``--profile``: a cost profile file (``...``: required); ``checked``: refused while
    parsing when it is not a readable file (else the profile loader says so)."""
    from as2d_cli.cli.paths import file_in_option

    if not checked:
        return typer.Option(default, "--profile", help=help)
    return typer.Option(default, "--profile", callback=file_in_option, help=help)


def traces(default: Any = None, help: str = "Trace file or folder.", **checks: Any) -> Any:
    """``--traces``: a trace file or a folder of them (``...``: required)."""
    return typer.Option(default, "--traces", help=help, **checks)


def source(help: str, choices: tuple[str, ...] | None = None) -> Any:
    """``--source``: As²d's drafting source (None: the method's default)."""
    if choices is None:
        return typer.Option(None, "--source", help=help)
    return one_of(None, "--source", choices=choices, help=help)


def history() -> Any:
    """``--history``: As²d's history candidates beside its source (engine/history.py)."""
    return typer.Option(
        False,
        "--history",
        help="As²d: history candidates fill the rounds the source leaves empty (docs/engine.md).",
    )


def model_pair(models: Path | None, prompt: Any) -> Any:
    """The model pair ``--models`` names with the prompt group's settings (``prompt``, a
    PromptSpec), loaded once for the whole command and checked before any work: a folder
    that is no pair, --question without --task answer, a task or --prompt the pair cannot
    take, each refused in one line. None when neither is given: the bundled pair, which the
    command's core loads where it needs it."""
    from as2d_cli.models.model_pair import load_pair

    if models is None and prompt.empty:
        return None
    return load_pair(models, check_hashes=False, prompt=prompt)


# ------------------------------------------------------------------ prompt (one PromptSpec)


ALL_TASKS = "all"  # `eval --task all`: the three tasks in one run (the paper's per-task table)


def task(every: bool = False) -> Any:
    """``--task``: transcribe, translate or answer (answer: audio language models);
    ``every``: also ``all``, each of the three (``eval``)."""
    from as2d_cli.models.prompting import TASKS

    return one_of(
        None,
        "--task",
        choices=(*TASKS, ALL_TASKS) if every else TASKS,
        help="transcribe, translate or answer (spoken questions: audio language models); "
        + ("all: the three, with the per-task table; " if every else "")
        + "default: the pair's.",
    )


def language(
    help: str = "Whisper pairs: the spoken language's prompt token (default: each window's); "
    "audio LLMs: the language --task translate translates into (default: en).",
) -> Any:
    return text(None, "--language", "XX", help)


def question() -> Any:
    """``--question``: the spoken question of ``--task answer``."""
    return text(
        None,
        "--question",
        "TEXT",
        "With --task answer: the question asked about the audio (default: each corpus window's "
        "own question).",
    )


def prompt_text() -> Any:
    """``--prompt``: an audio LLM's instruction text, replacing the task's."""
    return text(
        None,
        "--prompt",
        "TEXT",
        "Audio LLMs: the instruction after the audio, replacing the task's (docs/models.md).",
    )


def rest(help: str = "Gate: seconds of rest before the checks (phone default 15).") -> Any:
    return seconds(None, "--rest", help=help)


def interval(help: str = "Gate: seconds between the two checks (phone default 5).") -> Any:
    return seconds(None, "--interval", help=help)


def settle(
    help: str = "Once before measuring: seconds the host must have been quiet (local default 20; 0 skips).",
) -> Any:
    return seconds(None, "--settle", help=help)


def verifier_cores() -> Any:
    return text(
        None,
        "--verifier-cores",
        "CPUS",
        "CPUs the verifier (target) runs on, e.g. 7 or 4-7 (default: the fastest cluster on a "
        "phone, the first CPU here).",
    )


def producer_cores() -> Any:
    return text(
        None,
        "--producer-cores",
        "CPUS",
        "CPUs the producer (drafting source) runs on (default: the next fastest cluster on a "
        "phone, the second CPU here).",
    )


def os_placement() -> Any:
    return typer.Option(
        False,
        "--os-placement",
        help="Pin nothing: measure under the OS's own placement (for phones that refuse pinning).",
    )


def max_temp() -> Any:
    return typer.Option(
        None,
        "--max-temp",
        min=0.0,
        metavar="C",
        help="Gate: the temperature sensor must read at most C °C; a hotter device waits to cool "
        "(phones: 40; 0 turns the check off).",
    )


def temp_sensor() -> Any:
    return text(
        None,
        "--temp-sensor",
        "SENSOR",
        "Gate: battery, or a thermal zone type such as skin (default: battery).",
    )


def text(default: str | None, flag: str, metavar: str, help: str) -> Any:
    """A free-text option (a sentence, a CPU list, a name) shown as ``metavar``."""
    return typer.Option(default, flag, metavar=metavar, help=help)


def milliseconds(default: int | None, *flags: str, help: str, minimum: int, maximum: int) -> Any:
    """A whole number of milliseconds within ``minimum``–``maximum`` (a period)."""
    return typer.Option(default, *flags, min=minimum, max=maximum, metavar="MS", help=help)


def one_of(default: str | None, *flags: str, choices: tuple[str, ...], help: str) -> Any:
    """One of ``choices`` (exact spelling); anything else is refused naming them."""

    def check(value: str) -> None:
        if value not in choices:
            raise UserError(f"{value!r} is not one of {', '.join(choices)}")

    return typer.Option(
        default, *flags, callback=_checked(check), metavar="|".join(choices), help=help
    )


def figure_format(default: str | None = "png", help: str = "") -> Any:
    """``--format png|pdf|svg``: the figures' file format."""
    from as2d_cli.figures.style import FORMATS

    return one_of(
        default, "--format", choices=FORMATS, help=help or "Figure file format: png, pdf or svg."
    )


def quiet() -> Any:
    """``--quiet``: no progress and no notes on stderr (warnings and errors still print)."""
    return typer.Option(
        False,
        "--quiet",
        "-q",
        help="No progress or notes on stderr; warnings, errors and the result still print.",
    )


__all__ = [
    "ALL_TASKS",
    "PHONE_DEFAULT",
    "as_json",
    "calibrations",
    "out_folder",
    "path",
    "phone",
    "phones",
    "profile",
    "results",
    "source",
    "traces",
    "allow_implausible",
    "warn_implausible",
    "quiet",
    "figure_format",
    "milliseconds",
    "one_of",
    "interval",
    "language",
    "models",
    "model_pair",
    "prompt_text",
    "question",
    "rest",
    "settle",
    "task",
    "max_temp",
    "os_placement",
    "producer_cores",
    "temp_sensor",
    "verifier_cores",
    "MAX_BUDGET",
    "MAX_PORT",
    "MAX_WIDTH",
    "MIN_BUDGET",
    "adb_port",
    "budget",
    "budget_list",
    "core",
    "count",
    "emulator_port",
    "fraction",
    "limit",
    "parse_budgets",
    "port",
    "positive",
    "positive_seconds",
    "processes",
    "ray",
    "seconds",
    "seed",
    "spans",
    "width",
]
