"""stream(): chunk cadence, equality with generate(), freeing state when closed, and the one
engine: the served loop's chunks, bit for bit, on the calling thread."""

from __future__ import annotations

import threading
import weakref
from functools import cache

import numpy as np
import pytest
import torch

import tts_core
from tts_core.backends.qwen3 import served_loop
from tts_core.models.layers import DecoderStack

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
    made: list[weakref.ref] = []  # every KV tensor the stream allocates
    new_caches = DecoderStack.new_caches

    def tracked(self, *args, **kwargs):
        caches = new_caches(self, *args, **kwargs)
        made.extend(weakref.ref(t) for cache in caches for t in (cache.k, cache.v))
        return caches

    monkeypatch.setattr(DecoderStack, "new_caches", tracked)
    stream = model.stream(TEXT, _voice("icl"), greedy=True, max_new_tokens=10)
    assert made == []  # nothing is allocated before the first next()
    next(stream)
    assert made and all(ref() is not None for ref in made)  # talker and code predictor caches
    stream.close()  # runs the generator's finally block at once
    assert all(ref() is None for ref in made)  # freed now, not at garbage collection
    monkeypatch.undo()
    again = model.generate(TEXT, _voice("icl"), greedy=True, max_new_tokens=10)
    assert torch.equal(again.codes, fresh.codes)
    assert np.array_equal(again.audio, fresh.audio)


def test_should_stop_ends_the_stream_without_a_final_chunk() -> None:
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 5

    chunks = list(
        _model().stream(
            TEXT,
            _voice("xvec"),
            greedy=True,
            max_new_tokens=30,
            chunk_frames=2,
            should_stop=should_stop,
        )
    )
    assert chunks and not any(chunk.final for chunk in chunks)
    # asked before each frame: the 6th answer stops it, the 5th frame (pending) never leaves
    assert sum(chunk.frames for chunk in chunks) == 4 and len(asked) == 6


def test_a_failing_should_stop_raises_to_the_caller_after_the_chunks_made() -> None:
    def broken() -> bool:
        raise RuntimeError("consumer bug")

    stream = _model().stream(
        TEXT, _voice("xvec"), greedy=True, max_new_tokens=30, should_stop=broken
    )
    with pytest.raises(RuntimeError, match="consumer bug"):
        next(stream)


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


@pytest.mark.parametrize("name", ["qwen3-tiny-a", "qwen3-tiny-b"])
@pytest.mark.parametrize("mode", ["icl", "xvec"])
@pytest.mark.parametrize("sampling", [{"seed": 11}, {"greedy": True}], ids=["seeded", "greedy"])
def test_stream_gives_the_served_schedulers_chunks_on_the_calling_thread(name, mode, sampling):
    """One engine: `model.stream` is the serving engine with one row, stepped on the caller's
    thread. Its chunks equal those of the served loop (its own thread, the shared KV
    arena) for the same request and seed, field by field, codes and audio bit for bit (float32
    layers: one row alone runs the same calls either way); and every model call of
    `model.stream` runs on the calling thread, with no thread started."""
    model = tts_core.load_model(fixture_path(name))
    voice = golden_voice(load_goldens(name), mode)
    kwargs = {"max_new_tokens": 20, "first_chunk_frames": 3, "chunk_frames": 5, **sampling}
    here, seen = threading.get_ident(), set()
    parts = (model.talker, model.speech_tokenizer.decoder)
    hooks = [
        module.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
        for part in parts
        for module in part.modules()
    ]
    threads_before = set(threading.enumerate())
    try:
        alone = list(model.stream(TEXT, voice, **kwargs))
        assert seen == {here}
        assert set(threading.enumerate()) == threads_before  # no scheduler thread started
    finally:
        for hook in hooks:
            hook.remove()
    scheduler = served_loop(model, max_batch=2)  # the prompts fit its first prefill chunk
    try:
        served = list(scheduler.submit(TEXT, voice, **kwargs))
    finally:
        scheduler.close()
    assert len(alone) == len(served) >= 2
    for ours, theirs in zip(alone, served, strict=True):
        assert torch.equal(ours.codes, theirs.codes)
        assert np.array_equal(ours.audio, theirs.audio)
        assert (ours.frames, ours.final, ours.stop_reason, ours.batch_size) == (
            theirs.frames,
            theirs.final,
            theirs.stop_reason,
            theirs.batch_size,
        )
        assert ours.compute_s > 0 and theirs.compute_s > 0
    check_audio(np.concatenate([chunk.audio for chunk in alone]))


def test_cuda_graphs_is_off_on_the_cpu_and_decodes_as_without_it() -> None:
    """load_model(cuda_graphs=True / "auto") on the CPU loads with graphs off (they exist only on
    CUDA: serving/cuda_graphs.py) and decodes exactly as without the option; a bad value is an
    error naming it."""
    for setting in (True, "auto", "on"):
        model = tts_core.load_model(fixture_path("qwen3-tiny-a"), cuda_graphs=setting)
        assert model.cuda_graphs is False
    with pytest.raises(ValueError, match="cuda_graphs must be auto, on or off"):
        tts_core.load_model(fixture_path("qwen3-tiny-a"), cuda_graphs="sometimes")
    args = (TEXT, _voice("xvec"))
    expected = _model().generate(*args, greedy=True, max_new_tokens=8)
    got = model.generate(*args, greedy=True, max_new_tokens=8)
    assert torch.equal(got.codes, expected.codes) and np.array_equal(got.audio, expected.audio)


def test_frames_gives_the_codes_of_stream_without_the_codec() -> None:
    """model.frames (codes only, no codec: calibration, accuracy runs) is the same engine."""
    model = _model()
    kwargs = {"seed": 3, "max_new_tokens": 12}
    codes = torch.cat([chunk.codes for chunk in model.stream(TEXT, _voice("icl"), **kwargs)])
    prompt, settings = model.plan(TEXT, _voice("icl"), **kwargs)
    codec, model.speech_tokenizer = model.speech_tokenizer, None
    try:
        frames = list(model.frames(prompt, settings))
    finally:
        model.speech_tokenizer = codec
    assert torch.equal(torch.stack(frames), codes)
