"""Device cost profiles (``as2d.profile`` v1, YAML): measured phone costs for replay.

In memory: :class:`CostProfile` (frozen). All costs are milliseconds (floats); the
engine's clocks use integer nanoseconds, :func:`ms_to_ns` converts. Only measured widths
exist: asking for any other width raises :class:`~as2d_cli.errors.FormatError` naming the
width and the profile file — never a zero cost (D.2.1).

Methods the replay codes against:

* ``p.target_step_ms`` — target-only scalar step (attribute).
* ``p.verify_ms(K, concurrent=False, source=None)`` — width-K verification; concurrent
  multiplies the idle cost by the concurrent/idle ratio for K (the source's own ratio
  table when it has one, else the profile's).
* ``p.widths`` — measured physical widths (sorted); ``p.max_width``; ``p.has_width(K)``.
* ``p.concurrent_ratio(K, source=None)``.
* ``p.draft_ms(count, catch_up=0, rows=0)`` — serial prefix-conditioned drafter forwards
  (count + catch_up forwards, plus ``rows`` confidence rows).
* ``p.paired_ms(rows=1)`` — ASP paired-branch forward plus its confidence rows.
* ``p.refresh_ms(width)`` — ASP batched KV refresh of ``width`` reused tokens (0 → 0).
* ``p.loop_ms`` — loop residual per serial round; ``p.align_ms`` — As²d align/queue work
  per round.
* ``p.source(name)`` → :class:`SourceCosts` with ``step_ms(concurrent)`` (one
  autoregressive source forward), ``chunk_ms(concurrent)`` (one chunk's service),
  ``publish_ms``, ``startup_ms``, ``concurrent_ratio`` (the producer's own slowdown while
  the target is busy).
* ``p.op_ms(op, concurrent=False, source=None)`` — price one engine
  :class:`~as2d_cli.engine.clock.Op` (kinds target_step, verify, draft, paired, refresh,
  loop, align).
* ``p.context`` — :class:`ContextCosts` or None: linear per-call terms in the decoder
  cache length and the window's audio length (v2); None charges every call its flat
  figure, as the paper's profiles do.
* ``p.in_loop_ratio(family, kind)`` — in-loop/sweep cost ratio for one method family's op
  kind (``costs.in_loop``, see :data:`IN_LOOP_KINDS`); 1.0 when the profile has none.
* ``p.fit`` — :class:`Fit` (method, raw ``samples`` by figure name, notes); ``p.device``
  — device facts; ``p.synthetic`` — True for the made-up anchor profile; ``p.path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from as2d_cli.errors import FormatError

SCHEMA = "as2d.profile"
VERSION = 2
# Version history: 1 — first release. 2 — optional ``costs.context`` (context-length and
# audio-length terms) and a source's ``startup_ms_per_audio_s``; a v1 file reads as v2
# with neither (flat costs). Still 2: optional ``costs.in_loop`` (in-loop/sweep cost ratios
# per method family and op kind); a file without it prices every op at its sweep figure.

# Method family → op kinds an ``in_loop`` ratio may be given for. For "as2d", "verify" is
# target verification after the producer finished (calls while the producer runs use the
# per-source concurrent ratios).
IN_LOOP_KINDS: dict[str, tuple[str, ...]] = {
    "sd": ("verify", "draft"),
    "asp": ("verify", "draft", "paired", "refresh"),
    "as2d": ("verify",),
}


def ms_to_ns(ms: float) -> int:
    """Milliseconds → integer nanoseconds (the engine clock's unit)."""
    return int(round(ms * 1_000_000))


@dataclass(frozen=True, slots=True)
class Fit:
    """How the figures were obtained: a method description, the raw samples (ms) each
    figure was fitted from, keyed by figure name (``target_step``, ``verify.K8``,
    ``sources.qwen.step``…), and free notes."""

    method: str
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    notes: str = ""


@dataclass(frozen=True, slots=True)
class DrafterCosts:
    """The prefix-conditioned serial drafter (standard SD and SpecASR-ASP)."""

    step_ms: float  # one scalar draft forward
    catch_up_ms: float  # forward of a fully accepted draft's last token
    paired_ms: float  # ASP paired-branch forward
    row_ms: float  # ASP probability computation per output row
    refresh_ms: Mapping[int, float] = field(default_factory=dict, hash=False)  # width → ms


@dataclass(frozen=True, slots=True)
class SourceCosts:
    """A target-decoupled source on this device."""

    name: str
    kind: str  # "autoregressive" | "chunked"
    step_ms_idle: float = 0.0  # autoregressive: one source forward (one step: a token, or
    # for a self-speculating source one or two, as the trace's ``steps`` say)
    chunk_ms_idle: float = 0.0  # chunked: one chunk's service
    publish_ms: float = 0.0  # one publication into the buffer
    startup_ms: float = 0.0  # before the first step/chunk (on the decode clock)
    concurrent_ratio: float = 1.0  # the producer's own slowdown while the target is busy
    verify_concurrent_ratio: Mapping[int, float] | None = field(default=None, hash=False)
    startup_ms_per_audio_s: float = 0.0  # startup (audio encoding) grows with the window

    def startup_for(self, audio_s: float | None, ref_audio_s: float | None) -> float:
        """Startup for a window of ``audio_s`` seconds (flat when either is unknown)."""
        if audio_s is None or ref_audio_s is None or not self.startup_ms_per_audio_s:
            return self.startup_ms
        return max(0.0, self.startup_ms + self.startup_ms_per_audio_s * (audio_s - ref_audio_s))

    def step_ms(self, concurrent: bool = False) -> float:
        return self.step_ms_idle * (self.concurrent_ratio if concurrent else 1.0)

    def chunk_ms(self, concurrent: bool = False) -> float:
        return self.chunk_ms_idle * (self.concurrent_ratio if concurrent else 1.0)


@dataclass(frozen=True, slots=True)
class ContextCosts:
    """Linear context terms: a call's cost is its flat figure (quoted at the reference
    point) plus ``ms_per_token`` × (cache length − ``ref_tokens``) plus ``ms_per_audio_s``
    × (window seconds − ``ref_audio_s``). Small decoders pay visibly for a longer KV cache
    and longer cross-attention; a phone's 1.7B target mostly does not (the paper fits none).
    Target terms price target steps and verification; drafter terms price serial drafter
    forwards and an autoregressive source's steps (its own history is its cache)."""

    ref_tokens: float
    ref_audio_s: float
    target_ms_per_token: float = 0.0
    target_ms_per_audio_s: float = 0.0
    drafter_ms_per_token: float = 0.0
    drafter_ms_per_audio_s: float = 0.0
    # Each width beyond 1 adds this much to the slopes: a K-token call attends over the
    # cache and the audio with K queries.
    target_ms_per_token_per_width: float = 0.0
    target_ms_per_audio_s_per_width: float = 0.0

    def target_token_slope(self, width: int = 1) -> float:
        """ms per cached token for a width-``width`` target call."""
        return self.target_ms_per_token + (width - 1) * self.target_ms_per_token_per_width

    def target_ms(self, tokens: float, audio_s: float, width: int = 1) -> float:
        """Extra ms (may be negative) for a width-``width`` target call at cache length ``tokens``."""
        audio_slope = (
            self.target_ms_per_audio_s + (width - 1) * self.target_ms_per_audio_s_per_width
        )
        return self.target_token_slope(width) * (tokens - self.ref_tokens) + audio_slope * (
            audio_s - self.ref_audio_s
        )

    def drafter_ms(self, tokens: float, audio_s: float) -> float:
        """Extra ms (may be negative) for one drafter forward at cache length ``tokens``."""
        return self.drafter_ms_per_token * (
            tokens - self.ref_tokens
        ) + self.drafter_ms_per_audio_s * (audio_s - self.ref_audio_s)


@dataclass(frozen=True, slots=True)
class CostProfile:
    device: Mapping[str, Any]
    target_step_ms: float
    verify_idle_ms: Mapping[int, float]  # physical width K → idle verification ms
    verify_concurrent_ratio: Mapping[int, float]  # K → concurrent/idle ratio
    loop_ms: float
    align_ms: float
    drafter: DrafterCosts | None
    sources: Mapping[str, SourceCosts]
    fit: Fit
    synthetic: bool = False
    created: str = ""
    context: ContextCosts | None = None
    # family → op kind → in-loop cost ÷ sweep-priced cost (``costs.in_loop``); None = all 1.0
    in_loop: Mapping[str, Mapping[str, float]] | None = None
    path: str = "<profile>"  # where it was loaded from (for messages)
    schema: str = SCHEMA
    version: int = VERSION

    # --------------------------------------------------------------- widths
    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted(self.verify_idle_ms))

    @property
    def max_width(self) -> int:
        return max(self.verify_idle_ms)

    def has_width(self, k: int) -> bool:
        return k in self.verify_idle_ms

    def _missing_width(self, k: int, what: str) -> FormatError:
        have = _ranges(self.widths)
        return FormatError(
            f"{self.path}: {what} width K{k} was not measured (profile has K{have}); "
            f"lower the budget/width to a measured one or recalibrate with `as2d calibrate` to cover K{k}"
        )

    # ------------------------------------------------------------ verifier
    def concurrent_ratio(self, k: int, source: str | None = None) -> float:
        table = self.verify_concurrent_ratio
        if source is not None:
            own = self.source(source).verify_concurrent_ratio
            if own:
                table = own
        r = table.get(k)
        if r is None:
            raise self._missing_width(k, "concurrent/idle ratio for verification")
        return r

    def verify_ms(self, k: int, concurrent: bool = False, source: str | None = None) -> float:
        ms = self.verify_idle_ms.get(k)
        if ms is None:
            raise self._missing_width(k, "verification")
        return ms * self.concurrent_ratio(k, source) if concurrent else ms

    # ------------------------------------------------------- serial drafter
    def _drafter(self) -> DrafterCosts:
        if self.drafter is None:
            raise FormatError(
                f"{self.path}: no 'drafter' costs; standard SD and SpecASR-ASP need them — recalibrate with drafter probes"
            )
        return self.drafter

    def draft_ms(self, count: int, catch_up: int = 0, rows: int = 0) -> float:
        d = self._drafter()
        return count * d.step_ms + catch_up * d.catch_up_ms + rows * d.row_ms

    def paired_ms(self, rows: int = 1) -> float:
        d = self._drafter()
        return d.paired_ms + rows * d.row_ms

    def refresh_ms(self, width: int) -> float:
        if width <= 0:
            return 0.0
        ms = self._drafter().refresh_ms.get(width)
        if ms is None:
            have = _ranges(tuple(sorted(self._drafter().refresh_ms))) or "none"
            raise FormatError(
                f"{self.path}: KV refresh width {width} was not measured (profile has widths {have}); "
                f"lower ASP's cap or recalibrate refresh widths up to {width}"
            )
        return ms

    # -------------------------------------------------------------- sources
    def source(self, name: str) -> SourceCosts:
        s = self.sources.get(name)
        if s is None:
            raise FormatError(
                f"{self.path}: no costs for source {name!r} (profile has {', '.join(sorted(self.sources)) or 'none'}); "
                f"pick a calibrated source or recalibrate with it"
            )
        return s

    # -------------------------------------------------------------- in loop
    def in_loop_ratio(self, family: str, kind: str) -> float:
        """In-loop/sweep cost ratio for op ``kind`` in method ``family`` (1.0 when absent)."""
        if not self.in_loop:
            return 1.0
        return float((self.in_loop.get(family) or {}).get(kind, 1.0))

    # ------------------------------------------------------------ engine ops
    def op_ms(self, op: Any, concurrent: bool = False, source: str | None = None) -> float:
        """Price an engine Op in ms (``concurrent``: the producer is busy meanwhile)."""
        kind = op.kind
        if kind == "target_step":
            return self.target_step_ms
        if kind == "verify":
            return self.verify_ms(op.width, concurrent, source)
        if kind == "draft":
            return self.draft_ms(op.count, op.catch_up, op.rows)
        if kind == "paired":
            return self.paired_ms(op.rows)
        if kind == "refresh":
            return self.refresh_ms(op.width)
        if kind == "loop":
            return self.loop_ms
        if kind == "align":
            return self.align_ms
        raise FormatError(f"{self.path}: no cost for engine operation {kind!r}")


def _ranges(ks: tuple[int, ...]) -> str:
    """(1,2,3,5,8,9) → '1–3,5,8–9'."""
    out: list[str] = []
    i = 0
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        out.append(f"{ks[i]}" if i == j else f"{ks[i]}–{ks[j]}")
        i = j + 1
    return ",".join(out)
