"""Deployments (``as2d.deployment`` v1, YAML): the one fixed configuration chosen for a
device before test evaluation (paper 4.3, D.2.6).

In memory: :class:`Deployment` — ``source``, ``budget`` (proposal budget b; physical
K ≤ b+1), ``threshold`` (confidence stop, None = off), ``batch`` (publication batch),
``profile`` (:class:`ProfileRef`: path, sha256, device name), ``selection`` (summary:
split, windows, catalog, ranking, chosen TPS, validation retention…), ``environment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

SCHEMA = "as2d.deployment"
VERSION = 1
# Version history: 1 — first release.


@dataclass(frozen=True, slots=True)
class ProfileRef:
    path: str
    sha256: str
    device: str = ""


@dataclass(frozen=True, slots=True)
class Deployment:
    source: str
    budget: int
    threshold: float | None
    batch: int
    profile: ProfileRef
    selection: Mapping[str, Any] = field(default_factory=dict, hash=False)
    environment: Mapping[str, Any] = field(default_factory=dict, hash=False)
    schema: str = SCHEMA
    version: int = VERSION

    @property
    def max_width(self) -> int:
        """Largest physical verification width this deployment can ask for."""
        return self.budget + 1
