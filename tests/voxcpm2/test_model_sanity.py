"""Sanity of generated audio: finite, in [-1, 1], at a working level (`check_audio`, shared with
tests/qwen3), whole patches at the native rate; the seed decides the noise (same seed, same
audio; another seed, other audio); any input rate and stereo clips are accepted for a voice."""

from __future__ import annotations

import numpy as np
from qwen3.conftest import check_audio

from .conftest import shared_model


def _samples_per_patch(model) -> int:
    return model.patch_size * model.vae.decode_hop_length


def test_audio_is_finite_bounded_whole_patches(model_folder) -> None:
    model = shared_model(model_folder)
    result = model.generate("Hello world, 你好.", None, seed=5)
    assert result.audio.dtype == np.float32 and result.sample_rate == model.sample_rate
    assert result.audio.shape == (result.patches * _samples_per_patch(model),)
    check_audio(result.audio)


def test_seed_decides_the_noise(model_folder) -> None:
    model = shared_model(model_folder)
    a = model.generate("Hello world.", None, seed=1, max_len=4).audio
    b = model.generate("Hello world.", None, seed=1, max_len=4).audio
    c = model.generate("Hello world.", None, seed=2, max_len=4).audio
    assert np.array_equal(a, b)
    assert a.shape != c.shape or not np.allclose(a, c)


def test_voice_from_any_rate_and_stereo(model_folder) -> None:
    model = shared_model(model_folder)
    t = np.arange(4410) / 44100
    mono = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    stereo = np.stack([mono, 0.5 * mono], axis=1)
    voice = model.create_voice(stereo, 44100, ref_text="A tone.")
    patch_in = model.patch_size * model.vae.hop_length
    expected = -(-int(np.ceil(4410 * model.vae.sample_rate / 44100)) // patch_in)
    assert voice.ref_patches.shape[0] == expected == voice.prompt_patches.shape[0]
    result = model.generate("Hi.", voice, seed=0, max_len=4)
    assert result.patches == 4
    check_audio(result.audio)
