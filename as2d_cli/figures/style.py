"""One look for every figure the toolkit draws: fonts, sizes, a colour and a name per
method (the same in every figure), dates written one way, and one writer that saves a
figure as PNG, PDF or SVG, atomically and reproducibly (no creation date inside)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from as2d_cli.errors import UserError
from as2d_cli.formats.common import atomic_path

FORMATS = ("png", "pdf", "svg")
DPI = 200  # PNG only; PDF and SVG are vector

# Methods in the order every legend lists them, with the paper's names.
METHOD_ORDER = ("target-only", "sd", "asp", "as2d-no-td", "as2d-no-bc", "as2d", "oracle")
METHOD_LABELS = {
    "target-only": "Target-only",
    "sd": "Standard SD (K5–8 mean)",
    "asp": "SpecASR",
    "as2d-no-td": "As²d w/o TD",
    "as2d-no-bc": "As²d w/o BC",
    "as2d": "As²d",
    "oracle": "Oracle (hindsight)",
}
# Paul Tol's colour-blind-safe "bright" scheme, one colour per method in every figure.
METHOD_COLORS = {
    "target-only": "#555555",
    "sd": "#4477AA",
    "asp": "#CCBB44",
    "as2d-no-td": "#66CCEE",
    "as2d-no-bc": "#AA3377",
    "as2d": "#EE6677",
    "oracle": "#228833",
}
# Colours of series that are not methods (several streams, several devices).
SERIES_COLORS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")

RC: Any = {  # matplotlib's rcParams (typed by key in its stubs)
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text, accepted by publishers
    "svg.fonttype": "none",  # text stays text in SVGs
    "svg.hashsalt": "as2d",  # reproducible SVG ids
}


def method_label(method: str) -> str:
    """The paper's name of a method id (an unknown id is shown as it is)."""
    return METHOD_LABELS.get(method, method)


def method_color(method: str) -> str:
    return METHOD_COLORS.get(method, "#000000")


def date_text(when: float | str | None) -> str:
    """A date as every figure writes it: ``2026-12-05`` (UTC), from a Unix time or an ISO
    8601 text; empty when unknown."""
    if when is None or when == "":
        return ""
    if isinstance(when, (int, float)):
        return time.strftime("%Y-%m-%d", time.gmtime(when))
    return str(when)[:10]


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """The figure formats asked for, checked (one line naming the ones offered)."""
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(
            f"figure format {bad[0] if bad else '(none)'!r} is not one of {', '.join(FORMATS)}"
        )
    return tuple(dict.fromkeys(formats))


@contextmanager
def styled() -> Iterator[Any]:
    """matplotlib (headless) with the toolkit's style, for drawing and saving a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(RC):
        yield plt


def save(fig: Any, base: Path, formats: Sequence[str], *, force: bool = False) -> list[Path]:
    """Write ``fig`` as ``base.<format>`` for each format (atomically; ``force``: replace
    one there), close it and return the paths. Must run inside :func:`styled`."""
    import matplotlib.pyplot as plt

    out = []
    try:
        for fmt in check_formats(formats):
            path = Path(base).parent / f"{Path(base).name}.{fmt}"
            meta = {"png": {"Software": None}, "pdf": {"CreationDate": None}, "svg": {"Date": None}}
            with atomic_path(path, force=force) as tmp:
                fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight", metadata=meta[fmt])
            out.append(path)
    finally:
        plt.close(fig)
    return out


def overlapping_ticks(fig: Any) -> list[tuple[str, str]]:
    """Pairs of visible tick labels that overlap on any axis of ``fig`` (drawn first):
    what a figure must never have."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = [t.get_window_extent(renderer) for t in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    if boxes[i].overlaps(boxes[j]):
                        bad.append((labels[i].get_text(), labels[j].get_text()))
    return bad
