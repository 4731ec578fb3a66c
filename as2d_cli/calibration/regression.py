"""The least-squares fit and the spans it needs, shared by the sweep fit
(:mod:`as2d_cli.calibration.fit`) and the in-loop fit (:mod:`as2d_cli.calibration.in_loop`)."""

from __future__ import annotations

import numpy as np

MIN_AUDIO_SPAN_S = 2.0  # windows must span this many seconds for an audio slope


def lstsq(rows: list[list[float]], y: list[float]) -> list[float]:
    """Least-squares coefficients of ``rows @ coef ≈ y``."""
    coef, *_ = np.linalg.lstsq(
        np.asarray(rows, dtype=float), np.asarray(y, dtype=float), rcond=None
    )
    return [float(c) for c in coef]
