"""ChatterboxBackend through the engine on the tiny Turbo checkpoints: the streamed chunks are
the model's whole-utterance generate() cut in frames (bit-equal: the same code path), voices
(built-in, cloned from a 24 kHz clip as the engine hands clips over), knobs and input errors."""

from __future__ import annotations

import threading

import librosa
import numpy as np
import pytest
from qwen3.conftest import check_audio

from tts_core.backends.chatterbox import SAMPLES_PER_TOKEN, ChatterboxBackend
from tts_core.engine import (
    Backend,
    Engine,
    EngineConfig,
    InputError,
    SynthesisParams,
    SynthesisRequest,
)
from tts_core.models.chatterbox.sampling import TurboSampling

from .conftest import FIXTURES, ref_clip, shared_model

TINY = FIXTURES / "chatterbox-turbo-tiny-a"
FIRST, STEADY = 2, 5  # tokens in the first and in every later chunk


@pytest.fixture(scope="module")
def backend() -> ChatterboxBackend:
    return ChatterboxBackend(shared_model(TINY), TINY.name, "cpu")


def _engine(backend: ChatterboxBackend) -> Engine:
    return Engine(backend, EngineConfig(fade_ms=0.0, max_concurrent=1, max_queue=0))


def test_backend_contract(backend: ChatterboxBackend) -> None:
    assert isinstance(backend, Backend)
    assert (backend.name, backend.can_clone, backend.needs_reference) == ("chatterbox", True, False)
    assert backend.sample_rate == 24000 and backend.frame_samples == SAMPLES_PER_TOKEN
    defaults = backend.sampling_defaults()
    assert defaults == {"temperature": 0.8, "top_k": 1000, "top_p": 0.95, "repetition_penalty": 1.2}
    assert TurboSampling(**defaults) == TurboSampling()  # the official generate()'s defaults
    assert backend.create_voice(None, None).summary["mode"] == "built-in"


@pytest.mark.parametrize("cloned", [False, True])
def test_engine_stream_equals_generate(backend: ChatterboxBackend, cloned: bool) -> None:
    model = backend.model
    clip = None
    if cloned:
        audio, sr = ref_clip()
        clip = librosa.resample(audio, orig_sr=sr, target_sr=24000)  # as the engine hands it
    params = SynthesisParams(seed=7, first_chunk_frames=FIRST, chunk_frames=STEADY)
    request = SynthesisRequest("how are you today?", reference=None if clip is None else
                               (24000, clip), params=params)  # fmt: skip
    events = list(_engine(backend).stream(request))
    audio = np.concatenate([e.audio for e in events])
    voice = None if clip is None else model.create_voice(clip, 24000)
    full = model.generate("how are you today?", voice, seed=7)
    assert np.array_equal(audio, full.audio)
    assert events[0].audio.size == FIRST * SAMPLES_PER_TOKEN
    assert events[-1].final and events[-1].stats["stop_reason"] == full.stop_reason == "eos"
    check_audio(audio)


def test_knobs_reach_the_sampler(backend: ChatterboxBackend, monkeypatch) -> None:
    seen = []
    generate = backend.model.generate

    def spy(*args, **kwargs):
        seen.append(kwargs["sampling"])
        return generate(*args, **kwargs)

    monkeypatch.setattr(backend.model, "generate", spy)
    params = SynthesisParams(seed=1, top_k=1, temperature=0.5, first_chunk_frames=FIRST)
    list(backend.stream("Hi.", backend.create_voice(None, None), params, threading.Event()))
    assert seen == [TurboSampling(temperature=0.5, top_k=1)]
    # top_k 1 is greedy: the tokens no longer depend on the seed
    tokens = [generate("Hi.", seed=s, sampling=seen[0]).tokens.tolist() for s in (1, 2)]
    assert tokens[0] == tokens[1]


def test_input_errors(backend: ChatterboxBackend) -> None:
    with pytest.raises(InputError, match="longer than 5 s"):
        backend.create_voice(np.full(24000 * 3, 0.1, dtype=np.float32), None)
    with pytest.raises(InputError, match="NaN"):
        backend.create_voice(np.full(24000 * 6, np.nan, dtype=np.float32), None)
