"""Pooled throughput statistics (paper A.3, D.1.3, D.4): pooled TPS, the SD K5–8 summary,
per-dataset pooling, the hindsight oracle and its gap, slowdown counts, CDF data."""

from as2d_cli.stats.compare import (
    OracleResult,
    Slowdown,
    cdf,
    oracle,
    oracle_gap,
    sd_summary,
    sd_window_tps,
    slowdown,
)
from as2d_cli.stats.pooled import (
    ImpossibleFigure,
    Outcome,
    pooled_tps,
    tps_by_dataset,
    window_tps,
)

__all__ = [
    "ImpossibleFigure",
    "Outcome",
    "pooled_tps",
    "tps_by_dataset",
    "window_tps",
    "OracleResult",
    "Slowdown",
    "cdf",
    "oracle",
    "oracle_gap",
    "sd_summary",
    "sd_window_tps",
    "slowdown",
]
