"""The decoding engine: one state machine, six policies, two clocks.

Public API::

    from as2d_cli.engine import (Episode, Limits, TargetOnly, StandardSD, ASP, As2d, without_td,
        without_bc, CandidateBuffer, VirtualClock, WallClock, Op, Target, Drafter, Draft)
"""

from as2d_cli.engine.alignment import Aligner
from as2d_cli.engine.buffer import Batch, CandidateBuffer
from as2d_cli.engine.clock import (
    OTHER,
    PRODUCER,
    VERIFIER,
    Clock,
    Interval,
    Op,
    VirtualClock,
    WallClock,
)
from as2d_cli.engine.episode import Episode, Limits, confidence_stop
from as2d_cli.engine.interfaces import Draft, Drafter, Source, Target
from as2d_cli.engine.policies import (
    ASP,
    As2d,
    Policy,
    StandardSD,
    TargetOnly,
    physical_width_limit,
    without_bc,
    without_td,
)
from as2d_cli.engine.records import EpisodeResult, RoundRecord

__all__ = [
    "ASP",
    "Aligner",
    "As2d",
    "Batch",
    "CandidateBuffer",
    "Clock",
    "Draft",
    "Drafter",
    "Episode",
    "EpisodeResult",
    "Interval",
    "Limits",
    "OTHER",
    "Op",
    "PRODUCER",
    "Policy",
    "RoundRecord",
    "StandardSD",
    "Source",
    "Target",
    "TargetOnly",
    "VERIFIER",
    "VirtualClock",
    "WallClock",
    "confidence_stop",
    "physical_width_limit",
    "without_bc",
    "without_td",
]
