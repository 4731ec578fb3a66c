"""Option groups (cli/groups.py): shared options declared once, handed to a command as one
settings object; every shared option declared in options.py only."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from as2d_cli.cli import options
from as2d_cli.cli.groups import GATE, MEASURE, PROMPT, grouped, variant
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

CLI = Path(__file__).resolve().parent.parent / "as2d_cli" / "cli"


def _app(command: object) -> typer.Typer:
    app = typer.Typer()
    app.command()(command)  # type: ignore[arg-type]
    app.command("other")(lambda: None)  # two commands: the first is named
    return app


def test_a_grouped_command_takes_the_groups_options_and_gets_one_object() -> None:
    seen: list[object] = []

    @grouped(measure=MEASURE, prompt=PROMPT)
    def cmd(
        phone: str = options.phone(),
        measure: MeasureOptions = MeasureOptions(),
        prompt: PromptSpec = PromptSpec(),
    ) -> None:
        seen.append((phone, measure, prompt))

    res = CliRunner().invoke(
        _app(cmd),
        ["cmd", "--rest", "2", "--max-temp", "0", "--os-placement", "--task", "translate"],
    )
    assert res.exit_code == 0, res.output
    phone, measure, prompt = seen[0]  # type: ignore[misc]
    assert phone == options.PHONE_DEFAULT
    assert measure == MeasureOptions(rest_s=2.0, max_temp_c=0.0, os_placement=True)
    assert prompt == PromptSpec(task="translate")


def test_a_variant_drops_options_and_rewords_help() -> None:
    seen: list[MeasureOptions] = []
    placement = variant(MEASURE, drop=GATE, help={"os_placement": "Pin nothing, here."})

    @grouped(measure=placement)
    def cmd(measure: MeasureOptions = MeasureOptions()) -> None:
        seen.append(measure)

    app = _app(cmd)
    res = CliRunner().invoke(app, ["cmd", "--help"], env={"COLUMNS": "200"})
    assert "--verifier-cores" in res.output and "Pin nothing, here." in res.output
    assert "--rest" not in res.output and "--settle" not in res.output
    assert CliRunner().invoke(app, ["cmd", "--rest", "1"]).exit_code == 2  # not an option here
    assert CliRunner().invoke(app, ["cmd", "--producer-cores", "1"]).exit_code == 0
    assert seen == [MeasureOptions(producer_cores="1")]


def test_shared_options_are_declared_once() -> None:
    """--phone, --json and the measuring and prompt options: only options.py spells them."""
    shared = ["--phone", "--json", "--rest", "--interval", "--settle", "--max-temp", "--task"]
    for path in CLI.glob("*.py"):
        if path.name == "options.py":
            continue
        text = path.read_text()
        for flag in shared:
            assert not re.search(rf'typer\.Option\([^)]*"{flag}"', text), (path.name, flag)
