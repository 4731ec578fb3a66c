"""The per-token verification saving R(K) as the paper's Figure 8 (drawn by
``as2d_cli.figures.rk``, in the toolkit's one style)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def plot_savings(idle_samples: Mapping[int, Sequence[float]], path: Path, title: str) -> Path:
    """Bars of R(K) = 100·(1 − V̄(K)/(K·V̄(1))) with error bars 100·s_K/(K·V̄(1)), written
    to ``path`` in the format its suffix names (png, pdf or svg)."""
    from as2d_cli.figures import rk_figure

    path = Path(path)
    base = path.with_name(path.name.removesuffix(path.suffix))
    return rk_figure(idle_samples, base, [path.suffix.lstrip(".")], title=title, force=True)[0]
