"""Candidates from the target's own committed history (prompt-lookup decoding).

A documented extension beside the paper's sources (docs/engine.md, "History candidates"):
what the audio cannot predict — the target repeating a phrase it already said, a decoder
looping on audio cut mid-word, a stream block picking up the previous block's words — its
own history often can. :class:`HistoryIndex` keeps every n-gram (n = 1…``max_ngram``) of
the tokens seen so far — the context carried into the request (a stream's earlier blocks)
and the committed output — with where each occurred. :meth:`HistoryIndex.propose` looks up
the committed output's last ``n`` tokens, longest ``n`` first down to ``min_ngram``, at
their most recent earlier occurrence ``j``, and proposes:

* in a loop — the output ends with two copies of its last ``p = end − j`` tokens — the loop
  continued, up to ``limit`` tokens (a looping decoder keeps looping);
* otherwise the tokens that followed the occurrence, at most ``short`` of them (a repeated
  phrase is short; a long guess would cost a wide verification for little).

The defaults (``min_ngram`` 2, ``short`` 2) were chosen on the replay of the development
traces with the K70 profile, where one-token matches and longer guesses cost more width
than they saved (docs/measurements.md).

The proposal is verified by the target like any other candidates, so it can never change
what is committed; a wrong one costs verification width only. The index grows by one entry
per n per committed token (:meth:`extend`), so a lookup is a dictionary access, not a scan.
"""

from __future__ import annotations

from collections.abc import Sequence

from as2d_cli.engine.buffer import CandidateBuffer

# The As²d source that is the committed history alone: no producer, nothing published.
HISTORY = "history"
MAX_NGRAM = 3  # longest suffix looked up (prompt-lookup decoding's usual 3)
MIN_NGRAM = 2  # shortest: one matching token is too often a common word
SHORT = 2  # tokens proposed after a match outside a loop


def history_buffer() -> CandidateBuffer:
    """The candidate buffer of the history-alone source: empty and closed."""
    buf = CandidateBuffer(HISTORY)
    buf.close()
    return buf


class HistoryIndex:
    """Where each n-gram of the tokens seen so far occurred (its last token's position)."""

    __slots__ = ("tokens", "max_ngram", "min_ngram", "short", "_at")

    def __init__(
        self,
        context: Sequence[int] = (),
        max_ngram: int = MAX_NGRAM,
        min_ngram: int = MIN_NGRAM,
        short: int = SHORT,
    ) -> None:
        self.tokens: list[int] = []
        self.max_ngram, self.min_ngram, self.short = max_ngram, min_ngram, short
        # n-gram -> its two most recent end positions (the latest may be the suffix itself)
        self._at: dict[tuple[int, ...], tuple[int, int]] = {}
        self.extend(context)

    def extend(self, tokens: Sequence[int]) -> None:
        """Add tokens after those seen so far."""
        for t in tokens:
            self.tokens.append(int(t))
            end = len(self.tokens) - 1
            for n in range(1, min(self.max_ngram, end + 1) + 1):
                gram = tuple(self.tokens[end - n + 1 : end + 1])
                last = self._at.get(gram)
                self._at[gram] = (end, last[0] if last is not None else -1)

    def propose(self, limit: int) -> list[int]:
        """What follows the most recent earlier occurrence of the longest suffix (n =
        ``max_ngram`` … ``min_ngram``) of the tokens seen so far: a loop continued up to
        ``limit`` tokens, else at most ``short`` tokens."""
        toks = self.tokens
        if limit <= 0 or not toks:
            return []
        end = len(toks) - 1
        for n in range(min(self.max_ngram, end + 1), self.min_ngram - 1, -1):
            at = self._at.get(tuple(toks[end - n + 1 :]))
            if at is None:
                continue
            prev = at[1] if at[0] == end else at[0]  # an occurrence before the suffix itself
            if prev < 0:
                continue
            p = end - prev  # the repeat's period
            if end + 1 >= 2 * p and toks[end - 2 * p + 1 : end - p + 1] == toks[end - p + 1 :]:
                unit = toks[end - p + 1 :]  # a loop: it goes on
                return [unit[i % p] for i in range(limit)]
            return toks[prev + 1 : prev + 1 + min(limit, self.short)]
        return []
