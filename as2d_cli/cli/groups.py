"""Option groups: options that several commands share, declared once as the parameters of
one builder and handed to a command as the one object the builder makes (the way pyperf and
asv group theirs).

A builder is a function whose parameters are typer options and whose result is the settings
object (``measure`` → ``MeasureOptions``, ``prompt`` → ``PromptSpec``). ``@grouped(measure=
MEASURE)`` replaces the command's parameter ``measure`` by the builder's options in the
command line, and calls the command with the object built from them. ``variant`` gives a
group without some of its options (a command that takes no ``--settle``) or with a
command's own help wording.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from as2d_cli.cli import options
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

F = TypeVar("F", bound=Callable[..., Any])


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn, eval_str=True)


def _with_signature(fn: Callable[..., Any], sig: inspect.Signature) -> None:
    """Give ``fn`` the signature typer reads (inspect follows ``__signature__``; typer's type
    hints come from ``__annotations__``)."""
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    fn.__annotations__["return"] = sig.return_annotation


def grouped(**groups: Callable[..., Any]) -> Callable[[F], F]:
    """Each keyword names a parameter of the decorated command that takes the object its
    builder makes; the builder's options stand in the command line where that parameter
    stands."""

    def decorate(command: F) -> F:
        sig = _signature(command)
        params: list[inspect.Parameter] = []
        owned: dict[str, list[str]] = {}
        for p in sig.parameters.values():
            if p.name not in groups:
                params.append(p)
                continue
            members = list(_signature(groups[p.name]).parameters.values())
            owned[p.name] = [m.name for m in members]
            params += members
        missing = set(groups) - set(owned)
        assert not missing, f"{command.__name__} has no parameter {missing}"

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            for name, members in owned.items():
                kwargs[name] = groups[name](**{m: kwargs.pop(m) for m in members})
            return command(*args, **kwargs)

        _with_signature(run, sig.replace(parameters=params))
        return run  # type: ignore[return-value]

    return decorate


def variant(
    builder: Callable[..., Any], *, drop: tuple[str, ...] = (), help: dict[str, str] | None = None
) -> Callable[..., Any]:
    """``builder`` without the options ``drop`` names (they take their defaults) and with a
    command's own help for those ``help`` names."""
    sig = _signature(builder)
    help = help or {}
    unknown = (set(drop) | set(help)) - set(sig.parameters)
    assert not unknown, f"{builder.__name__} has no option {unknown}"
    kept: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name in drop:
            continue
        if p.name in help:
            info = copy.copy(p.default)
            info.help = help[p.name]
            p = p.replace(default=info)
        kept.append(p)
    dropped = {n: sig.parameters[n].default.default for n in drop}

    def build(**kwargs: Any) -> Any:
        return builder(**kwargs, **dropped)

    _with_signature(build, sig.replace(parameters=kept))
    build.__name__ = builder.__name__
    return build


def subcommands(app: Any, name: str, help: str, commands: dict[str, Callable[..., Any]]) -> Any:
    """``as2d NAME …``: a command group of ``commands`` (their names as typed), listed when
    given no subcommand."""
    import typer

    sub = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(sub, name=name)
    for command, fn in commands.items():
        sub.command(command)(fn)
    return sub


# ------------------------------------------------------------------ the groups


def MEASURE(
    rest: float | None = options.rest(),
    interval: float | None = options.interval(),
    settle: float | None = options.settle(),
    max_temp: float | None = options.max_temp(),
    temp_sensor: str | None = options.temp_sensor(),
    verifier_cores: str | None = options.verifier_cores(),
    producer_cores: str | None = options.producer_cores(),
    os_placement: bool = options.os_placement(),
) -> MeasureOptions:
    """The measuring options (the gate's, the host's quiet, the CPU placement) as one
    ``device_agents.measurement.MeasureOptions``."""
    return MeasureOptions(
        rest_s=rest,
        interval_s=interval,
        settle_s=settle,
        max_temp_c=max_temp,
        temp_sensor=temp_sensor,
        verifier_cores=verifier_cores,
        producer_cores=producer_cores,
        os_placement=os_placement,
    )


GATE = ("rest", "interval", "settle", "max_temp", "temp_sensor")
PLACEMENT = ("verifier_cores", "producer_cores", "os_placement")


def PROMPT(
    task: str | None = options.task(),
    language: str | None = options.language(),
    question: str | None = options.question(),
    prompt: str | None = options.prompt_text(),
) -> PromptSpec:
    """The four prompt options as one ``PromptSpec``, not yet checked against a pair
    (``options.model_pair`` does, as it loads the command's ``--models``)."""
    return PromptSpec(task, language, question, prompt)


def PROMPTS(
    task: str | None = options.task(every=True),
    language: str | None = options.language(),
    question: str | None = options.question(),
    prompt: str | None = options.prompt_text(),
) -> tuple[PromptSpec, ...]:
    """The prompt options as one PromptSpec per task asked: one, or with ``--task all`` the
    three tasks in turn (``eval``'s per-task table). ``--question`` and ``--prompt`` ask one
    instruction of every request, which would make the three tasks one: refused with all."""
    from as2d_cli.errors import UserError
    from as2d_cli.models.prompting import TASKS

    if task != options.ALL_TASKS:
        return (PromptSpec(task, language, question, prompt),)
    for flag, given in (("--question", question), ("--prompt", prompt)):
        if given is not None:
            raise UserError(
                f"{flag} replaces every request's instruction, but --task all evaluates three "
                f"tasks with their own; drop {flag} (each QA request asks its own question), or "
                "evaluate one task"
            )
    return tuple(PromptSpec(t, language) for t in TASKS)


__all__ = [
    "subcommands",
    "GATE",
    "MEASURE",
    "PLACEMENT",
    "PROMPT",
    "PROMPTS",
    "grouped",
    "variant",
]
