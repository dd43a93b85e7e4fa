"""Whole Turbo generations against the official `ChatterboxTurboTTS.generate` (pre-watermark):
the built-in conds.pt voice and a voice cloned from a 7 s 44.1 kHz clip, seed GEN_SEED. T3
tokens and lengths exact, audio within the error model of conftest.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_core.models.chatterbox.voice import ChatterboxVoice

from .conftest import check_fp32, ref_clip, shared_model

GEN_TEXT = "Hello there, this is a tiny test. [chuckle] Okay"
CLONE_TEXT = "how are you today?"


def test_generate_builtin_voice(tiny_folder, goldens):
    model = shared_model(tiny_folder)
    result = model.generate(GEN_TEXT, seed=int(goldens["meta_seeds"][3]))
    assert result.tokens.tolist() == goldens["gen_tokens"].tolist()
    assert result.audio.shape == goldens["gen_wav_raw"].shape  # 960 samples per kept token
    check_fp32(result.audio, goldens, "gen_wav_raw")


def test_generate_cloned_voice(tiny_folder, goldens):
    model = shared_model(tiny_folder)
    audio, sr = ref_clip()
    voice = model.create_voice(audio, sr)
    # S3 tokens of the prompt are integers: exact. (The float parts of the voice feed the
    # generation below, whose audio is bounded.)
    assert voice.t3_prompt_tokens[0].tolist() == goldens["clone_prompt_tokens_t3"].tolist()
    assert voice.prompt_token[0].tolist() == goldens["clone_prompt_token"].astype(np.int64).tolist()
    assert voice.prompt_feat.shape[1:] == goldens["clone_prompt_feat"].shape
    result = model.generate(CLONE_TEXT, voice, seed=int(goldens["meta_seeds"][3]))
    assert result.tokens.tolist() == goldens["clone_tokens"].tolist()
    assert result.audio.shape == goldens["clone_wav_raw"].shape
    # E of clone_wav_raw covers S3Gen+HiFT on the golden's voice; our voice's float parts
    # (mel, x-vector) are the same torch ops on the same samples as the golden's, equal here
    # to the bit, so no further term is added.
    check_fp32(result.audio, goldens, "clone_wav_raw")


def test_same_seed_same_audio_other_seed_other_audio(tiny_folder):
    model = shared_model(tiny_folder)
    first = model.generate(CLONE_TEXT, seed=5)
    again = model.generate(CLONE_TEXT, seed=5)
    other = model.generate(CLONE_TEXT, seed=6)
    assert np.array_equal(first.audio, again.audio)
    assert first.tokens.tolist() != other.tokens.tolist()


def test_short_reference_refused(tiny_folder):
    model = shared_model(tiny_folder)
    with pytest.raises(ValueError, match="longer than 5 s"):
        model.create_voice(np.zeros(4 * 24000, dtype=np.float32), 24000)


def test_conds_file_round_trip(tiny_folder):
    voice = ChatterboxVoice.from_conds(tiny_folder / "conds.pt")
    assert voice.speaker_emb.shape == (1, 256)
    assert voice.prompt_feat.shape[1] == 2 * voice.prompt_token.shape[1]  # 6.48 s clip: even
    assert voice.t3_prompt_tokens.dtype == torch.long


def test_max_new_tokens_stops_on_the_same_draws(tiny_folder, goldens):
    """A token cap ends T3 after cap + 1 draws (the prefill's and one per step), the first of
    the uncapped run's, and says so."""
    model = shared_model(tiny_folder)
    result = model.generate(GEN_TEXT, seed=int(goldens["meta_seeds"][3]), max_new_tokens=3)
    assert result.tokens.tolist() == goldens["gen_tokens"][:4].tolist()
    assert result.stop_reason == "max_tokens"
    assert result.audio.shape == ((4 + 3) * 960,)  # + the 3 appended silence tokens
