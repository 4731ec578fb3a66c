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
* ``p.allowed_implausible`` — the plausibility problems a command was told to accept
  (``--allow-implausible``); empty for a plausible profile. :func:`implausibilities` lists
  them (the rules and ranges: :data:`PLAUSIBLE`, docs/formats.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from as2d_cli.errors import FormatError
from as2d_cli.formats import registry

SCHEMA, VERSION = registry.name_version("as2d.profile")
# Version history: 1 — first release. 2 — optional ``costs.context`` (context-length and
# audio-length terms) and a source's ``startup_ms_per_audio_s``; a v1 file reads as v2
# with neither (flat costs). Still 2: optional ``costs.in_loop`` (in-loop/sweep cost ratios
# per method family and op kind); a file without it prices every op at its sweep figure.
# 3 — a source's startup is an idle figure like its steps (the replay applies the
# concurrent ratio to it); a v2 file with ``costs.in_loop`` stored the startup its episodes
# observed beside the target, and reads as v3 with it divided by the source's ratio.

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
    # How these costs were derived when they were neither measured nor published (the K70
    # profile of the shipped audio-LLM pair scales the paper's draft forward by model size);
    # None: measured or published.
    derived: str | None = None


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
    # How the costs were derived when they were neither measured nor published (e.g. the
    # K70 profile's look-ahead forward, from the drafter's forward); None: not derived.
    derived: str | None = None

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
    # Plausibility problems accepted with --allow-implausible (results record them); never
    # stored in the profile file: they are a property of one use of it.
    allowed_implausible: tuple[str, ...] = ()

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


# ------------------------------------------------------------------ plausibility
# The documented ranges (docs/formats.md, "Plausibility"): (low, high) per kind of figure.
# A figure outside them is a unit slip (seconds or microseconds written as ms), a typo or a
# broken measurement, not a device: the fastest forward any supported model makes on any
# host is ~0.1 ms (a 2-layer 48-wide decoder on a desktop core), a phone's 1.7B target
# step ~60 ms; nothing that decodes speech takes 10 s a forward.
PLAUSIBLE: dict[str, tuple[float, float]] = {
    "forward_ms": (0.01, 10_000.0),  # target step, verification, drafter/source forwards
    "extra_ms": (0.0, 10_000.0),  # catch-up, paired, row and refresh work
    "overhead_ms": (0.0, 1_000.0),  # loop residual, alignment, publication
    "startup_ms": (0.0, 60_000.0),  # a source's start (audio encoding) on the decode clock
    "concurrent_ratio": (1.0, 10.0),  # cost beside the other model ÷ cost alone
    "in_loop_ratio": (0.1, 10.0),  # in-loop cost ÷ sweep-priced cost
}
# Drops below the floor of a range, or between widths, smaller than this share of the
# figure are measurement noise even when the raw samples cannot show it (one sample, or a
# synthetic profile's interpolated widths).
NOISE_FLOOR = 0.05
# A target step and a width-1 verification are both one target forward: a bigger gap
# than this factor is a unit slip in one of them.
K1_STEP_FACTOR = 10.0


def _spread(samples: Mapping[str, tuple[float, ...]], key: str) -> float:
    """The measured noise of one figure: max − min of its raw samples, preemptions (over
    3× the median, as the fit drops them) left out; 0 without samples."""
    xs = [x for x in samples.get(key, ()) if math.isfinite(x)]
    if len(xs) < 2:
        return 0.0
    m = median(xs)
    xs = [x for x in xs if x <= 3 * m] if m > 0 else xs
    return max(xs) - min(xs) if len(xs) > 1 else 0.0


def _relative_noise(samples: Mapping[str, tuple[float, ...]], *keys: str) -> float:
    """The summed relative spread of ``keys``' samples (a ratio of two noisy figures is
    as noisy as both), at least :data:`NOISE_FLOOR`."""
    rel = 0.0
    for key in keys:
        xs = [x for x in samples.get(key, ()) if math.isfinite(x)]
        if xs and median(xs) > 0:
            rel += _spread(samples, key) / median(xs)
    return max(NOISE_FLOOR, rel)


def _verify_drops(p: CostProfile) -> list[str]:
    """Each width's idle verification against the dearest narrower one (so a slow drift
    down is caught too), beyond the measured noise."""
    out: list[str] = []
    s = p.fit.samples
    top: tuple[int, float] | None = None
    for k, v in sorted(p.verify_idle_ms.items()):
        if top is not None and v < top[1]:
            noise = max(
                NOISE_FLOOR * top[1],
                _spread(s, f"verify.K{top[0]}"),
                _spread(s, f"verify.K{k}"),
            )
            if top[1] - v > noise:
                out.append(
                    f"key costs.verify.idle_ms.K{k}: {v:g} ms is below K{top[0]}'s {top[1]:g} ms "
                    f"by more than the measured noise ({noise:.3g} ms); a wider verification "
                    f"cannot be cheaper"
                )
        if top is None or v > top[1]:
            top = (k, v)
    return out


def _k1_gap(p: CostProfile) -> list[str]:
    """The target step and the width-1 verification, both one target forward, too far apart."""
    k1 = p.verify_idle_ms.get(1)
    if k1 is None or k1 <= 0 or p.target_step_ms <= 0:
        return []
    gap = max(k1, p.target_step_ms) / min(k1, p.target_step_ms)
    if gap <= K1_STEP_FACTOR:
        return []
    return [
        f"key costs.target_step_ms: {p.target_step_ms:g} ms is {gap:.0f}× the width-1 "
        f"verification's {k1:g} ms; both are one target forward (a unit slip: ms, s, µs?)"
    ]


def implausibilities(p: CostProfile) -> list[str]:
    """What makes ``p`` physically implausible, one ``key …: why`` phrase each (empty: it
    is plausible). The rules (docs/formats.md, "Plausibility"):

    * every figure within its :data:`PLAUSIBLE` range;
    * the verifier's idle cost does not fall as K grows by more than the measured noise
      (the spread of both widths' raw samples, at least :data:`NOISE_FLOOR` of the cost);
    * concurrent/idle ratios ≥ 1 within the measured noise (at least NOISE_FLOOR): the
      other model never makes a call cheaper;
    * the target step within :data:`K1_STEP_FACTOR` of the width-1 verification."""
    out: list[str] = []
    s = p.fit.samples

    def in_range(key: str, value: float, kind: str) -> None:
        lo, hi = PLAUSIBLE[kind]
        if not lo <= value <= hi:
            unit = "" if kind.endswith("ratio") else " ms"
            out.append(f"key {key}: {value:g}{unit} is outside the plausible {lo:g}–{hi:g}{unit}")

    def ratio(key: str, value: float, noise: float) -> None:
        lo, hi = PLAUSIBLE["concurrent_ratio"]
        if value < lo - noise:
            out.append(
                f"key {key}: {value:g} is below 1 by more than the measured noise "
                f"({noise:.0%}); running beside the other model cannot make a call cheaper"
            )
        elif value > hi:
            out.append(f"key {key}: {value:g} is outside the plausible {lo:g}–{hi:g}")

    in_range("costs.target_step_ms", p.target_step_ms, "forward_ms")
    in_range("costs.loop_ms", p.loop_ms, "overhead_ms")
    in_range("costs.align_ms", p.align_ms, "overhead_ms")
    for k, v in sorted(p.verify_idle_ms.items()):
        in_range(f"costs.verify.idle_ms.K{k}", v, "forward_ms")
    out += _verify_drops(p)
    for k, r in sorted(p.verify_concurrent_ratio.items()):
        noise = _relative_noise(s, f"verify.K{k}", f"verify_concurrent.K{k}")
        ratio(f"costs.verify.concurrent_ratio.K{k}", r, noise)
    out += _k1_gap(p)
    d = p.drafter
    if d is not None:
        in_range("costs.drafter.step_ms", d.step_ms, "forward_ms")
        for name in ("catch_up_ms", "paired_ms", "row_ms"):
            in_range(f"costs.drafter.{name}", getattr(d, name), "extra_ms")
        for k, v in sorted(d.refresh_ms.items()):
            in_range(f"costs.drafter.refresh_ms.K{k}", v, "extra_ms")
    for name, src in sorted(p.sources.items()):
        key = f"costs.sources.{name}"
        if src.kind == "chunked":
            in_range(f"{key}.chunk_ms", src.chunk_ms_idle, "forward_ms")
        else:
            in_range(f"{key}.step_ms", src.step_ms_idle, "forward_ms")
        in_range(f"{key}.publish_ms", src.publish_ms, "overhead_ms")
        in_range(f"{key}.startup_ms", src.startup_ms, "startup_ms")
        unit = "chunk" if src.kind == "chunked" else "step"
        noise = _relative_noise(s, f"sources.{name}.{unit}", f"sources.{name}.{unit}_concurrent")
        ratio(f"{key}.concurrent_ratio", src.concurrent_ratio, noise)
        for k, r in sorted((src.verify_concurrent_ratio or {}).items()):
            noise = _relative_noise(s, f"verify.K{k}", f"verify_concurrent.K{k}")
            ratio(f"{key}.verify_concurrent_ratio.K{k}", r, noise)
    for fam, kinds in sorted((p.in_loop or {}).items()):
        for kind, r in sorted(kinds.items()):
            in_range(f"costs.in_loop.{fam}.{kind}", r, "in_loop_ratio")
    return out
