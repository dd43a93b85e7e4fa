"""Deterministic synthetic reference clip: a voiced, speech-like test signal.

A harmonic glottal-like source (1/k^1.2 harmonics) whose f0 glides with vibrato, shaped by
three formant resonators that move over time, gated into syllables, plus a little noise.
Only numpy/scipy are used and every random draw comes from a fixed seed, so the samples are
identical on every run.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

DURATION_S = 3.0


def _f0_contour(t: np.ndarray) -> np.ndarray:
    glide = 125.0 + 30.0 * np.sin(2 * np.pi * 0.35 * t)
    vibrato = 1.0 + 0.015 * np.sin(2 * np.pi * 5.5 * t)
    return glide * vibrato


def _glottal_source(t: np.ndarray, sr: int) -> np.ndarray:
    f0 = _f0_contour(t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    out = np.zeros_like(t)
    for k in range(1, 60):
        audible = (k * f0) < 0.45 * sr  # (S,) per-sample band limit
        out += audible * np.sin(k * phase) / k**1.2
    return out


def _resonate(x: np.ndarray, sr: int, freq: float, bandwidth: float) -> np.ndarray:
    # Two-pole resonator at `freq` with -3 dB bandwidth `bandwidth` (unity gain at DC-ish).
    r = np.exp(-np.pi * bandwidth / sr)
    theta = 2 * np.pi * freq / sr
    a = [1.0, -2 * r * np.cos(theta), r * r]
    return lfilter([1.0 - r], a, x)


def _formants(x: np.ndarray, sr: int) -> np.ndarray:
    # Three blocks of ~1 s with different vowel-like formant sets, joined by a short fade.
    vowels = [(730, 1090, 2440), (300, 2290, 3010), (570, 840, 2410)]
    n = len(x)
    out = np.zeros_like(x)
    edges = np.linspace(0, n, len(vowels) + 1).astype(int)
    fade = int(0.02 * sr)
    for i, (f1, f2, f3) in enumerate(vowels):
        y = 1.0 * _resonate(x, sr, f1, 90) + 0.6 * _resonate(x, sr, f2, 120)
        y = y + 0.3 * _resonate(x, sr, f3, 160)
        w = np.zeros(n)
        lo, hi = max(edges[i] - fade, 0), min(edges[i + 1] + fade, n)
        w[lo:hi] = 1.0
        out += w * y
    return out


def _syllable_envelope(t: np.ndarray) -> np.ndarray:
    env = 0.55 + 0.45 * np.sin(2 * np.pi * 3.1 * t - 0.5) ** 2
    attack = np.clip(t / 0.05, 0.0, 1.0)
    release = np.clip((t[-1] - t) / 0.08, 0.0, 1.0)
    return env * attack * release


def synth_voice(
    sr: int, duration_s: float = DURATION_S, seed: int = 0, peak: float = 0.5
) -> np.ndarray:
    """(S,) float32 mono voiced signal at `sr`, peak-normalized to `peak`."""
    n = int(round(duration_s * sr))
    t = np.arange(n, dtype=np.float64) / sr
    voiced = _formants(_glottal_source(t, sr), sr) * _syllable_envelope(t)
    voiced /= np.max(np.abs(voiced))
    noise = np.random.default_rng(seed).standard_normal(n) * 0.01
    y = voiced + noise
    return (peak * y / np.max(np.abs(y))).astype(np.float32)


def stereo_variant(sr: int) -> np.ndarray:
    """(S, 2) int16 stereo clip: left = synth_voice, right = quieter copy with other noise."""
    left = synth_voice(sr, seed=0)
    right = 0.8 * synth_voice(sr, seed=1)
    both = np.stack([left, right], axis=1)
    return np.round(both * 32767.0).astype(np.int16)
