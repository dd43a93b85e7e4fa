"""What eSpeak NG can take from a reference clip: pitch, pitch range and speaking rate.

eSpeak cannot clone a voice: from the reference's median F0, F0 spread and syllable rate we pick
the male or female variant and the closest pitch/range/rate, the pitch parameter -> Hz mapping
measured on the installed library once (`EspeakBackend.pitch_lines`). The analysis is numpy
(`audio.analysis`, librosa's yin/rms/onset_detect up to rounding): librosa's first use
JIT-compiles numba code, which kept the offline voice from starting for minutes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from ..audio import SAMPLE_RATE, resample
from ..audio.analysis import onset_times, rms, yin

ANALYSIS_RATE = 16_000
FRAME, HOP = 1024, 160  # 64 ms frames, 10 ms hop at 16 kHz
F0_MIN, F0_MAX = 60.0, 420.0
DEFAULT_RATE_WPM = 165  # eSpeak's own default is 175 words per minute
SYLLABLES_PER_WORD = 1.5  # typical for English running speech: syllables/s -> words/min
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs away."


@dataclass
class EspeakSettings:
    variant: str = ""  # "" (male) or "+f3" (female)
    pitch: int = 50  # eSpeak 0..100
    pitch_range: int = 50  # eSpeak 0..100
    rate_wpm: int = DEFAULT_RATE_WPM
    ref_f0_hz: float | None = None
    ref_spread_semitones: float | None = None
    ref_syllables_per_s: float | None = None

    def summary(self) -> dict:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class PitchLine:
    """Median F0 of a variant as a function of the pitch parameter: f0 = base * 2**(p / per_octave)."""

    base_hz: float
    per_octave: float

    def parameter_for(self, f0_hz: float) -> float:
        return self.per_octave * float(np.log2(f0_hz / self.base_hz))


def measure_f0(audio: np.ndarray, rate: int) -> np.ndarray:
    """Voiced-frame F0 values in Hz (frames with energy and a periodic-looking pitch)."""
    audio16 = resample(audio, rate, ANALYSIS_RATE)
    if audio16.size < FRAME:
        return np.zeros(0)
    f0 = yin(
        audio16, fmin=F0_MIN, fmax=F0_MAX, sr=ANALYSIS_RATE, frame_length=FRAME, hop_length=HOP
    )
    energy = rms(audio16, frame_length=FRAME, hop_length=HOP)
    n = min(f0.size, energy.size)
    loud = energy[:n] > 0.1 * float(energy.max() + 1e-12)
    inside = (f0[:n] > F0_MIN * 1.05) & (f0[:n] < F0_MAX * 0.95)
    return f0[:n][loud & inside]


def speech_seconds(audio: np.ndarray) -> float:
    """Seconds of the clip that are not near-silence (pauses do not count toward the rate)."""
    energy = rms(audio, frame_length=480, hop_length=240)  # 20 ms frames, 10 ms apart
    return float(np.sum(energy > 0.05 * float(energy.max() + 1e-12))) * 240 / SAMPLE_RATE


def syllable_rate(audio: np.ndarray, reference_text: str | None) -> float | None:
    """Syllables per second of speech: from the transcript when given, else energy onsets."""
    active = speech_seconds(audio)
    if active < 0.5:
        return None
    if reference_text:
        words = len(re.findall(r"\w+", reference_text))
        cjk = len(re.findall(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", reference_text))
        syllables = cjk + (words - (1 if cjk else 0)) * SYLLABLES_PER_WORD
        return syllables / active if syllables > 0 else None
    onsets = onset_times(audio, SAMPLE_RATE)
    return len(onsets) / active if len(onsets) >= 2 else None


def settings_from_reference(
    audio: np.ndarray | None, reference_text: str | None, lines: dict[str, PitchLine]
) -> EspeakSettings:
    settings = EspeakSettings()
    if audio is None:
        return settings
    f0 = measure_f0(audio, SAMPLE_RATE)
    if f0.size >= 10:
        median = float(np.median(f0))
        settings.ref_f0_hz = median
        variant = min(lines, key=lambda v: abs(lines[v].parameter_for(median) - 50))
        settings.variant = variant
        settings.pitch = int(np.clip(round(lines[variant].parameter_for(median)), 0, 100))
        spread = 12 * float(np.log2(np.percentile(f0, 90) / np.percentile(f0, 10)))
        settings.ref_spread_semitones = spread
        # eSpeak's range 50 is ordinary read speech, about 8 semitones between p10 and p90
        settings.pitch_range = int(np.clip(round(50 * spread / 8.0), 10, 100))
    rate = syllable_rate(audio, reference_text)
    if rate is not None:
        settings.ref_syllables_per_s = rate
        settings.rate_wpm = int(np.clip(round(rate * 60 / SYLLABLES_PER_WORD), 110, 280))
    return settings
