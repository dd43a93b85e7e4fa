"""ECAPA-TDNN speaker encoder and mel front end against the official goldens.

Bounds: (1 + 4) x the golden's float32 error E (tests/qwen3/conftest.py); E from the official
run in pure float64: log-mel ~2e-5 (log of small STFT powers), embeddings ~1e-6.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tts_core.models.qwen3_tts.codec.speech_tokenizer import prepare_audio
from tts_core.models.qwen3_tts.mel import log_mel_spectrogram
from tts_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

from .conftest import check_fp32

PREFIX = "speaker_encoder."


def _config(folder: Path) -> SpeakerEncoderConfig:
    raw = json.loads((folder / "config.json").read_text())
    return SpeakerEncoderConfig.from_dict(raw["speaker_encoder_config"])


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(folder / "model.safetensors"))
    return {k.removeprefix(PREFIX): v for k, v in tensors.items() if k.startswith(PREFIX)}


@cache
def _encoder(folder: Path) -> SpeakerEncoder:
    return SpeakerEncoder.from_state_dict(_config(folder), _weights(folder))


def test_mel_matches_official(goldens) -> None:
    mel = log_mel_spectrogram(goldens["ref_audio"])  # (1, 128, frames)
    assert mel.shape == (1, *goldens["ref_mel"].shape[::-1])
    check_fp32(mel[0].T, goldens, "ref_mel")


def test_embedding_matches_official(tiny_checkpoint: Path, goldens) -> None:
    embedding = _encoder(tiny_checkpoint).embed(goldens["ref_audio"].numpy())
    assert embedding.shape == goldens["speaker_embedding"].shape
    check_fp32(embedding, goldens, "speaker_embedding")


def test_embedding_of_resampled_16k_stereo_clip(
    tiny_checkpoint: Path, goldens, ref_clip_16k_stereo
) -> None:
    audio, rate = ref_clip_16k_stereo
    embedding = _encoder(tiny_checkpoint).embed(prepare_audio(audio, rate, 24000))
    check_fp32(embedding, goldens, "ref16_speaker_embedding")


def test_config_defaults_fill_only_missing_keys() -> None:
    cfg = SpeakerEncoderConfig.from_dict({"enc_dim": 2048, "enc_channels": [8, 8, 8, 8, 24]})
    assert cfg.enc_dim == 2048
    assert cfg.enc_channels == (8, 8, 8, 8, 24)
    assert cfg.mel_dim == 128 and cfg.enc_kernel_sizes == (5, 3, 3, 3, 1)
    assert cfg.enc_dilations == (1, 2, 3, 4, 1) and cfg.enc_res2net_scale == 8
    with pytest.raises(ValueError, match="enc_dim"):
        SpeakerEncoderConfig.from_dict({"sample_rate": 24000})
    with pytest.raises(ValueError, match="one entry per layer"):
        SpeakerEncoderConfig.from_dict({"enc_dim": 4, "enc_dilations": [1, 2]})


def test_loading_accepts_prefixed_keys_and_rejects_missing_ones(tiny_checkpoint: Path) -> None:
    cfg, weights = _config(tiny_checkpoint), _weights(tiny_checkpoint)
    prefixed = {PREFIX + k: v for k, v in weights.items()}
    assert SpeakerEncoder.from_state_dict(cfg, prefixed).fc.weight.shape[0] == cfg.enc_dim
    del weights["asp.conv.weight"]
    with pytest.raises(ValueError, match="asp.conv.weight"):
        SpeakerEncoder.from_state_dict(cfg, weights)


def test_too_short_or_non_mono_audio_is_rejected(tiny_checkpoint: Path) -> None:
    encoder = _encoder(tiny_checkpoint)
    with pytest.raises(ValueError, match="too short"):
        encoder.embed(np.zeros(300, np.float32))
    with pytest.raises(ValueError, match="mono"):
        encoder.embed(np.zeros((1000, 2), np.float32))


RELEASED = Path(__file__).resolve().parents[2] / "assets" / "checkpoints"


@pytest.mark.parametrize(("model", "enc_dim"), [("0.6B", 1024), ("1.7B", 2048)])
def test_released_configs_give_the_76_tensor_layout(model: str, enc_dim: int) -> None:
    raw = json.loads((RELEASED / f"Qwen3-TTS-12Hz-{model}-Base" / "config.json").read_text())
    cfg = SpeakerEncoderConfig.from_dict(raw["speaker_encoder_config"])
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in SpeakerEncoder(cfg).state_dict().items()}
    assert len(shapes) == 76
    assert shapes["blocks.0.conv.weight"] == (512, 128, 5)
    assert shapes["blocks.3.res2net_block.blocks.6.conv.weight"] == (64, 64, 3)
    assert shapes["asp.tdnn.conv.weight"] == (128, 4608, 1)
    assert shapes["fc.weight"] == (enc_dim, 3072, 1)
