"""One decoding state machine for every policy (paper Section 4, Appendix C).

An :class:`Episode` holds the committed tokens of one request and takes one target round
per :meth:`Episode.step`: it chooses candidates (from the target-decoupled buffer or the
serial drafter), runs one target call with the known root first, commits the matching
greedy prefix plus the target's correction or bonus token (the next root), repairs the
target state to exactly the committed prefix, and realigns the buffer cursor. All work is
wrapped in ``clock.run`` so the same code runs under a virtual (replay) or wall (native)
clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from as2d_cli.engine.alignment import Aligner
from as2d_cli.engine.buffer import CandidateBuffer
from as2d_cli.engine.clock import Clock, Op
from as2d_cli.engine.history import HistoryIndex
from as2d_cli.engine.interfaces import Draft, Drafter, Target
from as2d_cli.engine.policies import ASP, As2d, Policy, StandardSD, TargetOnly
from as2d_cli.engine.records import EpisodeResult, RoundRecord
from as2d_cli.errors import EngineError

_LOOP = Op("loop")
_ALIGN = Op("align")
_OPS: dict[tuple[str, int], Op] = {}  # Op is frozen: one instance per (kind, width) suffices


def _op(kind: str, width: int) -> Op:
    op = _OPS.get((kind, width))
    if op is None:
        op = _OPS[(kind, width)] = Op(kind, width=width)
    return op


def _noop() -> None:
    return None


def confidence_stop(
    tokens: Sequence[int],
    confidences: Sequence[float | None] | None,
    limit: int,
    threshold: float | None,
) -> list[int]:
    """Take up to ``limit`` tokens, stopping after the first one below ``threshold``."""
    out: list[int] = []
    for i in range(min(limit, len(tokens))):
        out.append(tokens[i])
        if threshold is not None and confidences is not None:
            c = confidences[i]
            if c is not None and c < threshold:
                break
    return out


@dataclass(frozen=True, slots=True)
class Limits:
    """Where a request's output ends: at the target's ``eos_id``, or at ``max_tokens`` tokens
    (first token and EOS included)."""

    eos_id: int
    max_tokens: int


class Episode:
    """A request decoded under one policy.

    ``first_token`` is the target's token selected during prefill: committed at time zero,
    it is the first known root. ``limits`` says where the output ends. ``target.length``
    must be 0 (no output token processed yet).
    """

    def __init__(
        self,
        policy: Policy,
        target: Target,
        first_token: int,
        *,
        limits: Limits,
        clock: Clock,
        buffer: CandidateBuffer | None = None,
        drafter: Drafter | None = None,
        keep_rounds: bool = True,
        context: Sequence[int] = (),
    ) -> None:
        eos_id, max_tokens = limits.eos_id, limits.max_tokens
        if max_tokens < 1:
            raise EngineError("max_tokens must be at least 1 (the first token)")
        if policy.decoupled and buffer is None:
            raise EngineError(f"policy {policy.name} needs a candidate buffer fed by a source")
        if policy.serial and drafter is None:
            raise EngineError(f"policy {policy.name} needs a prefix-conditioned drafter")
        if target.length != 0:
            raise EngineError("the target state must start empty (only the prompt processed)")
        self.policy = policy
        self.target = target
        self.eos_id = eos_id
        self.max_tokens = max_tokens
        self.clock = clock
        self.buffer = buffer
        self.drafter = drafter
        self.keep_rounds = keep_rounds
        self.tokens: list[int] = [int(first_token)]
        self.eos = first_token == eos_id
        self.capped = not self.eos and max_tokens <= 1
        self.done = self.eos or self.capped
        self.aligner = (
            Aligner(policy.window, policy.lookback, suffix=policy.align == "suffix")
            if isinstance(policy, As2d)
            else None
        )
        # History candidates (As²d with ``history``): the context carried into the request
        # (a stream's earlier blocks) then the committed output, indexed as it grows.
        self.history = (
            HistoryIndex(context) if isinstance(policy, As2d) and policy.history else None
        )
        self._indexed = 0  # committed tokens already in the history index
        # Serial drafter state: forwards owed for a fully accepted last draft, and the
        # last rejected draft kept for ASP recycling (tokens, confidences, accepted).
        self._behind = 0
        self._rejected: tuple[tuple[int, ...], tuple[float, ...] | None, int] | None = None
        self.result = EpisodeResult(
            policy=policy.name, tokens=self.tokens, eos=self.eos, capped=self.capped
        )
        self.result.start = clock.now()
        self.result.end = self.result.start

    # ------------------------------------------------------------------ rounds
    def run(self) -> EpisodeResult:
        """Take rounds until EOS or the cap; return the result."""
        while not self.done:
            self.step()
        return self.result

    def step(self) -> RoundRecord:
        """Take one target round at the current boundary."""
        if self.done:
            raise EngineError("the episode has ended; no round after EOS or the cap")
        policy = self.policy
        if isinstance(policy, As2d):
            return self._round_decoupled(policy)
        if isinstance(policy, StandardSD):
            return self._round_sd(policy)
        if isinstance(policy, ASP):
            return self._round_asp(policy)
        if isinstance(policy, TargetOnly):
            start = self.clock.now()
            return self._verify([], "target_step", start, ready=0, cursor=-1, action="-")
        raise EngineError(f"unknown policy {policy!r}")

    @property
    def remaining(self) -> int:
        """Tokens the cap still allows; each call commits at least one."""
        return self.max_tokens - len(self.tokens)

    @property
    def _drafter(self) -> Drafter:
        """The serial methods' drafter (the constructor refuses those methods without one)."""
        if self.drafter is None:
            raise EngineError(f"{self.policy.name} drafts serially and needs a drafter")
        return self.drafter

    def _round_sd(self, policy: StandardSD) -> RoundRecord:
        start = self.clock.now()
        limit = min(policy.k - 1, self.remaining - 1)
        chain: list[int] = []
        drafted = catch_up = 0
        if limit > 0:
            catch_up = self._behind
            d = self.clock.run(
                lambda: self._drafter.draft(self.tokens, limit),
                Op("draft", count=limit, catch_up=catch_up),
            )
            chain = list(d.tokens[:limit])
            drafted = limit
        rec = self._verify(chain, "verify", start, ready=len(chain), cursor=-1, action="-")
        rec.drafted, rec.catch_up = drafted, catch_up
        self._after_serial(chain, None, rec)
        return rec

    def _round_asp(self, policy: ASP) -> RoundRecord:
        start = self.clock.now()
        limit = min(policy.cap, self.remaining - 1)
        chain: list[int] = []
        confs: tuple[float, ...] | None = None
        drafted = catch_up = recycled = 0
        if limit > 0:
            if self._rejected is not None and policy.recycle:
                chain, confs, recycled, drafted = self._recycle(policy, limit)
            else:
                catch_up = self._behind
                d: Draft = self.clock.run(
                    lambda: self._drafter.draft(self.tokens, limit, policy.threshold),
                    lambda d: Op(
                        "draft",
                        count=min(len(d.tokens), limit),
                        catch_up=catch_up,
                        rows=min(len(d.tokens), limit),
                    ),
                )
                chain = confidence_stop(d.tokens, d.confidences, limit, policy.threshold)
                confs = d.confidences
                drafted = len(chain)
        rec = self._verify(chain, "verify", start, ready=len(chain), cursor=-1, action="-")
        rec.drafted, rec.catch_up, rec.recycled = drafted, catch_up, recycled
        self._after_serial(chain, confs, rec)
        if recycled:
            self._behind = 0  # the refresh processed every reused token
        return rec

    def _recycle(
        self, policy: ASP, limit: int
    ) -> tuple[list[int], tuple[float, ...] | None, int, int]:
        """SpecASR draft recycling after a rejection.

        A paired-branch forward yields the drafter's token after the corrected prefix; if
        it matches the rejected draft at the same position or an adjacent one, the old
        suffix from there is reused (its KV refreshed in one batch) and verified again.
        Otherwise drafting continues from that token as usual."""
        old, old_conf, a = self._rejected  # type: ignore[misc]
        first: Draft = self.clock.run(
            lambda: self._drafter.draft(self.tokens, 1), Op("paired", rows=1)
        )
        if first.tokens:
            g = first.tokens[0]
            for j in (a + 1, a, a + 2):  # same position, then target insertion, then deletion
                if j < len(old) and old[j] == g:
                    suffix = old[j:]
                    sconf = None if old_conf is None else old_conf[j:]
                    chain = confidence_stop(suffix, sconf, limit, policy.threshold)
                    refresh = getattr(self._drafter, "refresh", None)
                    work = _noop if refresh is None else partial(refresh, self.tokens, chain)
                    self.clock.run(work, Op("refresh", width=len(chain)))
                    return chain, sconf, len(chain), 0
        d: Draft = self.clock.run(
            lambda: self._drafter.draft(self.tokens, limit, policy.threshold),
            lambda d: Op(
                "draft",
                count=max(min(len(d.tokens), limit) - 1, 0),
                rows=max(min(len(d.tokens), limit) - 1, 0),
            ),
        )
        chain = confidence_stop(d.tokens, d.confidences, limit, policy.threshold)
        return chain, d.confidences, 0, len(chain)

    def _after_serial(
        self, chain: list[int], confs: tuple[float, ...] | None, rec: RoundRecord
    ) -> None:
        self.clock.run(_noop, _LOOP)
        rec.end = self.result.end = self.clock.now()
        self.result.drafted += rec.drafted + rec.catch_up
        if chain and rec.accepted == len(chain):
            self._behind = 1  # the last draft was never forwarded by the drafter
            self._rejected = None
        elif chain:
            self._behind = 0
            self._rejected = (
                tuple(chain),
                None if confs is None else tuple(confs[: len(chain)]),
                rec.accepted,
            )
        else:
            self._behind = 0
            self._rejected = None

    def _round_decoupled(self, policy: As2d) -> RoundRecord:
        start = self.clock.now()
        buf, aligner = self.buffer, self.aligner
        if buf is None or aligner is None:
            raise EngineError(f"{policy.name} reads a candidate buffer; give the episode one")
        tokens = buf.tokens
        root = self.tokens[-1]
        ready = buf.ready_count(start)
        first = aligner.usable_start(tokens, ready, root)
        anchor_round = first is None
        if anchor_round:
            # Suffix anchoring (alignment.py): offer the source's likeliest continuation
            # instead of processing the root alone (None: the root alone, as the paper's).
            first = aligner.guess(tokens, ready, self.tokens)
        chain: list[int] = []
        usable = 0
        if first is not None:
            usable = max(0, ready - first)
            stop = min(ready, first + min(policy.budget, self.remaining - 1))
            chain = confidence_stop(
                tokens[first:stop], buf.confidences[first:stop], stop - first, policy.threshold
            )
            if self.eos_id in chain:  # a source ends at its EOS: nothing after it is offered
                chain = chain[: chain.index(self.eos_id) + 1]
        from_history = False
        if not chain and self.history is not None and self.remaining > 1:
            # The merge rule: the buffer first; history fills a round it leaves empty.
            chain = self.clock.run(
                lambda: self._history_chain(min(policy.budget, self.remaining - 1)), _ALIGN
            )
            from_history = bool(chain)
        before = len(self.tokens)
        rec = self._verify(chain, "verify", start, ready=usable, cursor=aligner.cursor, action="-")
        rec.from_history = from_history
        if from_history:
            self.result.history_proposed += rec.offered
            self.result.history_accepted += min(rec.accepted, rec.committed)
        if not self.done and from_history:
            committed = self.tokens[before:]
            self.clock.run(
                lambda: aligner.after_alone(tokens, buf.ready_count(self.clock.now()), committed),
                _ALIGN,
            )
        elif not self.done:
            accepted, new_root = rec.accepted, rec.new_root
            self.clock.run(
                lambda: aligner.after_call(
                    tokens,
                    buf.ready_count(self.clock.now()),
                    len(chain),
                    accepted,
                    new_root,
                    anchor_round,
                ),
                _ALIGN,
            )
            rec.align_action = aligner.last_action
            rec.align_offset = aligner.last_offset
            rec.cursor = aligner.cursor
        rec.end = self.clock.now()
        self.result.end = rec.end
        return rec

    def _history_chain(self, limit: int) -> list[int]:
        """History candidates after the committed output (engine/history.py)."""
        assert self.history is not None
        self.history.extend(self.tokens[self._indexed :])
        self._indexed = len(self.tokens)
        return self.history.propose(limit)

    # ------------------------------------------------------------ verification
    def _verify(
        self, chain: list[int], kind: str, start: int, *, ready: int, cursor: int, action: str
    ) -> RoundRecord:
        """One target call: known root + chain, commit the matching greedy prefix and the
        next root, stop at EOS or the cap, and roll the target back to the committed prefix."""
        root = self.tokens[-1]
        inputs = [root, *chain]
        width = len(inputs)
        n_chain = width - 1
        target = self.target
        state = [0, 0, 0]  # accepted, next root, committed

        def work() -> None:
            decisions = target.verify(inputs)
            if len(decisions) != width:
                raise EngineError(f"target returned {len(decisions)} decisions for width {width}")
            a = 0
            while a < n_chain and chain[a] == decisions[a]:
                a += 1
            nxt = int(decisions[a])
            state[0] = a
            state[1] = nxt
            state[2] = self._commit(chain[:a], nxt)
            # State repair: keep exactly the committed prefix minus the pending root.
            target.rollback(len(self.tokens) - 1)

        clock = self.clock
        clock.run(work, _op(kind, width))
        end = clock.now()
        a, nxt, committed = state
        res = self.result
        res.n_rounds += 1
        res.proposed += n_chain
        res.accepted += min(a, committed)
        res.width_histogram[width] += 1
        res.end = end
        rec = RoundRecord(
            index=res.n_rounds - 1,
            kind=kind,
            width=width,
            ready=ready,
            offered=n_chain,
            accepted=a,
            root=root,
            new_root=nxt,
            corrected=a < n_chain,
            committed=committed,
            align_action=action,
            align_offset=0,
            cursor=cursor,
            start=start,
            end=end,
        )
        if self.keep_rounds:
            res.rounds.append(rec)
        return rec

    def _commit(self, accepted: list[int], next_root: int) -> int:
        """Append accepted candidates and the next root, ending at EOS or the cap."""
        n = 0
        for t in accepted:
            self.tokens.append(t)
            n += 1
            if t == self.eos_id:
                self._finish(eos=True)
                return n
        self.tokens.append(next_root)
        n += 1
        if next_root == self.eos_id:
            self._finish(eos=True)
        elif len(self.tokens) >= self.max_tokens:
            self._finish(eos=False)
        return n

    def _finish(self, *, eos: bool) -> None:
        self.done = True
        self.eos = eos
        self.capped = not eos
        self.result.eos = eos
        self.result.capped = not eos
