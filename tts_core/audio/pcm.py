"""Sample-format helpers: float32 <-> int16, resampling, Hann fade windows."""

from __future__ import annotations

import numpy as np
import soxr

SAMPLE_RATE = 24_000  # reference clips are decoded to this rate; eSpeak and Qwen3 speak at it


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] -> int16, clipped. Never peak-normalised (chunks must keep one scale)."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return np.round(clipped * 32767.0).astype(np.int16)


def resample(audio: np.ndarray, rate_in: int, rate_out: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a whole float32 mono signal (soxr, high quality)."""
    audio = np.asarray(audio, dtype=np.float32)
    if rate_in == rate_out or audio.size == 0:
        return audio
    return soxr.resample(audio, rate_in, rate_out, quality="HQ").astype(np.float32)


def ms_to_samples(ms: float, rate: int = SAMPLE_RATE) -> int:
    return max(0, int(round(ms * rate / 1000.0)))


def hann_rise(length: int) -> np.ndarray:
    """Rising half of a Hann window, (length,): sin^2 from ~0 to ~1.

    Paired with its mirror (1 - rise = cos^2) the two gains sum to exactly 1 at every sample,
    so a crossfade of two equal signals returns that signal unchanged.
    """
    if length <= 0:
        return np.zeros(0, dtype=np.float32)
    phase = (np.arange(length, dtype=np.float64) + 0.5) / length
    return (np.sin(0.5 * np.pi * phase) ** 2).astype(np.float32)
