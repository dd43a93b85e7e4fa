"""Turbo's reference loudness normalisation (tts_turbo.norm_loudness): gain to -27 LUFS by the
ITU-R BS.1770-4 integrated loudness as pyloudnorm 0.2.0 measures it (RBJ K-weighting biquads,
400 ms blocks, 75 % overlap, -70 LUFS absolute and -10 LU relative gates), with its numpy
dtype chain (the filtered signal is stored back into the float32 input copy), so the gain is
the official's to the last bit on the same numpy/scipy."""

from __future__ import annotations

import math
import warnings
from types import ModuleType

import numpy as np

TARGET_LUFS = -27.0
BLOCK_S, OVERLAP = 0.400, 0.75
INSTALL = 'pip install "tts-core[chatterbox]"'


def scipy_signal() -> ModuleType:
    """scipy.signal (the K-weighting filter), an extra (INSTALL) imported at the first clone,
    so the app and the other models never load it."""
    try:
        import scipy.signal as module
    except ImportError as exc:
        raise ImportError(f"cloning a voice for Chatterbox needs scipy: {INSTALL}") from exc
    return module


def _biquad(kind: str, gain_db: float, q: float, fc: float, rate: int) -> tuple[np.ndarray, ...]:
    a_gain = 10 ** (gain_db / 40.0)
    w0 = 2.0 * np.pi * (fc / rate)
    alpha = np.sin(w0) / (2.0 * q)
    if kind == "high_shelf":
        root = 2 * np.sqrt(a_gain) * alpha
        b0 = a_gain * ((a_gain + 1) + (a_gain - 1) * np.cos(w0) + root)
        b1 = -2 * a_gain * ((a_gain - 1) + (a_gain + 1) * np.cos(w0))
        b2 = a_gain * ((a_gain + 1) + (a_gain - 1) * np.cos(w0) - root)
        a0 = (a_gain + 1) - (a_gain - 1) * np.cos(w0) + root
        a1 = 2 * ((a_gain - 1) - (a_gain + 1) * np.cos(w0))
        a2 = (a_gain + 1) - (a_gain - 1) * np.cos(w0) - root
    else:  # high_pass
        b0 = (1 + np.cos(w0)) / 2
        b1 = -(1 + np.cos(w0))
        b2 = (1 + np.cos(w0)) / 2
        a0 = 1 + alpha
        a1 = -2 * np.cos(w0)
        a2 = 1 - alpha
    return np.array([b0, b1, b2]) / a0, np.array([a0, a1, a2]) / a0


def integrated_loudness(wav: np.ndarray, rate: int) -> float:
    """pyloudnorm Meter(rate).integrated_loudness for a mono float array (LUFS)."""
    data = wav.copy().reshape(-1, 1)
    if data.shape[0] < BLOCK_S * rate:
        raise ValueError("Audio must have length greater than the block size.")
    for kind, gain_db, q, fc in (
        ("high_shelf", 4.0, 1 / np.sqrt(2), 1500.0),
        ("high_pass", 0.0, 0.5, 38.0),
    ):
        b, a = _biquad(kind, gain_db, q, fc, rate)
        data[:, 0] = 1.0 * scipy_signal().lfilter(b, a, data[:, 0])  # passband gain, data's dtype
    step = 1.0 - OVERLAP
    blocks = int(np.round((data.shape[0] / rate - BLOCK_S) / (BLOCK_S * step))) + 1
    z = np.zeros(blocks)
    for j in range(blocks):
        lo, hi = int(BLOCK_S * (j * step) * rate), int(BLOCK_S * (j * step + 1) * rate)
        z[j] = (1.0 / (BLOCK_S * rate)) * np.sum(np.square(data[lo:hi, 0]))
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.simplefilter("ignore", category=RuntimeWarning)
        levels = [-0.691 + 10.0 * np.log10(np.sum([1.0 * z[j]])) for j in range(blocks)]
        gated = [j for j, level in enumerate(levels) if level >= -70.0]
        relative = -0.691 + 10.0 * np.log10(np.sum([1.0 * np.mean([z[j] for j in gated])])) - 10.0
        gated = [j for j, level in enumerate(levels) if level > relative and level > -70.0]
        mean = np.nan_to_num(np.array([np.mean([z[j] for j in gated])]))
        return float(-0.691 + 10.0 * np.log10(np.sum([1.0 * mean[0]])))


def norm_loudness(wav: np.ndarray, rate: int, target: float = TARGET_LUFS) -> np.ndarray:
    """wav * 10^((target - L) / 20) when that gain is finite and positive (else unchanged)."""
    try:
        gain = 10.0 ** ((target - integrated_loudness(wav, rate)) / 20.0)
    except ValueError:
        return wav  # the official prints a warning and skips
    if not (math.isfinite(gain) and gain > 0.0):
        return wav
    # numpy 1.x (the official's pin) multiplies a float32 array by a float64 scalar in float32.
    return wav * np.asarray(gain, dtype=wav.dtype)
