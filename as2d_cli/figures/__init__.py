"""Every figure the toolkit draws, in one style (``style``): evaluation figures (CDF per
device, pooled TPS per dataset, replay against native), R(K) and the stream's Figure 9.
Each writes PNG, PDF or SVG (``FORMATS``) atomically."""

from as2d_cli.figures.evaluation import cdf_figure, datasets_figure, native_figure
from as2d_cli.figures.rk import rk_figure, savings
from as2d_cli.figures.stream import stream_figure, stream_name
from as2d_cli.figures.style import (
    FORMATS,
    METHOD_COLORS,
    METHOD_LABELS,
    check_formats,
    date_text,
    method_label,
    overlapping_ticks,
)

__all__ = [
    "FORMATS",
    "METHOD_COLORS",
    "METHOD_LABELS",
    "cdf_figure",
    "check_formats",
    "datasets_figure",
    "date_text",
    "method_label",
    "native_figure",
    "overlapping_ticks",
    "rk_figure",
    "savings",
    "stream_figure",
    "stream_name",
]
