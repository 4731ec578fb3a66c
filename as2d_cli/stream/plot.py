"""Figure 9's panels for one stream (drawn by ``as2d_cli.figures.stream``, in the
toolkit's one style)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_stream(doc: dict[str, Any], path: Path) -> Path:
    """Figure 9 of one ``stream.json`` document, written to ``path`` in the format its
    suffix names (png, pdf or svg)."""
    from as2d_cli.figures import stream_figure

    path = Path(path)
    base = path.with_name(path.name.removesuffix(path.suffix))
    return stream_figure([doc], base, [path.suffix.lstrip(".")], force=True)[0]
