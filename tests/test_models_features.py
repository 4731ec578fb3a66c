"""The numpy log-mel front end (the one definition used by training and at run time)."""

from __future__ import annotations

import numpy as np

from as2d_cli.models.features import (
    HOP,
    N_MELS,
    SAMPLE_RATE,
    _hz_to_mel,
    _mel_to_hz,
    log_mel,
    mel_filters,
)


def test_shape_and_range() -> None:
    x = np.random.default_rng(0).standard_normal(SAMPLE_RATE * 3).astype(np.float32) * 0.1
    f = log_mel(x)
    assert f.shape == (len(x) // HOP, N_MELS) and f.dtype == np.float32
    assert np.isfinite(f).all()
    assert log_mel(np.zeros(100, np.float32)).shape == (0, N_MELS)
    assert (log_mel(np.zeros(SAMPLE_RATE, np.float32)) == -1.0).all()  # floor: (-8 + 4) / 4


def test_a_tone_peaks_in_its_mel_band() -> None:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    for hz in (300.0, 1000.0, 4000.0):
        f = log_mel((0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32))
        band = int(np.argmax(f[20:-20].mean(axis=0)))
        centres = _mel_to_hz(
            np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(8000.0)), N_MELS + 2)
        )[1:-1]
        assert abs(centres[band] - hz) <= 0.08 * hz + 40, (hz, centres[band])


def test_filters_cover_the_spectrum() -> None:
    fb = mel_filters()
    assert fb.shape == (N_MELS, 201) and (fb >= 0).all()
    assert (fb.sum(axis=0)[3:-3] > 0).all()


def test_chunk_features_equal_window_features_away_from_edges() -> None:
    """Fixed normalisation: a 2.56 s chunk sees the same features as inside the window."""
    x = np.random.default_rng(1).standard_normal(SAMPLE_RATE * 6).astype(np.float32) * 0.05
    whole = log_mel(x)
    start = 40960
    chunk = log_mel(x[start : start + 40960])
    s = start // HOP
    np.testing.assert_allclose(chunk[2:-2], whole[s + 2 : s + len(chunk) - 2], atol=1e-4)
