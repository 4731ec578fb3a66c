"""What the engine records: one RoundRecord per verifier round, one EpisodeResult per run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class RoundRecord:
    """One target round (a scalar step or a verification call).

    ``ready``: candidates usable at the boundary (published, aligned, after the cursor);
    ``offered``: candidates actually placed after the root (width − 1); ``accepted``: how
    many matched the target; ``root``: the known root processed first; ``new_root``: the
    target's correction (``corrected``) or bonus token carried to the next round.
    """

    index: int
    kind: str  # "target_step" | "verify"
    width: int
    ready: int
    offered: int
    accepted: int
    root: int
    new_root: int
    corrected: bool
    committed: int  # tokens committed by this round (accepted + 1, fewer at EOS)
    align_action: str  # start/advance/alone/reject/insert/search/correction/back/retire/-
    align_offset: int
    cursor: int  # buffer cursor after the round (-1 for serial policies)
    drafted: int = 0  # drafter forwards charged this round (serial policies)
    catch_up: int = 0
    recycled: int = 0  # ASP: reused suffix length (0: no recycling)
    from_history: bool = False  # As²d: the candidates came from the committed history
    start: int = 0  # ns, episode clock
    end: int = 0


@dataclass(slots=True)
class EpisodeResult:
    """The outcome of one request under one policy."""

    policy: str
    tokens: list[int]
    eos: bool  # ended with the target's EOS
    capped: bool  # ended at the output cap without EOS
    rounds: list[RoundRecord] = field(default_factory=list)
    n_rounds: int = 0
    proposed: int = 0  # candidates offered to the target
    accepted: int = 0  # candidates accepted
    drafted: int = 0  # serial drafter forwards (incl. catch-up)
    history_proposed: int = 0  # As²d: of ``proposed``, candidates from the committed history
    history_accepted: int = 0  # of ``accepted``, history candidates
    width_histogram: Counter = field(default_factory=Counter)
    start: int = 0
    end: int = 0  # end of the last target round (drain is the driver's to add)

    @property
    def coverage(self) -> float:
        """Share of decoded tokens (all but the free first token) that were accepted candidates."""
        decoded = len(self.tokens) - 1
        return self.accepted / decoded if decoded > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def multi_token_fraction(self) -> float:
        """Fraction of rounds with physical width K > 1."""
        if not self.n_rounds:
            return 0.0
        return 1.0 - self.width_histogram.get(1, 0) / self.n_rounds

    def summary(self) -> dict:
        return {
            "policy": self.policy,
            "tokens": len(self.tokens),
            "eos": self.eos,
            "capped": self.capped,
            "rounds": self.n_rounds,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "drafted": self.drafted,
            "history_proposed": self.history_proposed,
            "history_accepted": self.history_accepted,
            "coverage": self.coverage,
            "acceptance": self.acceptance,
            "multi_token_fraction": self.multi_token_fraction,
            "width_histogram": {str(k): v for k, v in sorted(self.width_histogram.items())},
        }
