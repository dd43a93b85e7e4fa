"""TadaModel end to end on the tiny folders: create_voice from the raw reference clip gives the
official prompt (token positions equal; token values within 5 E of the official seeded
Encoder.forward, our own aligner's logits deciding the positions), generate from the official
prompt gives the official audio within 5 E (`gen_audio`); a missing transcript is refused naming
`ref_text`."""

from __future__ import annotations

import pytest

from tts_core.models.tada.flow_head import FlowOptions
from tts_core.models.tada.generate import GenerateOptions
from tts_core.models.tada.model import MissingTranscriptError, TadaModel

from .conftest import check_fp32
from .test_generate import TEXT, prompt_of

ENCODER_SEED, GEN_SEED = 11, 15  # make_goldens.SEEDS


@pytest.fixture(scope="module")
def models():
    return {}


def model_of(models, folder) -> TadaModel:
    if folder not in models:
        models[folder] = TadaModel.from_folders(folder / "model", folder / "codec")
    return models[folder]


def test_create_voice_matches_official(tiny_folder, goldens, models):
    model = model_of(models, tiny_folder)
    voice = model.create_voice(
        goldens["prompt_audio"][0], 24000, str(goldens["prompt_text"]), seed=ENCODER_SEED
    )
    assert voice.token_positions.tolist() == goldens["prompt_token_positions"][0].tolist()
    assert voice.text == str(goldens["prompt_normalized_text"])
    print(check_fp32(voice.token_values[None], goldens, "prompt_token_values"))


def test_generate_matches_official(tiny_folder, goldens, models):
    model = model_of(models, tiny_folder)
    options = GenerateOptions(flow=FlowOptions(noise_temperature=0.5))
    audio = model.generate(prompt_of(goldens), TEXT, options, seed=GEN_SEED)
    print(check_fp32(audio, goldens, "gen_audio"))


def test_transcript_is_required(tiny_folder, models):
    model = model_of(models, tiny_folder)
    with pytest.raises(MissingTranscriptError, match="ref_text"):
        model.create_voice([0.0] * 2400, 24000, "  ")


def test_stream_equals_generate_within_the_window_error(tiny_folder, goldens, models):
    """model.stream's chunks joined: the same length as generate's audio and within 60 dB SNR of
    it (the windowed CNN's error, tests/tada/test_streaming.py); more than one chunk."""
    import numpy as np

    model = model_of(models, tiny_folder)
    options = GenerateOptions(flow=FlowOptions(noise_temperature=0.5))
    full = model.generate(prompt_of(goldens), TEXT, options, seed=GEN_SEED)
    chunks = list(model.stream(prompt_of(goldens), TEXT, options, seed=GEN_SEED))
    streamed = np.concatenate([chunk.audio for chunk in chunks])
    assert sum(chunk.audio.size > 0 for chunk in chunks) > 3 and streamed.shape == full.shape
    assert chunks[-1].stop_reason == "end_of_text"
    assert [chunk.stop_reason for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    diff = streamed.astype(np.float64) - full
    snr = 10 * np.log10(np.sum(full.astype(np.float64) ** 2) / max(np.sum(diff**2), 1e-30))
    print(f"{len(chunks)} chunks, SNR {snr:.1f} dB")
    assert snr > 60


def test_from_pretrained_folders_and_errors(tmp_path):
    """Folders in the released layout load; a folder missing a file names it; a path that is
    neither a folder nor a Hub id is refused without touching the network."""
    import shutil

    from .conftest import FIXTURES

    root = FIXTURES / "tada-tiny-a"
    model = TadaModel.from_pretrained(root / "model", root / "codec")
    assert model.tokenizer.vocab_size == model.lm.cfg.vocab_size
    broken = tmp_path / "codec"
    shutil.copytree(root / "codec", broken)
    (broken / "decoder" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="decoder/model.safetensors"):
        TadaModel.from_pretrained(root / "model", broken)
    with pytest.raises(FileNotFoundError, match="not found"):
        TadaModel.from_pretrained(tmp_path / "nowhere", root / "codec")
