"""stream(): chunk cadence, equality with generate(), and freeing state when closed."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

import tts_core
from tts_core.models.qwen3_tts.decode_loop import FrameLoop

from .conftest import check_audio, fixture_path, fp32_pair_bound, golden_voice, load_goldens


@cache
def _model():
    return tts_core.load_model(fixture_path("qwen3-tiny-a"))


@cache
def _voice(mode: str):
    return golden_voice(load_goldens("qwen3-tiny-a"), mode)


TEXT = "Streaming voice cloning, tested frame by frame."


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_stream_equals_generate(mode: str) -> None:
    model = _model()
    result = model.generate(TEXT, _voice(mode), greedy=True, max_new_tokens=16)
    chunks = list(model.stream(TEXT, _voice(mode), greedy=True, max_new_tokens=16))
    audio = np.concatenate([chunk.audio for chunk in chunks])
    assert torch.equal(torch.cat([chunk.codes for chunk in chunks]), result.codes)
    assert audio.shape == result.audio.shape == (15 * 1920,)  # reference audio removed
    check_audio(audio)
    # Same codes, decoded in other chunks: two float32 evaluations of the tiny-a decoder, which
    # differ by at most 2 x 4 E of its decoder golden (tests/qwen3/conftest.py; ~3.5e-4).
    bound = fp32_pair_bound(load_goldens("qwen3-tiny-a"), "decoder_wav")
    assert np.abs(audio - result.audio).max() <= bound
    assert chunks[-1].stop_reason == result.stop_reason == "max_new_tokens"


def test_chunk_cadence_and_flags() -> None:
    chunks = list(
        _model().stream(
            TEXT,
            _voice("xvec"),
            greedy=True,
            max_new_tokens=16,
            first_chunk_frames=3,
            chunk_frames=4,
        )
    )
    assert [chunk.frames for chunk in chunks] == [3, 4, 4, 4]  # 15 = max_new_tokens - 1
    assert [chunk.final for chunk in chunks] == [False, False, False, True]
    assert [chunk.stop_reason for chunk in chunks] == [None, None, None, "max_new_tokens"]
    for chunk in chunks:
        assert chunk.audio.dtype == np.float32 and chunk.audio.shape == (chunk.frames * 1920,)
        assert chunk.compute_s > 0


def test_a_known_limit_marks_the_last_full_chunk_final() -> None:
    # max_new_tokens=9 allows 8 frames = 2 + 6: no empty trailing chunk is needed.
    chunks = list(
        _model().stream(
            TEXT,
            _voice("xvec"),
            greedy=True,
            max_new_tokens=9,
            first_chunk_frames=2,
            chunk_frames=6,
        )
    )
    assert [chunk.frames for chunk in chunks] == [2, 6]
    assert chunks[-1].final and chunks[-1].stop_reason == "max_new_tokens"


def test_first_chunk_carries_exactly_first_chunk_frames() -> None:
    stream = _model().stream(TEXT, _voice("icl"), greedy=True, first_chunk_frames=2)
    first = next(stream)
    stream.close()
    assert first.frames == 2 and first.audio.shape == (2 * 1920,) and not first.final


def test_breaking_early_frees_the_request_and_a_new_run_is_unaffected(monkeypatch) -> None:
    model = _model()
    fresh = model.generate(TEXT, _voice("icl"), greedy=True, max_new_tokens=10)
    released = []
    original = FrameLoop.release

    def spy(loop) -> None:
        released.append(loop)
        original(loop)

    monkeypatch.setattr(FrameLoop, "release", spy)
    stream = model.stream(TEXT, _voice("icl"), greedy=True, max_new_tokens=10)
    next(stream)
    assert released == []
    stream.close()  # runs the generator's finally block at once
    assert len(released) == 1
    assert released[0].caches == [] and released[0].predictor_caches == []
    again = model.generate(TEXT, _voice("icl"), greedy=True, max_new_tokens=10)
    assert torch.equal(again.codes, fresh.codes)
    assert np.array_equal(again.audio, fresh.audio)


def test_bad_arguments_fail_before_the_first_chunk() -> None:
    with pytest.raises(ValueError):
        _model().stream(TEXT, _voice("xvec"), first_chunk_frames=0)
    with pytest.raises(ValueError, match="unsupported language"):
        _model().stream(TEXT, _voice("xvec"), language="elvish")


def test_icl_voice_decodes_its_reference_once(monkeypatch) -> None:
    """The decoder state after the reference frames is cached on the voice and cloned, so
    later requests start generating at once (and give the very same audio)."""
    model = _model()
    goldens = load_goldens("qwen3-tiny-a")
    voice = tts_core.Voice(goldens["speaker_embedding"], goldens["ref_codes"], "Reference.")
    decoder = model.speech_tokenizer.decoder
    decode_step, calls = decoder.decode_step, []

    def counting(codes: torch.Tensor, state):  # noqa: ANN001
        calls.append(codes.shape[-1])
        return decode_step(codes, state)

    monkeypatch.setattr(decoder, "decode_step", counting)
    first = model.generate(TEXT, voice, greedy=True, max_new_tokens=8)
    second = model.generate(TEXT, voice, greedy=True, max_new_tokens=8)
    reference_frames = goldens["ref_codes"].shape[0]
    assert calls.count(reference_frames) == 1
    assert sum(calls) == reference_frames + 2 * 7
    assert np.array_equal(first.audio, second.audio)
