"""Chatterbox Turbo served through `/v1` (the OpenAI-style routes, in-process server with the
engine around ChatterboxBackend on tiny-a): a voice uploaded to /v1/audio/voices and cloned,
the native 24 kHz rate, and the sample values equal to the model's stream() for the seed with
the default chunking (as long as generate()'s clip), to int16 rounding (round(x * 32767): |error| <= 1/2 LSB); the server's built-in voices
spoken and a short clip refused. (/v1 always names a clip; the checkpoint's conds.pt voice is the no-clip voice of the
engine: tests/chatterbox/test_backend.py.)

The backend is the one `python app.py --model <folder>` gets: tts_core.backends.load_backend
chooses it from the folder's files (no fallback allowed, so a wrong choice fails here).
"""

from __future__ import annotations

import httpx  # noqa: E402, I001 - after the test helpers, as tests/test_openai_api.py
import numpy as np
import pytest
import soundfile as sf
from test_openai_api import make_api, serve

from tts_core.backends import load_backend
from tts_core.backends.chatterbox import ChatterboxBackend
from tts_core.engine import Engine, EngineConfig
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.server import VoiceRegistry

from .conftest import FIXTURES, REF_CLIP, shared_model

TINY = FIXTURES / "chatterbox-turbo-tiny-a"
# int16 PCM is round(x * 32767) with the product formed in float32 (x float32): per sample
# |pcm / 32767 - x| <= 0.5 LSB + the product's float32 rounding (<= 32767 * 2^-24 LSB).
PCM_BOUND = (0.5 + 32767 * 2.0**-24) / 32767


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(voices_dir):
    # float32 T3, as shared_model (quantize "auto" would make it int8: test_int8_t3.py)
    backend, notice = load_backend(str(TINY), "cpu", allow_fallback=False, quantize="none")
    assert isinstance(backend, ChatterboxBackend) and notice is None
    engine = Engine(backend, EngineConfig(fade_ms=0.0, max_concurrent=1, max_queue=4))
    with serve(make_api(engine, voices_dir)) as url:
        yield url


def pcm(server: str, **body) -> np.ndarray:
    body = {"model": "tts-1", "response_format": "pcm", **body}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["x-sample-rate"] == "24000"
    return np.frombuffer(response.content, dtype="<i2").astype(np.float64) / 32767


def test_the_built_in_voices_speak_and_a_short_clip_is_refused_with_the_reason(
    server, speech_like, tmp_path
):
    """The server's built-in voices were ~3 s clips, all refused (Turbo needs more than 5 s,
    the official asserts it); they are 5.7-8.5 s since issue 36 and speak. A shorter clip is
    still a 400 naming the limit, before any audio."""
    body = {"model": "tts-1", "input": "Hi.", "voice": "alloy", "response_format": "pcm"}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200 and len(response.content) > 0, response.text[:300]
    clip = tmp_path / "short.wav"
    sf.write(clip, speech_like(3.0, 24_000), 24_000)
    with clip.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "cb-short"},
            files={"file": ("short.wav", f, "audio/wav")},
            timeout=60,
        )
    assert made.status_code == 201, made.text
    response = httpx.post(
        f"{server}/v1/audio/speech", json={**body, "voice": "cb-short"}, timeout=60
    )
    assert response.status_code == 400 and "longer than 5 s" in response.json()["error"]["message"]


def test_uploaded_voice_is_cloned(server, voices_dir):
    with REF_CLIP.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "cb-clone"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=120,
        )
    assert made.status_code == 201, made.text[:300]
    audio = pcm(server, input="how are you today?", voice="cb-clone", seed=3, watermark=0)
    # The clip as the server stored it (24 kHz, 16-bit) and hands it to the engine:
    _, clip = VoiceRegistry(voices_dir).load("cb-clone")
    model = shared_model(TINY)
    voice = model.create_voice(clip, 24000)
    chunks = model.stream("how are you today?", voice, seed=3, chunking=StreamChunking())
    streamed = np.concatenate([chunk.audio for chunk in chunks])
    assert (
        audio.shape
        == streamed.shape
        == model.generate("how are you today?", voice, seed=3).audio.shape
    )
    assert np.abs(audio - np.clip(streamed, -1, 1)).max() <= PCM_BOUND


def test_the_models_own_voice_is_named_default(server, voices_dir):
    """/v1's voice "default" is the checkpoint's conds.pt voice (the page's "no clip"), the
    same stream as model.stream with the built-in voice; no saved voice may take the name."""
    audio = pcm(server, input="how are you today?", voice="default", seed=5, watermark=0)
    model = shared_model(TINY)
    chunks = model.stream(
        "how are you today?", model.builtin_voice, seed=5, chunking=StreamChunking()
    )
    streamed = np.concatenate([chunk.audio for chunk in chunks])
    assert audio.shape == streamed.shape
    assert np.abs(audio - np.clip(streamed, -1, 1)).max() <= PCM_BOUND
    with REF_CLIP.open("rb") as f:
        taken = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "default"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=120,
        )
    assert taken.status_code == 400 and "own voice" in taken.json()["error"]["message"]
    unknown = httpx.post(
        f"{server}/v1/audio/speech", timeout=60, json={"input": "Hi.", "voice": "no-such-voice"}
    )
    assert unknown.status_code == 404 and "'default'" in unknown.json()["error"]["message"]


def test_knobs_and_errors_over_v1(server):
    body = {"model": "tts-1", "input": "Hi.", "voice": "cb-clone", "top_p": 2.0}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "top_p"
    models = httpx.get(f"{server}/v1/models", timeout=30).json()["data"]
    assert any(m["id"].endswith("chatterbox-turbo-tiny-a") for m in models)
