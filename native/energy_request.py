"""``python -m native.energy_request``: one native request for `as2d energy`.

Loads the model pair and the window's audio first (outside the energy window, as the paper
excludes model loading and earlier audio preparation), then stamps the request origin on
CLOCK_BOOTTIME, runs one request through the native runner's request path
(native.request.run_request: prefill, target and producer workers, drain), stamps the end
of both workers, and prints the line the episode script records::

    AS2D_REQUEST body_tokens=N origin_boot_ns=… target_eos_boot_ns=… end_boot_ns=… …

Body tokens are the committed tokens without EOS (the first token, selected during
prefill, counts). Target EOS is placed at origin + prefill + the end of the target's last
round on the decode clock; the gap between prefill and the decode clock's start (setup,
microseconds to milliseconds) makes it a slight under-estimate of response time.
With ``--result FILE`` the runner's full result (tokens, rounds, accounting) is kept.

With ``--min-s S`` (a warm-up sized from the gauge's period) the request path runs again
until S seconds have passed since the origin, so the phone carries the request's load for
at least that long before the next request; the line then spans every run and reports the
last one's tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from as2d_cli.errors import As2dError


def boot_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def request_line(res: dict[str, Any], origin: int, end: int) -> str:
    prefill_ns = int(round(float(res["prefill_ms"]) * 1e6))
    rounds = res.get("rounds") or []
    last_target = max((int(r["end_ns"]) for r in rounds), default=0)
    eos_at = min(end, origin + prefill_ns + last_target)
    body = int(res["n_tokens"]) - (1 if res.get("eos") else 0)
    return (
        f"AS2D_REQUEST body_tokens={body} origin_boot_ns={origin} "
        f"target_eos_boot_ns={eos_at} end_boot_ns={end} method={res['method']} "
        f"n_tokens={res['n_tokens']} eos={int(bool(res.get('eos')))} "
        f"decode_ms={float(res['time_ms']):.3f} prefill_ms={float(res['prefill_ms']):.3f}"
    )


def _prompt(text: str | None) -> Any:
    """``--prompt-spec``'s PromptSpec (None: the pair's own settings)."""
    from as2d_cli.errors import UserError
    from as2d_cli.formats.strict import json_loads
    from as2d_cli.models.prompting import PromptSpec

    if text is None:
        return None
    try:
        doc = json_loads(text, "--prompt-spec")  # the project's reader: a key twice refused
    except json.JSONDecodeError as exc:
        raise UserError(
            f'--prompt-spec is not JSON ({exc.msg}); give an object such as {{"task": "answer"}}'
        ) from None
    return PromptSpec.from_wire(doc)


def main(argv: list[str] | None = None) -> int:
    from native import limit_blas_threads

    limit_blas_threads()  # before the models' numpy is first imported
    ap = argparse.ArgumentParser(prog="python -m native.energy_request")
    ap.add_argument("--window", required=True, help="corpus window id")
    ap.add_argument("--method", required=True, help="target-only, sd, asp, as2d, …")
    ap.add_argument("--budget", type=int, default=None, help="As²d's proposal budget b; ASP's cap")
    ap.add_argument("--k", type=int, default=None, help="standard SD width")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--models", default=None, help="model directory (default: bundled)")
    ap.add_argument(
        "--prompt-spec",
        default=None,
        help="the request's prompt settings as JSON: task, language, question, text "
        "(the runner protocol's load.prompt; default: the pair's)",
    )
    ap.add_argument("--corpus", default=None, help="corpus directory (default: bundled)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target-cores", default=None, help="CPU list, e.g. 4,5")
    ap.add_argument("--producer-cores", default=None, help="CPU list, e.g. 6")
    ap.add_argument("--result", default=None, help="write the runner's full result JSON here")
    ap.add_argument(
        "--min-s", type=float, default=0.0, help="run the request again until this long has passed"
    )
    a = ap.parse_args(argv)
    try:
        from pathlib import Path

        from as2d_cli.corpus.manifest import load_corpus
        from native.protocol import decode_settings
        from native.request import load_models, run_request

        cmd: dict[str, Any] = {"op": "decode", "window": a.window, "method": a.method}
        for key, val in (("budget", a.budget), ("k", a.k), ("max_tokens", a.max_tokens)):
            if val is not None:
                cmd[key] = val
        settings = decode_settings(cmd)
        cores = [
            None if v is None else [int(x) for x in v.split(",") if x.strip()]
            for v in (a.target_cores, a.producer_cores)
        ]
        models = load_models(a.models, threads=a.threads, prompt=_prompt(a.prompt_spec))
        window = load_corpus(Path(a.corpus) if a.corpus else None).get(a.window)
        audio = window.load_audio()
        origin = boot_ns()
        while True:  # once, or until --min-s has passed (a sized warm-up)
            res = run_request(
                models,
                audio,
                settings,
                language=window.language,
                question=window.question,
                target_cores=cores[0],
                producer_cores=cores[1],
            )
            end = boot_ns()
            if (end - origin) / 1e9 >= a.min_s:
                break
    except As2dError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.result:
        with open(a.result, "w", encoding="utf-8") as f:
            json.dump(res, f)
    print(request_line(res, origin, end), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
