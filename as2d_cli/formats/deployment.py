"""Deployments (``as2d.deployment`` v3, YAML): the one fixed configuration chosen for a
device before test evaluation (paper 4.3, D.2.6).

In memory: :class:`Deployment` — ``source``, ``budget`` (proposal budget b; physical
K ≤ b+1), ``threshold`` (confidence stop, None = off), ``batch`` (publication batch),
``align`` (the alignment rules the catalog was replayed with: ``paper`` or ``suffix``),
``history`` (whether As²d merges history candidates into its source's stream,
engine/history.py), ``profile`` (:class:`ProfileRef`: path, sha256, device name), ``selection`` (summary:
split, windows, catalog, ranking, chosen TPS, validation retention…), ``environment``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from as2d_cli.formats import registry

SCHEMA, VERSION = registry.name_version("as2d.deployment")
# The alignment rules of a file or record written before they were recorded (a version-1
# deployment, a native run without ``align``): they all ran the paper's.
UNRECORDED_ALIGN = "paper"
# History candidates of a file or record written before they were recorded (a version-1
# or -2 deployment): none was selected with them, so none runs with them.
UNRECORDED_HISTORY = False
# Version history: 1 — first release; 2 — ``config.align`` (a version-1 file was selected
# under the paper's alignment and is read as ``align: paper``); 3 — ``config.history`` (a
# version-2 file was selected without history candidates and is read as ``history: false``).


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
    align: str = UNRECORDED_ALIGN
    history: bool = UNRECORDED_HISTORY
    schema: str = SCHEMA
    version: int = VERSION

    @property
    def max_width(self) -> int:
        """Largest physical verification width this deployment can ask for."""
        return self.budget + 1


def as2d_settings(dep: Any) -> dict[str, Any]:
    """As²d's settings a deployment (or anything with its fields) fixes: the keywords of
    ``MethodSpec`` and ``MethodOptions``, in the order results record them."""
    return {
        "source": dep.source,
        "budget": dep.budget,
        "threshold": dep.threshold,
        "batch": dep.batch,
        "align": dep.align,
        "history": dep.history,
    }
