"""`as2d decode`: one native request on a device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.paths import file_in_option
from as2d_cli.engine.methods import DEFAULT_ALIGN, DEFAULT_BUDGET, DEFAULT_SD_K


def decode(
    window: str = typer.Option(..., "--window", help="Corpus window id (`as2d corpus list`)."),
    method: str = typer.Option(
        "as2d", "--method", help="target-only, sd, asp, as2d, as2d-no-td, as2d-no-bc."
    ),
    phone: str = typer.Option(
        "local", "--phone", help="local, a known phone name, or an adb serial."
    ),
    budget: int = options.budget(
        DEFAULT_BUDGET, "--budget", help="As²d proposal budget b (physical K <= b+1)."
    ),
    k: int = options.width(DEFAULT_SD_K, "--k", help="Standard SD physical width K."),
    source: str = typer.Option(
        "drafter", "--source", help="drafter, lookahead or ctc (As²d sources)."
    ),
    align: Optional[str] = options.align(),
    candidates: Optional[Path] = typer.Option(
        None,
        "--candidates",
        callback=file_in_option,
        help="JSON Lines of external batches {t_ms, tokens}.",
    ),
    max_tokens: Optional[int] = options.limit(
        None, "--max-tokens", help="Output cap (default: the model's)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    models: Optional[Path] = options.models(),
    task: Optional[str] = options.task(),
    language: Optional[str] = options.language(),
    question: Optional[str] = options.question(),
    prompt: Optional[str] = options.prompt_text(),
    verifier_cores: Optional[str] = options.verifier_cores(),
    producer_cores: Optional[str] = options.producer_cores(),
    os_placement: bool = options.os_placement(),
) -> None:
    """Run one native request and report its tokens, rounds and timings."""
    spec = options.prompt_spec(task, language, question, prompt, models)  # refused before any work
    from device_agents.measurement import MeasureOptions, prepare
    from device_agents.monitor import call_monitored
    from native.candidates import load_candidates
    from native.host import open_runner
    from native.protocol import METHODS
    from as2d_cli.errors import UserError

    if method not in METHODS:
        raise UserError(f"unknown --method {method!r}; use one of {', '.join(METHODS)}")
    cmd = {
        "op": "decode",
        "window": window,
        "method": method,
        "budget": budget,
        "k": k,
        "source": source,
        "align": align or DEFAULT_ALIGN,
        "max_tokens": max_tokens,
    }
    if candidates is not None:
        cmd["source"] = "external"
        cmd["candidates"] = load_candidates(candidates)
        if method not in ("as2d", "as2d-no-bc"):
            raise UserError(
                "--candidates feeds a target-decoupled method: use --method as2d or as2d-no-bc"
            )
    m = prepare(
        phone,
        MeasureOptions(
            verifier_cores=verifier_cores, producer_cores=producer_cores, os_placement=os_placement
        ),
    )
    device = m.device
    tc, pc = m.placement.cores
    if models is not None and not (models / "models.json").is_file():
        raise UserError(
            f"--models {models} is not a model pair (no models.json); create one with `as2d models import`"
        )
    with open_runner(
        device,
        None if models is None else str(models),
        target_cores=tc,
        producer_cores=pc,
        prompt=spec,
    ) as runner:
        res = call_monitored(device, runner, cmd)
    res.pop("event", None)
    res["device"] = m.identity.to_dict()
    res["placement"] = m.placement.to_dict()
    if as_json:
        typer.echo(json.dumps(res))
        return
    con = Console()
    s = res["summary"]
    con.print(
        f"[bold]{res['method']}[/] on {window}: {res['n_tokens']} tokens in {res['time_ms']:.1f} ms "
        f"→ {res['tps']:.2f} tokens/s ({'EOS' if res['eos'] else 'capped'})"
    )
    a = res["accounting_ms"]
    con.print(
        f"rounds {s['rounds']}, proposed {s['proposed']}, accepted {s['accepted']}, "
        f"coverage {s['coverage']:.1%}; T={a['T']:.1f} D={a['D']:.1f} V={a['V']:.1f} "
        f"O={a['O']:.1f} H={a['H']:.1f} ms"
    )


def register(app: typer.Typer) -> None:
    app.command("decode")(decode)
