"""Candidate alignment (paper C.3): where in the buffer the next usable candidates start.

State: ``pos`` is the buffer index whose candidate proposed the *current root's* output
position. ``status`` says whether ``buffer[pos]`` equals the root (MATCHED), differs from it
(MISMATCH: candidates after ``pos`` are not usable until an anchor is found) or is not
published yet (UNKNOWN: decided once it is).

Rules, after each verification call that committed ``accepted`` candidates and a new root:

* The root's position moves by ``accepted + 1``.
* Full acceptance: the cursor simply advances; the new root (bonus) is compared with the
  candidate at its position when that is published.
* Rejection: the candidate at the mismatch position ``p`` differs from the correction
  ``x``. The next call processes ``x`` alone (K1) to learn the next target token ``y``,
  the first anchor. Then, in order:
  1. ``buffer[p] == y``: position ``p`` stays eligible (the target inserted ``x``);
  2. local search for ``y`` in ``buffer[p+1 : p+1+window]`` (published part), nearest first;
  3. search for the correction ``x`` in the same window followed by ``y`` (its continuation);
  4. look back over the positions this mismatch has already retired (at most
     ``lookback`` of them, nearest first): the target has inserted several tokens, or
     said in more tokens what the source said in fewer, and the source's continuation
     sits behind the slid position;
  5. otherwise position ``p`` is retired (the search window moves on by one position) and
     the target continues alone, searching again after each further token.
* The search is bounded by ``window`` positions ahead and ``lookback`` behind (defaults
  8 and 8), so each round's alignment work is O(window + lookback). Published tokens
  never change; only the cursor moves.

**Suffix anchoring** (``suffix=True``, the toolkit's extension; ``--align paper`` turns it
off): while an anchor is awaited, the call that would process the correction alone (K1)
instead offers the source's continuation after the position whose preceding tokens best
match the committed output's suffix (:meth:`Aligner.guess`: the longest match of up to
``SUFFIX_NGRAM`` tokens ending with the root, nearest the mismatch; within the rules'
bounds, or ``SUFFIX_REACH × window`` further when at least two tokens match). The target's
first decision in that call is the anchor ``y`` either way: if it accepts a candidate the
cursor continues from the guess; if it accepts none the paper's rules run on ``y`` exactly
as after a K1 call. A wrong guess costs verification width, never a token or a round.

Rule 4 is the toolkit's reading of C.3's "unmatched positions are retired": a retired
position leaves the cursor but stays within the bounded local search until the mismatch
is resolved. Without it (``lookback=0``, the strict reading) one multi-token target
insertion loses the source for the rest of the window: the cursor slides one position
per target token and the forward search never returns to the continuation (docs/engine.md
gives the measured effect).
"""

from __future__ import annotations

from collections.abc import Sequence

MATCHED = 1
SUFFIX_NGRAM = 4  # longest committed suffix a guess compares (longer matches rank alike)
SUFFIX_REACH = 2  # a ≥ 2-token match may lie this many windows beyond the rules' bounds
MISMATCH = 0
UNKNOWN = -1


