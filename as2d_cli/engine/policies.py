"""The six decoding policies, as configuration over one engine.

* ``TargetOnly``       — scalar target steps, one token each.
* ``StandardSD(k)``    — serial prefix-conditioned drafting of k−1 tokens, width-k checks.
* ``ASP``              — SpecASR adaptive single-sequence prediction: confidence stop
                         (threshold and cap: engine/methods.py), draft recycling.
* ``As2d(budget)``     — target-decoupled source, budget b (K ≤ b+1), confidence stop
                         where the source has confidences, publication batches.
* ``without_td(b)``    — ablation: serial ASP-style drafting with As²d's budget as cap.
* ``without_bc()``     — ablation: target-decoupled drafting with ASP's threshold/cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from as2d_cli.engine.defaults import (
    ALIGN_MODES,
    DEFAULT_ALIGN,
    DEFAULT_ALIGN_LOOKBACK,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_ASP_CAP,
    DEFAULT_BATCH,
    DEFAULT_THRESHOLD,
)
from as2d_cli.errors import EngineError


@dataclass(frozen=True, slots=True)
class TargetOnly:
    name: str = "target-only"
    serial: ClassVar[bool] = False
    decoupled: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class StandardSD:
    """Fixed physical width ``k`` (known root + k−1 drafts)."""

    k: int
    name: str = "sd"
    serial: ClassVar[bool] = True
    decoupled: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise EngineError("standard SD needs a physical width k >= 1")


@dataclass(frozen=True, slots=True)
class ASP:
    """SpecASR adaptive single-sequence prediction with draft recycling."""

    threshold: float = DEFAULT_THRESHOLD
    cap: int = DEFAULT_ASP_CAP
    recycle: bool = True
    name: str = "asp"
    serial: ClassVar[bool] = True
    decoupled: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise EngineError("ASP needs a cap >= 1")


@dataclass(frozen=True, slots=True)
class As2d:
    """Target-decoupled drafting with a fixed proposal budget."""

    budget: int
    threshold: float | None = DEFAULT_THRESHOLD
    batch: int = DEFAULT_BATCH
    window: int = DEFAULT_ALIGN_WINDOW
    lookback: int = DEFAULT_ALIGN_LOOKBACK
    align: str = DEFAULT_ALIGN  # "paper": C.3's K1 anchor calls; "suffix": alignment.py
    # History candidates (engine/history.py) fill a round the buffer leaves empty.
    history: bool = False
    name: str = "as2d"
    serial: ClassVar[bool] = False
    decoupled: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise EngineError("As²d needs a budget >= 1")
        if self.batch < 1:
            raise EngineError("publication batch must be >= 1")
        if self.window < 0:
            raise EngineError("alignment window must be >= 0")
        if self.lookback < 0:
            raise EngineError("alignment look-back must be >= 0")
        if self.align not in ALIGN_MODES:
            raise EngineError(f"alignment must be one of {', '.join(ALIGN_MODES)}")


Policy = TargetOnly | StandardSD | ASP | As2d


def without_td(budget: int, threshold: float = DEFAULT_THRESHOLD) -> ASP:
    """Ablation "w/o TD": serial ASP-style drafting capped at As²d's budget (paper 5.3, D.5.2)."""
    return ASP(threshold=threshold, cap=budget, name="as2d-no-td")


def without_bc(
    threshold: float = DEFAULT_THRESHOLD, cap: int = DEFAULT_ASP_CAP, align: str = DEFAULT_ALIGN
) -> As2d:
    """Ablation "w/o BC": target-decoupled drafting with ASP's threshold and cap (paper 5.3)."""
    return As2d(budget=cap, threshold=threshold, align=align, name="as2d-no-bc")


def physical_width_limit(policy: Policy) -> int:
    """Largest physical width K a policy can ask for (known root included)."""
    if isinstance(policy, TargetOnly):
        return 1
    if isinstance(policy, StandardSD):
        return policy.k
    if isinstance(policy, ASP):
        return policy.cap + 1
    return policy.budget + 1
