"""The settings of `as2d eval`, built once from its options: the replay part's
(``EvalSettings``, for ``evaluate.run.run_eval``) and the native runs' (``NativeSettings``,
for ``evaluate.native.run_native_eval``). Kept apart from those modules so the command line
can name them without importing the evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from as2d_cli.models.model_pair import ModelPair, PairSettings


@dataclass(frozen=True)
class EvalSettings(PairSettings):
    """What one evaluation's replay part uses: the `as2d eval` options, built once.

    ``accept_unvalidated``: use a deployment that failed its own checks — NOT retained on
    val, never checked there (selected on dev only), or selected on fewer than
    ``MIN_DEV_WINDOWS`` dev windows — and record that in the results; refused otherwise
    (inputs.require_validated). ``allow_unconfirmed`` is its older name and does the same.
    ``align``: the alignment rules (a deployment selected under them is found or selected;
    None: a given deployment's own, else the default rules). ``command``: the command line
    that redoes this evaluation, for the incomplete folder's note (default: ``as2d eval
    --phone PHONE``). ``figure_format``: the figures' format (png, pdf or svg). ``pair``: the
    model pair, loaded once by the command (None: the bundled pair). ``folder``: the results
    folder, made fresh (``eval --task all`` puts each task's in one folder); None: a new
    ``<device>-<split>-<time>`` folder in ``results``."""

    phone: str
    profile: Path | None = None
    traces: Path | None = None
    deployment: Path | None = None
    split: str = "test"
    calibrations: Path = Path("calibrations")
    results: Path = Path("results")
    pair: ModelPair | None = None
    allow_unconfirmed: bool = False
    accept_unvalidated: bool = False
    allow_implausible: bool = False
    align: str | None = None
    figure_format: str = "png"
    command: str | None = None
    folder: Path | None = None  # the results folder to make (default: a new one in results)

    @property
    def accept(self) -> bool:
        return self.accept_unvalidated or self.allow_unconfirmed

    @property
    def redo(self) -> str:
        return self.command or f"as2d eval --phone {self.phone}"


@dataclass(frozen=True)
class NativeSettings(PairSettings):
    """What the native part of ``as2d eval --native`` runs: ``windows`` test windows,
    ``warmup`` unmeasured passes over them first (D.3: one warm-up repetition before the
    measured ones; their outputs are still checked for exactness), then ``repeats``
    interleaved measured repetitions. ``gate``: a device_agents GateConfig checked before
    every window (None: the measurement's). ``pair``: the model pair run (None: the bundled
    one). ``append``: resume an interrupted run's folder (only the runs its records lack are
    run; a run made with other settings is refused)."""

    windows: int = 20
    repeats: int = 1
    warmup: int = 1
    gate: Any = None
    pair: ModelPair | None = None
    append: bool = False
    monitor_interval_s: float = 1.0
