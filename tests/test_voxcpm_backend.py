"""VoxCPMBackend through the engine on the tiny VoxCPM2 checkpoint (tests/fixtures/voxcpm2-tiny).

The golden cases' text, seed and reference clip (24 kHz, as the engine hands clips to backends)
go through `Engine` with fades off, so the streamed audio is checked three ways: bit-exact
against `model.stream` with the same chunking (the same code path), against `model.generate`
within `fp32_pair_bound` (a streamed and a full VAE pass are two float32 evaluations of the
same audio: the error model of tests/qwen3/conftest.py), and against the official
voxcpm==2.0.3 golden within `check_fp32`'s bounds.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from qwen3.conftest import check_audio, check_fp32, fp32_pair_bound, load_goldens
from voxcpm2.conftest import FIXTURES, shared_model

from tts_core.backends.voxcpm import VoxCPMBackend
from tts_core.engine import (
    Backend,
    Engine,
    EngineConfig,
    InputError,
    Limits,
    SynthesisParams,
    SynthesisRequest,
)

TINY = FIXTURES / "voxcpm2-tiny"
# the golden clip is 62.5 ms (a tiny checkpoint); the engine's 1 s minimum is a product limit
LIMITS = Limits(min_reference_s=0.05)
FIRST, STEADY = 1, 2  # patches in the first and in every later chunk


@pytest.fixture(scope="module")
def backend() -> VoxCPMBackend:
    return VoxCPMBackend(shared_model(TINY), "voxcpm2-tiny", "cpu")


@pytest.fixture(scope="module")
def goldens():
    return load_goldens("voxcpm2-tiny-model")


def _engine(backend: VoxCPMBackend) -> Engine:
    config = EngineConfig(limits=LIMITS, fade_ms=0.0, max_concurrent=1, max_queue=0)
    return Engine(backend, config)


def test_backend_contract(backend: VoxCPMBackend) -> None:
    model = backend.model
    assert isinstance(backend, Backend)
    assert (backend.name, backend.can_clone, backend.needs_reference) == ("voxcpm", True, False)
    assert backend.independent_phrases is False and backend.default_concurrency == 1
    assert backend.sample_rate == model.sample_rate == 48000
    assert backend.frame_samples == model.patch_size * model.vae.decode_hop_length == 90
    assert backend.weight_format == "float32" and backend.sampling_defaults() == {
        "cfg_value": 2.0,
        "inference_timesteps": 10,
    }
    voice = backend.create_voice(None, None)
    assert voice.data is None and voice.summary["mode"] == "zero-shot"


@pytest.mark.parametrize("key", ["zero_shot", "reference", "ref_text"])
def test_engine_stream_equals_model(backend: VoxCPMBackend, goldens, key: str) -> None:
    case, model = goldens.cases[key], backend.model
    clip = goldens["ref_clip"].numpy()
    assert goldens.meta["clip_rate"] == 24000  # the engine's reference rate: no resampling
    ref_text = goldens.meta["ref_text"] if case["voice"] == "ref_text" else None
    request = SynthesisRequest(
        case["text"],
        reference=None if case["voice"] == "none" else (24000, clip),
        reference_text=ref_text,
        params=SynthesisParams(seed=case["seed"], first_chunk_frames=FIRST, chunk_frames=STEADY),
    )
    events = list(_engine(backend).stream(request))
    audio = np.concatenate([e.audio for e in events])
    stats = events[-1].stats

    voice = None if case["voice"] == "none" else model.create_voice(clip, 24000, ref_text)
    chunks = list(model.stream(case["text"], voice, seed=case["seed"],
                               first_chunk_patches=FIRST, chunk_patches=STEADY))  # fmt: skip
    assert np.array_equal(audio, np.concatenate([c.audio for c in chunks]))  # same code path
    full = model.generate(case["text"], voice, seed=case["seed"])
    assert audio.shape == full.audio.shape
    assert float(np.abs(audio - full.audio).max()) <= fp32_pair_bound(goldens, f"mode_{key}")
    print(check_fp32(audio, goldens, f"mode_{key}"))  # the official voxcpm==2.0.3 audio

    assert len(events) >= 2 and events[-1].final and not any(e.final for e in events[:-1])
    assert events[0].audio.size == FIRST * backend.frame_samples
    check_audio(audio)
    assert stats["stop_reason"] == full.stop_reason and stats["done"]
    assert stats["voice"]["mode"] == {"none": "zero-shot", "ref": "reference"}.get(
        case["voice"], "continuation"
    )
    assert stats["sample_rate"] == backend.sample_rate  # native rate (the engine change)


def test_cancel_stops_within_one_patch(backend: VoxCPMBackend, monkeypatch) -> None:
    """Stop set while the 2nd patch is made (the chunk needs 3): no 3rd patch is generated."""
    model, cancel, made = backend.model, threading.Event(), []
    original = model._patches

    def counting(*args, **kwargs):
        for patch in original(*args, **kwargs):
            made.append(patch)
            if len(made) == 2:
                cancel.set()
            yield patch

    monkeypatch.setattr(model, "_patches", counting)
    params = SynthesisParams(seed=5, first_chunk_frames=1, chunk_frames=3)
    pieces = list(backend.stream("Hello world, this is a test.", backend.create_voice(None, None),
                                 params, cancel))  # fmt: skip
    assert len(made) == 2  # the tiny model's stop head can end no earlier than the 4th patch
    assert [p.frames for p in pieces] == [1]


def test_cancel_through_the_engine_frees_the_slot(backend: VoxCPMBackend) -> None:
    engine, cancel = _engine(backend), threading.Event()
    params = SynthesisParams(seed=5, first_chunk_frames=1, chunk_frames=1)
    stream = engine.stream(SynthesisRequest("Hello world, this is a test.", params=params), cancel)
    first = next(stream)
    cancel.set()
    rest = list(stream)
    assert not first.final and rest[-1].final and rest[-1].stats["stop_reason"] == "cancelled"
    assert engine.active_requests == 0 and engine.waiting_requests == 0
    audio, stats = engine.synthesize(SynthesisRequest("Hello.", params=params))  # slot is free
    assert audio.size > 0 and stats["stop_reason"] == "stop_head"  # long before the cap


@pytest.mark.parametrize(
    ("audio", "text", "message"),
    [
        (np.zeros((100, 2), np.float32), None, "mono"),
        (np.zeros(0, np.float32), None, "mono"),
        (np.arange(100, dtype=np.int16), None, "float"),
        (np.full(100, np.nan, np.float32), None, "NaN"),
        (None, "Some words.", "without a reference clip"),
    ],
)
def test_bad_clip_is_an_input_error(backend: VoxCPMBackend, audio, text, message: str) -> None:
    with pytest.raises(InputError, match=message):
        backend.create_voice(audio, text)


def test_silent_clip_through_the_engine(backend: VoxCPMBackend) -> None:
    engine = _engine(backend)
    request = SynthesisRequest("Hello.", reference=(24000, np.zeros(24000, np.float32)))
    with pytest.raises(InputError, match="silent"):
        engine.stream(request)
    assert engine.active_requests == 0 and engine.waiting_requests == 0


def test_guidance_and_steps_reach_the_model(backend: VoxCPMBackend) -> None:
    """cfg_value / inference_timesteps from the request change the audio; absent, the
    official defaults (2.0, 10) apply."""
    engine = _engine(backend)

    def speak(**knobs: float) -> np.ndarray:
        params = SynthesisParams(seed=5, **knobs)
        return engine.synthesize(SynthesisRequest("Guided speech.", None, None, params))[0]

    default = speak()
    assert np.array_equal(default, speak(cfg_value=2.0, inference_timesteps=10))
    assert not np.array_equal(default, speak(cfg_value=0.5))
    assert not np.array_equal(default, speak(inference_timesteps=3))


def test_the_model_computes_on_its_one_thread(backend: VoxCPMBackend, goldens) -> None:
    """Voices, prompts and patches run on the backend's model thread, whoever asks (see
    engine/model_thread.py: a second live OpenMP team slows every parallel op)."""
    model, seen = backend.model, set()
    hooks = [module.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
             for part in (model.net, model.vae) for module in part.modules()]  # fmt: skip
    clip = goldens["ref_clip"].numpy()
    results: list = []

    def listener(i: int) -> None:
        voice = backend.create_voice(clip, "a reference" if i else None)
        params = SynthesisParams(seed=i, first_chunk_frames=1, chunk_frames=2)
        results.append(list(backend.stream("Hello.", voice, params, threading.Event())))

    try:
        threads = [threading.Thread(target=listener, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for hook in hooks:
            hook.remove()
    assert len(results) == 2 and all(results)
    assert seen == {backend.thread.call(threading.get_ident)}
