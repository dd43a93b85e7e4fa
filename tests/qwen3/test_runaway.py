"""A talker that never emits EOS is stopped by the text-length frame cap."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

import tts_core
from tts_core.models.qwen3_tts.decode_loop import DecodeSettings, length_cap_frames
from tts_core.models.qwen3_tts.sampling import SamplingParams

from .conftest import fixture_path

EOS = 2150


@pytest.fixture(scope="module")
def no_eos_model(tmp_path_factory: pytest.TempPathFactory):
    """tiny-a with the EOS row of codec_head zeroed: its logit is 0 while the best of the 2048
    audio logits is positive, so greedy decoding never picks EOS."""
    source = fixture_path("qwen3-tiny-a")
    folder = tmp_path_factory.mktemp("no-eos")
    for item in source.iterdir():
        if item.name != "model.safetensors":
            (folder / item.name).symlink_to(item)
    state = load_file(str(source / "model.safetensors"))
    state["talker.codec_head.weight"][EOS] = 0.0
    save_file(state, str(folder / "model.safetensors"))
    assert not (folder / "model.safetensors").is_symlink()
    return tts_core.load_model(folder)


def _voice(model):
    return tts_core.Voice(speaker_embedding=torch.ones(model.config.talker.stack.hidden_size))


def test_length_cap_stops_a_runaway_talker(no_eos_model) -> None:
    text = "Hi."
    tokens = len(no_eos_model.text_tokenizer.encode(text))
    cap = length_cap_frames(tokens)
    chunks = list(
        no_eos_model.stream(
            text, _voice(no_eos_model), greedy=True, max_new_tokens=10_000, chunk_frames=25
        )
    )
    assert sum(chunk.frames for chunk in chunks) == cap
    assert [chunk.final for chunk in chunks][-2:] == [False, True]
    assert chunks[-1].stop_reason == "length_cap"
    codes = torch.cat([chunk.codes for chunk in chunks])
    assert int(codes[:, 0].max()) < 2048


def test_max_new_tokens_wins_when_smaller(no_eos_model) -> None:
    short = no_eos_model.generate("Hi.", _voice(no_eos_model), greedy=True, max_new_tokens=6)
    assert short.stop_reason == "max_new_tokens" and short.codes.shape[0] == 5


def test_frame_limit_and_its_reason() -> None:
    params = SamplingParams(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)
    settings = DecodeSettings(params, params, max_new_tokens=100, length_cap=40)
    assert settings.frame_limit() == (40, "length_cap")
    assert replace(settings, length_cap=None).frame_limit() == (99, "max_new_tokens")
    assert replace(settings, max_new_tokens=30).frame_limit() == (29, "max_new_tokens")


def test_length_cap_formula_is_generous() -> None:
    # 12.5 frames (1 s) per text token plus 2 s: several times a normal speaking rate.
    assert length_cap_frames(0) == 25
    assert length_cap_frames(10) == 150
