"""Traces (``as2d.trace`` v1): what replay needs from real model runs, per audio window.

In memory (frozen, slotted dataclasses):

* :class:`TraceSet` — ``schema``, ``version``, ``provenance`` (models, tokenizer, toolkit
  version, git commit, created), ``eos_id``, ``sources`` (the declared source catalog:
  name → :class:`SourceInfo`), ``default_source`` (the autoregressive source an ineligible
  source falls back to, D.4.3), ``windows``. ``ts.by_split(split)``, ``ts.window(id)``.
* :class:`WindowTrace` — ``id``, ``dataset``, ``split``, ``audio_seconds``, ``task``,
  ``language``, ``reference`` (the target's greedy tokens, first token included, EOS
  included when reached), ``eos``, ``capped``, ``max_tokens``, ``eos_id`` (from the
  header), ``sources`` (name → :class:`SourceTrace`), ``drafter`` (:class:`DrafterTrace`
  or None). ``w.first_token``, ``w.n_tokens``, ``w.source_for(name)`` (applies the
  ineligible-source fallback and returns ``(used_name, SourceTrace)``).
* :class:`SourceTrace` — a target-decoupled source's own output for the window:
  ``kind`` ``"autoregressive"`` (``tokens``, ``confidences`` per token or None;
  ``steps``, the tokens each producer step emitted, or None for one per step; published in
  batches) or ``"chunked"`` (``chunks``: each a
  :class:`Chunk` of ``tokens`` already in the target vocabulary and ``audio_end_s``; the
  flat ``tokens`` are the chunks concatenated), ``eos`` (the source reached its own EOS;
  otherwise it stopped at its cap), ``eligible`` (the source serves this window's
  language).
* :class:`DrafterTrace` — the prefix-conditioned drafter (standard SD, SpecASR-ASP):
  ``cap`` and, for every target-path position n (root = ``reference[n]``), its greedy
  continuation of exactly ``cap`` tokens in ``continuations[n]`` with ``confidences[n]``
  alongside. ``d.for_engine()`` gives the arguments of
  :class:`~as2d_cli.engine.reference.SequenceDrafter`.

On disk: JSON Lines (``.jsonl``, or ``.jsonl.gz`` gzip-compressed); line 1 is the header,
every further line one window. See ``docs/formats.md`` and ``schemas/trace.schema.json``
(header) / ``schemas/trace-window.schema.json`` (window record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from as2d_cli.formats import registry

SCHEMA, VERSION = registry.name_version("as2d.trace")
# Version history: 1 — first release; 2 — an autoregressive source may list ``steps``
# (tokens per producer step). A version-1 file reads as version 2 unchanged.

AUTOREGRESSIVE = "autoregressive"
CHUNKED = "chunked"
SOURCE_KINDS = (AUTOREGRESSIVE, CHUNKED)
SPLITS = ("dev", "val", "test", "calib")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a chunked (external) source: its tokens, already in the target
    vocabulary, and the audio time (s, from window start) at which its audio ends."""

    tokens: tuple[int, ...]
    audio_end_s: float
    confidences: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class SourceTrace:
    kind: str  # AUTOREGRESSIVE | CHUNKED
    tokens: tuple[int, ...]
    confidences: tuple[float, ...] | None = None
    chunks: tuple[Chunk, ...] | None = None
    eos: bool = True
    eligible: bool = True
    # Autoregressive only: tokens per producer step (a self-speculating drafter emits one
    # or two per forward); None means one token per step.
    steps: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """A declared source: its kind and model (the header's catalog entry)."""

    name: str
    kind: str
    model: str = ""


@dataclass(frozen=True, slots=True)
class DrafterTrace:
    cap: int
    continuations: tuple[tuple[int, ...], ...]
    confidences: tuple[tuple[float, ...], ...] | None = None

    def for_engine(
        self,
    ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[float, ...], ...] | None]:
        """(continuations, confidences) as SequenceDrafter takes them."""
        return self.continuations, self.confidences


@dataclass(frozen=True, slots=True)
class WindowTrace:
    id: str
    dataset: str
    split: str
    audio_seconds: float
    task: str
    language: str
    reference: tuple[int, ...]
    eos: bool
    capped: bool
    max_tokens: int
    eos_id: int
    sources: Mapping[str, SourceTrace] = field(default_factory=dict, hash=False)
    drafter: DrafterTrace | None = None
    default_source: str | None = None  # fallback for an ineligible source (from the header)

    @property
    def first_token(self) -> int:
        return self.reference[0]

    @property
    def n_tokens(self) -> int:
        """Committed tokens counted by TPS (first token and EOS included)."""
        return len(self.reference)

    def source_for(self, name: str) -> tuple[str, SourceTrace]:
        """The source a fixed configuration naming ``name`` actually uses on this window:
        ``name`` itself when eligible, else the default autoregressive source (D.4.3)."""
        from as2d_cli.errors import UserError

        src = self.sources.get(name)
        if src is None:
            raise UserError(
                f"window {self.id}: no source {name!r} in the trace (has {', '.join(sorted(self.sources)) or 'none'}); pick one of those"
            )
        if src.eligible:
            return name, src
        fb = self.default_source
        if fb is None or fb == name or fb not in self.sources:
            raise UserError(
                f"window {self.id}: source {name!r} cannot serve language {self.language!r} and the trace declares no default source to fall back to; add default_source to the trace header"
            )
        if not self.sources[fb].eligible:
            raise UserError(
                f"window {self.id}: neither {name!r} nor the default source {fb!r} can serve language {self.language!r}; drop the window or regenerate it with a source that can"
            )
        return fb, self.sources[fb]


@dataclass(frozen=True, slots=True)
class TraceSet:
    provenance: Mapping[str, Any]
    eos_id: int
    sources: Mapping[str, SourceInfo]
    default_source: str | None
    windows: tuple[WindowTrace, ...]
    schema: str = SCHEMA
    version: int = VERSION

    def by_split(self, split: str) -> TraceSet:
        return TraceSet(
            self.provenance,
            self.eos_id,
            self.sources,
            self.default_source,
            tuple(w for w in self.windows if w.split == split),
            self.schema,
            self.version,
        )

    def window(self, window_id: str) -> WindowTrace:
        for w in self.windows:
            if w.id == window_id:
                return w
        from as2d_cli.errors import UserError

        raise UserError(
            f"no window {window_id!r} in the trace set; list the ids with `as2d replay --json`"
        )

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(w.dataset for w in self.windows))

    @property
    def n_tokens(self) -> int:
        return sum(len(w.reference) for w in self.windows)

    def __len__(self) -> int:
        return len(self.windows)
