"""The `--request-cmd` of `as2d energy --bundle`: one native request
(:mod:`native.energy_request`, which runs on the phone) started from the deployed bundle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_M, _R, _I = "@@AS2D_METHOD@@", "@@AS2D_RUN_DIR@@", "@@AS2D_INDEX@@"
_S = "@@AS2D_MIN_S@@"


def bundle_request_template(deployed: Any, window: str, extra: Sequence[str] = ()) -> str:
    """The `--request-cmd` template that runs this module from a bundle deployed on a phone
    (as2d_cli.bundle.deploy.DeployedBundle): {method}, {run_dir}, {index} and {min_s} (the
    load a method's last warm-up holds at least) are left for the episode script; every
    other brace is escaped; the result lands in the run dir."""
    args = [
        "-m",
        "native.energy_request",
        "--window",
        window,
        "--method",
        _M,
        "--result",
        f"{_R}/result-{_I}.json",
        "--min-s",
        _S,
        *extra,
    ]
    line = deployed.command(args, _R).replace("{", "{{").replace("}", "}}")
    line = line.replace(_M, "{method}").replace(_R, "{run_dir}").replace(_I, "{index}")
    return line.replace(_S, "{min_s}")
