"""What a calibration measures (paper B.2, D.2): one step per runner command.

Full plan: verifier widths K1–16 at prefix offsets 0, 64 and 128 with one warm-up and five
measured calls each, idle and with the producer running; scalar target steps; each
source's startup/step/chunk/publication; the serial drafter's step, catch-up, paired
forward, refresh widths and confidence rows; loop residual from serial rounds; idle sweeps
and the drafter source on a second, shorter window (context terms by audio length); whole
native episodes of every method on development windows of several lengths (what a call
costs inside each method's loop, and the target's step by cache and audio length).
``quick`` keeps the structure with fewer widths, offsets and repetitions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    key: str  # stable id, used to resume
    label: str
    command: dict[str, Any]
    weight: float  # rough relative duration, for the progress estimate


def make_plan(
    window: str,
    *,
    quick: bool = False,
    sources: tuple[str, ...] = ("drafter", "ctc"),
    ctc_window: str | None = None,
    short_window: str | None = None,
    episode_windows: tuple[str, ...] = (),
    max_length: int | None = None,
) -> list[Step]:
    """``short_window`` (a shorter recording): idle verifier sweeps and the drafter source
    there too, so the fit can separate cost by audio length from cost by cache length.
    ``episode_windows``: native episodes of every method on each (in-loop costs).
    ``max_length``: the target's committed-token limit; sweep offsets that would not fit
    a K16 call below it are left out (a model pair with a short decoder)."""
    widths = list(range(1, 17))  # every width: replay refuses a width it lacks
    offsets = [0, 64, 128] if not quick else [0, 64]
    if max_length is not None:
        offsets = [o for o in offsets if o + widths[-1] + 1 <= max_length] or [0]
    reps = 5 if not quick else 2
    sweep = f"verifier sweep K{widths[0]}–{widths[-1]}"
    steps: list[Step] = []
    for off in offsets:
        for producer in (False, True):
            tag = "concurrent" if producer else "idle"
            steps.append(
                _verify_step(
                    f"verify-{tag}-{off}",
                    f"{sweep} @ offset {off} ({tag})",
                    {"window": window, "widths": widths, "offsets": [off]},
                    reps,
                    producer,
                )
            )
    if short_window and short_window != window:
        steps += _short_window_steps(short_window, sweep, widths, offsets, reps, sources)
    steps.append(
        Step(
            "target-step",
            "scalar target steps",
            {
                "op": "calibrate",
                "what": "target_step",
                "window": window,
                "reps": 256 if not quick else 64,
            },
            3,
        )
    )
    for s in sources:
        w = ctc_window if s == "ctc" and ctc_window else window
        steps.append(
            Step(
                f"source-{s}",
                f"source {s} alone",
                {"op": "calibrate", "what": "source", "source": s, "window": w},
                4,
            )
        )
    steps.append(
        Step(
            "drafter",
            "serial drafter probes",
            {
                "op": "calibrate",
                "what": "drafter",
                "window": window,
                "reps": reps,
                "widths": widths,
            },
            4,
        )
    )
    steps.append(_loop_step(window, episode_windows, quick))
    return steps


def _verify_step(name: str, label: str, where: dict[str, Any], reps: int, producer: bool) -> Step:
    """A verifier sweep (``where``: its window, widths and offsets), with or without the
    producer running beside it."""
    return Step(
        name,
        label,
        {
            "op": "calibrate",
            "what": "verify",
            **where,
            "warmup": 1,
            "reps": reps,
            "producer": producer,
        },
        len(where["widths"]) * (reps + 1) * 0.2,
    )


def _short_window_steps(
    short_window: str,
    sweep: str,
    widths: list[int],
    offsets: list[int],
    reps: int,
    sources: tuple[str, ...],
) -> list[Step]:
    """The idle sweep (and the drafter source) on the short window."""
    steps = [
        _verify_step(
            "verify-idle-short",
            f"{sweep} on a short window (idle)",
            {"window": short_window, "widths": widths, "offsets": offsets[:2]},
            reps,
            False,
        )
    ]
    if "drafter" in sources:
        steps.append(
            Step(
                "source-drafter-short",
                "source drafter alone on a short window",
                {"op": "calibrate", "what": "source", "source": "drafter", "window": short_window},
                2,
            )
        )
    return steps


def _loop_step(window: str, episode_windows: tuple[str, ...], quick: bool) -> Step:
    """The serial SD rounds of the loop residual, or the native episodes, whose serial
    rounds give it."""
    if not episode_windows:
        return Step(
            "loop",
            "serial SD rounds (loop residual)",
            {
                "op": "calibrate",
                "what": "loop",
                "window": window,
                "reps": 3 if not quick else 1,
                "max_tokens": 200,
            },
            4,
        )
    return Step(
        "episodes",
        f"native episodes of every method on {len(episode_windows)} windows",
        {
            "op": "calibrate",
            "what": "episodes",
            "window": episode_windows[0],
            "windows": list(episode_windows[1:]),
            "reps": 5 if not quick else 1,
        },
        5 * len(episode_windows),
    )


def plan_hash(steps: list[Step]) -> str:
    blob = json.dumps([[s.key, s.command] for s in steps], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
