"""A voice from a 16 kHz stereo clip against the official's (the whole model's entry point).

The official wrapper loads the clip with librosa (channel mean) and resamples it with
librosa.resample to 24 kHz before both the speaker encoder and the codec encoder; ours does
the same with audio.analysis.resample (equal to librosa's bit for bit, test_audio_analysis).
Bounds as in test_speaker_encoder.py and test_codec_encoder.py: codes equal, the embedding
within (1 + 4) x the golden's float32 error (conftest.check_fp32).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .conftest import check_fp32, shared_model


def test_voice_from_16k_stereo_clip_matches_official(
    tiny_checkpoint: Path, goldens, ref_clip_16k_stereo
) -> None:
    audio, rate = ref_clip_16k_stereo
    assert rate != 24000 and audio.ndim == 2  # the model resamples and downmixes itself
    voice = shared_model(tiny_checkpoint).create_voice(audio, rate, ref_text="a reference")
    assert torch.equal(torch.as_tensor(voice.ref_codes).long(), goldens["ref16_codes"])
    check_fp32(voice.speaker_embedding, goldens, "ref16_speaker_embedding")
