"""ChatterboxBackend through the engine on the tiny Turbo checkpoints: the streamed audio is the
model's `stream` (bit-equal: the same code path; its error against the whole-utterance pass is
tests/chatterbox/test_streaming.py's), as long as generate()'s clip; voices (built-in, cloned
from a 24 kHz clip as the engine hands clips over), knobs and input errors."""

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
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.sampling import TurboSampling

from .conftest import FIXTURES, ref_clip, shared_model

TINY = FIXTURES / "chatterbox-turbo-tiny-a"
FIRST = 2  # a shared chunk size: the backend does not read it
S3GEN_FIRST, S3GEN_STEADY = 6, 10  # tokens before the first and between later S3Gen passes


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
    sampling = {"temperature": 0.8, "top_k": 1000, "top_p": 0.95, "repetition_penalty": 1.2}
    chunking = {
        "first_chunk_tokens": StreamChunking().first_tokens,
        "chunk_tokens": StreamChunking().chunk_tokens,
    }
    assert defaults == {**sampling, **chunking, "watermark": 1}  # Perth on the stream: on
    assert TurboSampling(**sampling) == TurboSampling()  # the official generate()'s defaults
    assert "Perth watermark" in backend.description
    assert backend.create_voice(None, None).summary["mode"] == "built-in"


@pytest.mark.parametrize("cloned", [False, True])
def test_engine_stream_equals_generate(backend: ChatterboxBackend, cloned: bool) -> None:
    model = backend.model
    clip = None
    if cloned:
        audio, sr = ref_clip()
        clip = librosa.resample(audio, orig_sr=sr, target_sr=24000)  # as the engine hands it
    # (the shared first_chunk_frames / chunk_frames are not Chatterbox's: the engine refuses
    # them, tests/test_knobs.py)
    params = SynthesisParams(
        seed=7,
        first_chunk_tokens=S3GEN_FIRST,
        chunk_tokens=S3GEN_STEADY,
        watermark=0,
    )
    request = SynthesisRequest(
        "how are you today?", reference=None if clip is None else (24000, clip), params=params
    )
    events = list(_engine(backend).stream(request))
    audio = np.concatenate([e.audio for e in events])
    voice = None if clip is None else model.create_voice(clip, 24000)
    chunking = StreamChunking(S3GEN_FIRST, S3GEN_STEADY)
    chunks = list(model.stream("how are you today?", voice, seed=7, chunking=chunking))
    assert np.array_equal(audio, np.concatenate([c.audio for c in chunks]))
    assert len(events) > 2  # audio came out before the end
    full = model.generate("how are you today?", voice, seed=7)
    assert audio.shape == full.audio.shape
    assert events[-1].final and events[-1].stats["stop_reason"] == full.stop_reason == "eos"
    check_audio(audio)


def test_knobs_reach_the_model(backend: ChatterboxBackend, monkeypatch) -> None:
    seen = []
    enqueue = backend.loop.enqueue  # the request model.request made of the knobs by name

    def spy(seq):
        seen.append((seq.sampling, seq.chunking))
        return enqueue(seq)

    monkeypatch.setattr(backend.loop, "enqueue", spy)
    params = SynthesisParams(
        seed=1,
        top_k=1,
        temperature=0.5,
        first_chunk_frames=FIRST,
        first_chunk_tokens=3,
        chunk_tokens=7,
    )
    list(backend.stream("Hi.", backend.create_voice(None, None), params, threading.Event()))
    assert seen == [(TurboSampling(temperature=0.5, top_k=1), StreamChunking(3, 7))]
    # top_k 1 is greedy: the tokens no longer depend on the seed
    generate = backend.model.generate
    tokens = [generate("Hi.", seed=s, sampling=seen[0][0]).tokens.tolist() for s in (1, 2)]
    assert tokens[0] == tokens[1]


def test_input_errors(backend: ChatterboxBackend) -> None:
    with pytest.raises(InputError, match="longer than 5 s"):
        backend.create_voice(np.full(24000 * 3, 0.1, dtype=np.float32), None)
    with pytest.raises(InputError, match="NaN"):
        backend.create_voice(np.full(24000 * 6, np.nan, dtype=np.float32), None)


def _transcript_box_shown(engine: Engine, tmp_path) -> bool:
    from tts_core.server import VoiceRegistry
    from tts_core.ui.page import build_demo

    config = build_demo(engine, VoiceRegistry(tmp_path / "voices")).get_config_file()
    (box,) = [
        c for c in config["components"] if c.get("props", {}).get("elem_id") == "reference-text"
    ]
    return box["props"]["visible"] is not False


def test_the_page_hides_the_transcript_box(backend: ChatterboxBackend, tmp_path) -> None:
    """Turbo clones from the clip alone (issue #25 item 5): no transcript box on its page; a
    backend that reads transcripts (the attribute left undeclared, as Qwen3-TTS) keeps it."""
    assert backend.reads_transcript is False
    assert not _transcript_box_shown(_engine(backend), tmp_path)
    assert _engine(backend).info()["reads_transcript"] is False  # /v1/models says so too
    reading = ChatterboxBackend(backend.model, backend.model_name, "cpu")
    reading.reads_transcript = True
    assert _transcript_box_shown(_engine(reading), tmp_path)


@pytest.mark.parametrize("installed", [True, False])
def test_backend_start_preloads_the_watermark_model(
    monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    """Perth's model is loaded with the backend (watermark on by default), not at the first
    request; without resemble-perth nothing is loaded and the backend still starts."""
    from tts_core.audio import perth_watermark

    monkeypatch.setattr(perth_watermark, "_shared", None)
    if installed and not perth_watermark.perth_available():
        pytest.skip("resemble-perth is not installed")
    monkeypatch.setattr(perth_watermark, "perth_available", lambda: installed)
    ChatterboxBackend(shared_model(TINY), TINY.name, "cpu")
    assert (perth_watermark._shared is not None) == installed
