"""`as2d decode`: one native request on a device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from as2d_cli.cli import options
from as2d_cli.cli.groups import GATE, MEASURE, PROMPT, grouped, variant
from as2d_cli.cli.paths import file_in_option
from as2d_cli.engine.methods import DEFAULT_ASP_CAP, DEFAULT_BUDGET, DEFAULT_SD_K
from as2d_cli.errors import UserError
from as2d_cli.models.prompting import PromptSpec
from device_agents.measurement import MeasureOptions

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair


@grouped(prompt=PROMPT, measure=variant(MEASURE, drop=GATE))
def decode(
    window: str = typer.Option(..., "--window", help="Corpus window id (`as2d corpus list`)."),
    method: str = typer.Option(
        "as2d", "--method", help="target-only, sd, asp, as2d, as2d-no-td, as2d-no-bc."
    ),
    phone: str = options.phone(),
    budget: int | None = options.budget(
        None,
        "--budget",
        help=f"As²d/w-o-TD proposal budget b (physical K <= b+1; default {DEFAULT_BUDGET}); "
        f"ASP/w-o-BC cap (default {DEFAULT_ASP_CAP}).",
    ),
    k: int | None = options.width(
        None, "--k", help=f"Standard SD physical width K (default {DEFAULT_SD_K})."
    ),
    source: str | None = options.source(
        "drafter, lookahead, ctc, or history (the committed output's own repeats, no "
        "producer) (As²d sources; default drafter)."
    ),
    history: bool = options.history(),
    align: str | None = options.align(),
    candidates: Path | None = options.path(
        None, "--candidates", file_in_option, "JSON Lines of external batches {t_ms, tokens}."
    ),
    max_tokens: int | None = options.limit(
        None, "--max-tokens", help="Output cap (default: the model's)."
    ),
    as_json: bool = options.as_json(),
    models: Path | None = options.models(),
    prompt: PromptSpec = PromptSpec(),
    measure: MeasureOptions = MeasureOptions(),
) -> None:
    """Run one native request and report its tokens, rounds and timings."""
    from as2d_cli.engine.methods import check_method_options

    # Options the method does not have, before anything else (one check for every command).
    check_method_options(
        method,
        budget=budget,
        k=k,
        source=source,
        align=align,
        candidates=candidates,
        history=history,
    )
    pair = options.model_pair(models, prompt)  # loaded once; refused before any work
    if candidates is not None and source is not None:
        raise UserError(
            "--candidates is the source of the proposals; drop --source (or --candidates)"
        )
    source = "external" if candidates is not None else source
    cmd = _command(window, method, budget, k, source, align, history, max_tokens)
    if candidates is not None:
        from as2d_cli.models.model_pair import load_pair

        pair = pair or load_pair(check_hashes=False)  # the bundled pair's tokenizer
        cmd["candidates"] = _candidates(candidates, pair)
    res = _run(phone, measure, pair, cmd)
    if as_json:
        typer.echo(json.dumps(res))
        return
    _print(res, window)


def _command(
    window: str,
    method: str,
    budget: int | None,
    k: int | None,
    source: str | None,
    align: str | None,
    history: bool,
    max_tokens: int | None,
) -> dict[str, Any]:
    """The runner's decode command (the method's settings in their wire form)."""
    from as2d_cli.engine.methods import spec_of

    settings = spec_of(method, budget=budget, k=k, source=source, align=align, history=history)
    return {"op": "decode", "window": window, **settings.to_wire(), "max_tokens": max_tokens}


def _candidates(path: Path, pair: ModelPair) -> Any:
    """External proposal batches, checked against the pair's tokenizer here: a token the
    target cannot emit would only fail deep inside the runner."""
    from native.candidates import load_candidates

    return load_candidates(path, vocab_size=pair.vocab.size)


def _run(
    phone: str, measure: MeasureOptions, pair: ModelPair | None, cmd: dict[str, Any]
) -> dict[str, Any]:
    """The request on the prepared device, under the core monitor, with the model ``pair``
    (None: the bundled one)."""
    from as2d_cli.launch.host import open_runner
    from device_agents.measurement import prepare
    from device_agents.monitor import call_monitored

    m = prepare(phone, measure)
    tc, pc = m.placement.cores
    with open_runner(m.device, pair, target_cores=tc, producer_cores=pc) as runner:
        res = call_monitored(m.device, runner, cmd)
    res.pop("event", None)
    res["device"] = m.identity.to_dict()
    res["placement"] = m.placement.to_dict()
    return res


def _print(res: dict[str, Any], window: str) -> None:
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
