"""Whisper's log-mel features in numpy (no torch or transformers at run time).

The definition of Hugging Face's ``WhisperFeatureExtractor``: the audio zero-padded or cut to
30 s, a centred 400-point STFT with a periodic Hann window and reflect padding every 160
samples (the last frame dropped: 3000 frames), the power spectrum through a Slaney-scale,
Slaney-normalised mel filterbank of 80 or 128 bins (0-8 kHz), log10 floored at 1e-10,
clamped to 8 below the maximum, then (x + 4) / 4.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE
N_FRAMES = N_SAMPLES // HOP  # 3000


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    lin = 3.0 * f / 200.0
    log = 15.0 + np.log(np.maximum(f, 1e-12) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(f >= 1000.0, log, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    lin = 200.0 * m / 3.0
    log = 1000.0 * np.exp(np.log(6.4) * (m - 15.0) / 27.0)
    return np.where(m >= 15.0, log, lin)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> np.ndarray:
    """(N_FFT // 2 + 1, n_mels) triangular filters, each scaled by 2 / its bandwidth."""
    fft_freqs = np.linspace(0.0, SAMPLE_RATE // 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(
        np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(8000.0)), n_mels + 2)
    )
    width = np.diff(edges)
    rel = edges[None, :] - fft_freqs[:, None]  # (bins, n_mels + 2)
    rising = -rel[:, :-2] / width[:-1]
    falling = rel[:, 2:] / width[1:]
    fb = np.maximum(0.0, np.minimum(rising, falling))
    return fb * (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[None, :]


@lru_cache(maxsize=1)
def _hann() -> np.ndarray:
    n = np.arange(N_FFT)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)  # periodic


def whisper_log_mel(audio: np.ndarray, n_mels: int, to_window: bool = True) -> np.ndarray:
    """16 kHz mono audio (at most 30 s) -> (n_mels, 3000) float32 features; ``to_window=False``:
    the audio's own frames, len // 160 (the extractor's ``padding="longest"`` on one clip)."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)[:N_SAMPLES]
    if to_window:
        x = np.pad(x, (0, N_SAMPLES - len(x)))
    pad = N_FFT // 2
    xp = np.pad(x, (pad, pad), mode="reflect")
    n_frames = 1 + (len(xp) - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    spec = np.fft.rfft(xp[idx] * _hann()[None, :], n=N_FFT, axis=1)
    power = spec.real**2 + spec.imag**2  # (frames, bins)
    mel = power[:-1] @ mel_filters(n_mels)  # the last frame is dropped, as Whisper does
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).T.astype(np.float32)