class Aligner:
    __slots__ = (
        "pos",
        "status",
        "window",
        "lookback",
        "origin",
        "correction",
        "last_action",
        "last_offset",
        "suffix",
        "_guessed",
    )

    def __init__(self, window: int, lookback: int = 0, suffix: bool = False) -> None:
        # The first token (selected during prefill) sits at position 0 of the source's
        # sequence: a source transcribes the same output from its start.
        self.pos = 0
        self.status = UNKNOWN
        self.window = window
        self.lookback = lookback
        self.origin = 0  # the position where the current mismatch began (rule 4's floor)
        self.correction: int | None = None  # x, while waiting for the anchor y
        self.last_action = "start"
        self.last_offset = 0
        self.suffix = suffix
        self._guessed: int | None = None  # where the current anchor call's candidates start

    @property
    def cursor(self) -> int:
        """Buffer index of the next candidate to offer (after the root's position)."""
        return self.pos + 1

    def usable_start(self, tokens: Sequence[int], ready: int, root: int) -> int | None:
        """Index of the first usable candidate at this boundary, or None if none is usable.

        Resolves an UNKNOWN root position once the candidate there is published."""
        if self.status == UNKNOWN and self.pos < ready:
            if tokens[self.pos] == root:
                self.status = MATCHED
            else:
                self._mismatch(root)
        if self.status == MISMATCH:
            return None
        return self.pos + 1

    def guess(self, tokens: Sequence[int], ready: int, committed: Sequence[int]) -> int | None:
        """With suffix anchoring, while an anchor is awaited: the buffer index where the
        source most likely continues the committed output (its last token is the root), or
        None (nothing matches: the call processes the root alone, as the paper's)."""
        self._guessed = None
        if not self.suffix or self.status != MISMATCH or not committed:
            return None
        root = committed[-1]
        p = self.pos
        near_lo, near_hi = max(0, p - self.lookback), p + self.window
        reach = SUFFIX_REACH * self.window
        best: tuple[int, int] | None = None  # (−match length, distance): smallest wins
        for j in range(max(0, near_lo - reach), min(ready - 1, near_hi + reach)):
            if tokens[j] != root:
                continue
            n = 1
            while n < SUFFIX_NGRAM and n < len(committed) and j >= n:
                if tokens[j - n] != committed[-1 - n]:
                    break
                n += 1
            if n < 2 and not near_lo <= j < near_hi:
                continue  # one matching token far away is too often a repeat
            key = (-n, abs(j + 1 - p))
            if best is None or key < best:
                best, self._guessed = key, j + 1
        return self._guessed

    def after_call(
        self,
        tokens: Sequence[int],
        ready: int,
        offered: int,
        accepted: int,
        root: int,
        anchor_round: bool,
    ) -> None:
        """Update after a call that offered ``offered`` candidates from the cursor,
        accepted ``accepted`` of them and produced the new ``root``."""
        if anchor_round:
            g, self._guessed = self._guessed, None
            if g is None or accepted == 0:
                self._anchor(tokens, ready, root)  # the first decision is the anchor y
                return
            # The guessed continuation was accepted: the old root sat at g − 1.
            offset = g - 1 - self.pos
            self.pos = g - 1
            self.correction = None
            self._advance(tokens, ready, offered, accepted, root)
            self.last_action = "suffix"
            self.last_offset = offset
            return
        self._advance(tokens, ready, offered, accepted, root)

    def after_alone(self, tokens: Sequence[int], ready: int, committed: Sequence[int]) -> None:
        """After a call whose candidates did not come from the buffer (history candidates,
        engine/history.py): the cursor moves as if each committed token had come from its
        own call processing the root alone — an anchor call while a mismatch awaits one,
        else a plain step — so the buffer's alignment is what it would have been."""
        self._guessed = None
        for t in committed:
            self.after_call(tokens, ready, 0, 0, int(t), self.status == MISMATCH)

    def _advance(
        self, tokens: Sequence[int], ready: int, offered: int, accepted: int, root: int
    ) -> None:
        """The cursor after a call that offered candidates from ``pos + 1`` (or none)."""
        self.pos += accepted + 1
        if accepted < offered:
            # Rejection: the candidate at pos was offered and differs from the correction.
            self._mismatch(root)
            self.last_action = "reject"
            self.last_offset = 0
            return
        self.last_action = "advance" if offered else "alone"
        self.last_offset = 0
        if self.pos < ready:
            if tokens[self.pos] == root:
                self.status = MATCHED
            else:
                self._mismatch(root)
        else:
            self.status = UNKNOWN

    def _anchor(self, tokens: Sequence[int], ready: int, y: int) -> None:
        """A K1 call processed the correction x and produced the next target token y."""
        p = self.pos  # the mismatch position (x's output position)
        x = self.correction
        if p < ready and tokens[p] == y:
            # 1. target insertion: p proposes y's position and stays eligible.
            self._found(p, "insert", 0)
            return
        hi = min(ready, p + 1 + self.window)
        for j in range(p + 1, hi):
            if tokens[j] == y:
                # 2. the next target token found nearby.
                self._found(j, "search", j - p)
                return
        if x is not None:
            for j in range(p + 1, hi):
                if tokens[j] == x and j + 1 < ready and tokens[j + 1] == y:
                    # 3. the correction token and its continuation.
                    self._found(j + 1, "correction", j + 1 - p)
                    return
        for j in range(min(p, ready) - 1, max(self.origin, p - self.lookback) - 1, -1):
            if tokens[j] == y:
                # 4. the next target token among the positions this mismatch retired.
                self._found(j, "back", j - p)
                return
        # 5. retire position p; the target continues alone and the anchor moves on.
        self.pos = p + 1
        self.status = MISMATCH
        self.correction = y
        self.last_action = "retire"
        self.last_offset = 0

    def _mismatch(self, correction: int) -> None:
        """The candidate at ``pos`` differs from the target's token there: a new mismatch
        starts, and only positions from here on may be looked back to."""
        self.status = MISMATCH
        self.correction = correction
        self.origin = self.pos

    def _found(self, j: int, action: str, offset: int) -> None:
        self.pos = j
        self.status = MATCHED
        self.correction = None
        self.last_action = action
        self.last_offset = offset

    @property
    def awaiting_anchor(self) -> bool:
        return self.status == MISMATCH
