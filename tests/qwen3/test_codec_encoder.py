"""Mimi encoder parity: our codes equal the official `speech_tokenizer.encode` codes exactly.

Portable: the oracle checks that the official run in pure float64 picks the same codes and that
every nearest-code decision on both reference clips has a float64 gap >= 8 x twice the float32
distance error on its row (cases.json "decision_margins" rvq, 14.7x), so no CPU's float32
rounding within 4x of the golden machine's can flip one (tests/fixtures/README.md).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tts_core.models.qwen3_tts.codec import SpeechTokenizer


@cache
def _tokenizer(folder: Path) -> SpeechTokenizer:
    return SpeechTokenizer.from_folder(folder / "speech_tokenizer")


def test_encode_matches_official_codes(tiny_checkpoint: Path, goldens, ref_clip) -> None:
    audio, rate = ref_clip
    codes = _tokenizer(tiny_checkpoint).encode(audio, rate)
    assert codes.shape == goldens["ref_codes"].shape == (math.ceil(audio.shape[0] / 1920), 16)
    assert codes.dtype == goldens["ref_codes"].dtype
    mismatches = int((codes != goldens["ref_codes"]).sum())
    assert mismatches == 0, f"{mismatches} codes differ"


def test_encode_resamples_and_downmixes_like_official(
    tiny_checkpoint: Path, goldens, ref_clip_16k_stereo
) -> None:
    audio, rate = ref_clip_16k_stereo
    assert audio.ndim == 2 and rate == 16000
    codes = _tokenizer(tiny_checkpoint).encode(audio, rate)
    assert codes.shape == goldens["ref16_codes"].shape
    assert int((codes != goldens["ref16_codes"]).sum()) == 0


@pytest.mark.parametrize("samples", [1, 1919, 1920, 1921, 7777])
def test_frame_count_is_ceil_of_samples_over_1920(tiny_checkpoint: Path, samples: int) -> None:
    audio = np.random.default_rng(samples).uniform(-0.5, 0.5, samples).astype(np.float32)
    codes = _tokenizer(tiny_checkpoint).encode(audio, 24000)
    assert codes.shape == (math.ceil(samples / 1920), 16)
    assert int(codes.min()) >= 0 and int(codes.max()) < 2048


@pytest.mark.parametrize(
    ("audio", "rate", "message"),
    [
        (np.zeros(0, np.float32), 24000, "empty"),
        (np.array([0.0, np.nan] * 100, np.float32), 24000, "NaN"),
        (np.zeros((2, 3, 4), np.float32), 24000, "mono"),
        (np.zeros(100, np.float32), 0, "sample_rate"),
    ],
)
def test_invalid_audio_is_rejected(tiny_checkpoint: Path, audio, rate, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tokenizer(tiny_checkpoint).encode(audio, rate)
