"""VoxCPM2's reference resampling is librosa.resample's (the official librosa.load path)."""

from __future__ import annotations

import numpy as np
import pytest

from tts_core.models.voxcpm.voice import resample

librosa = pytest.importorskip("librosa")  # the dev extra: the reference, not a runtime need


@pytest.mark.parametrize(
    ("size", "rate", "target"),
    [
        (441, 44_100, 48_000),
        (44_100 * 3 + 147, 44_100, 16_000),
        (294, 22_050, 24_000),
        (12_345, 48_000, 16_000),
        (16_000, 16_000, 16_000),
    ],
)
def test_resample_equals_librosa_including_its_length(size, rate, target):
    """Regression: the length was ceil(n * target / rate) in integers, one sample short of
    librosa's float-ratio length where n * target / rate is an integer that the float ratio
    rounds above (441 at 44.1 -> 48 kHz: 480, librosa 481); soxr's samples already agreed."""
    audio = np.random.default_rng(size).standard_normal(size).astype(np.float32) * 0.1
    ours = resample(audio, rate, target)
    theirs = librosa.resample(audio, orig_sr=rate, target_sr=target)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
