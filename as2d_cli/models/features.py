"""Log-mel features in numpy: the ONE feature definition used for training and at run time.

Training (training/*.py) imports this module, so the exported models see exactly the
features the runtime computes; there is no torch at run time. The normalisation is fixed
(not relative to the window's maximum) so a 2.56 s chunk gets the same features as the
same samples inside a whole window.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16_000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms -> 100 frames per second
N_MELS = 80
FRAMES_PER_SECOND = SAMPLE_RATE // HOP


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + f / 700.0)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


@lru_cache(maxsize=1)
def mel_filters() -> np.ndarray:
    """Triangular HTK-mel filterbank, shape (N_MELS, N_FFT // 2 + 1), area-normalised."""
    n_bins = N_FFT // 2 + 1
    freqs = np.linspace(0.0, SAMPLE_RATE / 2, n_bins)
    mel_pts = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(8000.0)), N_MELS + 2)
    hz = _mel_to_hz(mel_pts)
    fb = np.zeros((N_MELS, n_bins), dtype=np.float64)
    for i in range(N_MELS):
        lo, mid, hi = hz[i], hz[i + 1], hz[i + 2]
        up = (freqs - lo) / (mid - lo)
        down = (hi - freqs) / (hi - mid)
        fb[i] = np.maximum(0.0, np.minimum(up, down))
        fb[i] *= 2.0 / (hi - lo)
    return fb.astype(np.float32)


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    return np.hanning(N_FFT + 1)[:-1].astype(np.float32)  # periodic Hann


def log_mel(audio: np.ndarray) -> np.ndarray:
    """16 kHz mono float audio -> (frames, N_MELS) float32 features, frames = len // HOP.

    Centred STFT with reflect padding; log10 power floored at 1e-10, then scaled to
    roughly [-1, 1] by a fixed affine map.
    """
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    n_frames = len(x) // HOP
    if n_frames == 0:
        return np.zeros((0, N_MELS), dtype=np.float32)
    pad = N_FFT // 2
    if len(x) <= pad:
        x = np.pad(x, (0, pad + 1 - len(x)))
    xp = np.pad(x, (pad, pad), mode="reflect")
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    frames = xp[idx] * _window()[None, :]
    spec = np.fft.rfft(frames, n=N_FFT, axis=1)
    power = (spec.real**2 + spec.imag**2).astype(np.float32)
    mel = power @ mel_filters().T
    logmel = np.log10(np.maximum(mel, 1e-10))
    logmel = np.maximum(logmel, -8.0)
    return ((logmel + 4.0) / 4.0).astype(np.float32)
