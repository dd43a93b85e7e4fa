"""generate(): input checks, max_new_tokens / stop semantics, seeded sampling."""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

import tts_core

from .conftest import check_audio, fixture_path, fp32_pair_bound, load_goldens

TINY = fixture_path("qwen3-tiny-a")


@cache
def _model(folder: Path = TINY):
    return tts_core.load_model(folder)


@cache
def _xvec_voice():
    # The official speaker embedding of the reference clip (create_voice is covered by the
    # end-to-end parity test and test_icl_voice_and_stereo_16k_reference).
    return tts_core.Voice(speaker_embedding=load_goldens("qwen3-tiny-a")["speaker_embedding"])


def test_unsupported_language_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported language"):
        _model().generate("Hello.", _xvec_voice(), language="klingon")


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        _model().generate(text, _xvec_voice())


def test_reference_shorter_than_one_frame_is_rejected() -> None:
    with pytest.raises(ValueError, match="shorter than one codec frame"):
        _model().create_voice(np.zeros(1900, dtype=np.float32), 24000, ref_text="Hi.")
    with pytest.raises(ValueError, match="shorter than one codec frame"):
        _model().create_voice(np.zeros(1200, dtype=np.float32), 16000)  # 1800 at 24 kHz


def test_unknown_and_invalid_arguments_are_rejected() -> None:
    with pytest.raises(TypeError, match="top_q"):
        _model().generate("Hello.", _xvec_voice(), top_q=0.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        _model().generate("Hello.", _xvec_voice(), max_new_tokens=1)


def test_icl_voice_and_stereo_16k_reference(ref_clip_16k_stereo) -> None:
    audio, rate = ref_clip_16k_stereo
    voice = _model().create_voice(audio, rate, ref_text="This is a synthetic reference voice.")
    assert voice.mode == "icl"
    assert voice.ref_codes.shape[1] == 16
    assert voice.ref_codes.shape[0] == -(-audio.shape[0] * 24000 // rate // 1920)


def test_at_most_max_new_tokens_minus_one_frames() -> None:
    result = _model().generate("Hello there.", _xvec_voice(), greedy=True, max_new_tokens=5)
    assert result.codes.shape == (4, 16)
    assert result.stop_reason == "max_new_tokens"
    assert result.audio.shape == (4 * 1920,) and result.audio.dtype == np.float32
    check_audio(result.audio)


def test_eos_stop_matches_official_frame_count() -> None:
    goldens = load_goldens("qwen3-tiny-a")
    case = goldens.cases["xvec"]
    assert case["stop_reason"] == "eos"
    result = _model().generate(
        case["text"],
        _xvec_voice(),
        language=case["language"],
        greedy=True,
        max_new_tokens=case["max_new_tokens"],
    )
    assert result.stop_reason == "eos"
    assert result.codes.shape[0] == case["frames"]
    assert int(result.codes[:, 0].max()) < 2048  # EOS never becomes part of a frame


def test_extra_stop_ids_end_the_utterance() -> None:
    base = _model().generate("Hello there.", _xvec_voice(), greedy=True, max_new_tokens=12)
    stop = int(base.codes[5, 0])
    first = int((base.codes[:, 0] == stop).nonzero()[0])
    result = _model().generate(
        "Hello there.", _xvec_voice(), greedy=True, max_new_tokens=12, stop_ids=(stop,)
    )
    assert result.stop_reason == "eos"
    assert torch.equal(result.codes, base.codes[:first])


def test_seeded_sampling_is_reproducible() -> None:
    def run(seed: int) -> torch.Tensor:
        return _model().generate("Hello there.", _xvec_voice(), seed=seed, max_new_tokens=8).codes

    first = run(3)
    assert torch.equal(first, run(3))
    assert not torch.equal(first, run(4))


def test_sub_talker_settings_are_separate() -> None:
    # Greedy talker, sampled sub-talker: c0 stays the greedy one, the other groups vary.
    model, voice = _model(), _xvec_voice()
    greedy = model.generate("Hello there.", voice, greedy=True, max_new_tokens=3).codes
    mixed = model.generate(
        "Hello there.",
        voice,
        do_sample=False,
        repetition_penalty=1.0,
        subtalker_dosample=True,
        subtalker_temperature=5.0,
        subtalker_top_k=0,
        seed=1,
        max_new_tokens=3,
    ).codes
    assert torch.equal(mixed[0, 0], greedy[0, 0])
    assert not torch.equal(mixed[0, 1:], greedy[0, 1:])


@pytest.mark.slow
def test_compiled_model_equals_eager() -> None:
    # torch.compile of the layer stacks (about a minute of compiling on a 2-core box).
    eager = _model()
    compiled = tts_core.load_model(TINY, compile=True)
    voice = _xvec_voice()
    expected = eager.generate("Hello there.", voice, greedy=True, max_new_tokens=8)
    result = compiled.generate("Hello there.", voice, greedy=True, max_new_tokens=8)
    for stack in (compiled.talker.model, compiled.talker.code_predictor.model):
        assert not inspect.ismethod(stack.forward)  # still the compiled wrapper: no fallback
    assert torch.equal(result.codes, expected.codes)
    # Same codes through the same (uncompiled) decoder: two float32 evaluations at most.
    bound = fp32_pair_bound(load_goldens("qwen3-tiny-a"), "decoder_wav")
    assert np.abs(result.audio - expected.audio).max() <= bound
