"""The Chatterbox English model served through `/v1` (in-process server, the engine around the
backend `tts_core.backends.load_backend` chooses from the folder's files, no fallback allowed,
on the tiny English checkpoint a): a voice uploaded to /v1/audio/voices and cloned, the knobs
exaggeration and cfg_weight taken from the request body (declared once in
backends/chatterbox_english.py, so /v1 accepts and checks them by name), and the sample values
equal to the model's stream() for the seed and those knobs (the backend serves it through its
EnglishScheduler), to int16 rounding; the knob range
checks; and the page built from the same declaration shows their sliders.
"""

from __future__ import annotations

import threading

import httpx  # noqa: E402, I001 - after the test helpers, as tests/test_openai_api.py
import numpy as np
import pytest
from test_openai_api import make_api, serve

from tts_core.backends import load_backend
from tts_core.backends.chatterbox_english import ChatterboxEnglishBackend
from tts_core.engine import Backend, Engine, EngineConfig, SynthesisParams
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.english_t3 import EnglishSampling
from tts_core.server import VoiceRegistry

from .conftest import FIXTURES, REF_CLIP
from .english_common import english_model

TINY = FIXTURES / "chatterbox-english-tiny-a"
# int16 PCM is round(x * 32767) with the product formed in float32 (x float32): per sample
# |pcm / 32767 - x| <= 0.5 LSB + the product's float32 rounding (<= 32767 * 2^-24 LSB).
PCM_BOUND = (0.5 + 32767 * 2.0**-24) / 32767
TEXT = "how are you today?"


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def backend():
    loaded, notice = load_backend(str(TINY), "cpu", allow_fallback=False)
    assert isinstance(loaded, ChatterboxEnglishBackend) and notice is None
    yield loaded
    loaded.close()  # its scheduler's loop thread


@pytest.fixture(scope="module")
def server(backend, voices_dir):
    engine = Engine(backend, EngineConfig(fade_ms=0.0, max_concurrent=1, max_queue=4))
    with serve(make_api(engine, voices_dir)) as url:
        yield url


def pcm(server: str, **body) -> np.ndarray:
    body = {"model": "tts-1", "response_format": "pcm", **body}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["x-sample-rate"] == "24000"
    return np.frombuffer(response.content, dtype="<i2").astype(np.float64) / 32767


def test_backend_contract(backend) -> None:
    assert isinstance(backend, Backend)
    assert (backend.name, backend.can_clone, backend.needs_reference) == (
        "chatterbox-english",
        True,
        False,
    )
    defaults = backend.sampling_defaults()
    sampling = {
        "temperature": 0.8,
        "min_p": 0.05,
        "top_p": 1.0,
        "repetition_penalty": 1.2,
        "cfg_weight": 0.5,
    }
    assert {k: defaults[k] for k in sampling} == sampling and defaults["exaggeration"] == 0.5
    assert EnglishSampling(**sampling) == EnglishSampling()  # the official generate()'s defaults
    assert backend.create_voice(None, None).summary["mode"] == "built-in"


def test_uploaded_voice_is_cloned_with_the_knobs(backend, server, voices_dir, monkeypatch):
    seen = []
    enqueue = backend.loop.enqueue  # the request model.request made of the knobs by name

    def spy(seq):
        seen.append((seq.exaggeration, seq.sampling))
        return enqueue(seq)

    monkeypatch.setattr(backend.loop, "enqueue", spy)
    with REF_CLIP.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "en-clone"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=120,
        )
    assert made.status_code == 201, made.text[:300]
    audio = pcm(
        server, input=TEXT, voice="en-clone", seed=3, exaggeration=0.8, cfg_weight=0.3, watermark=0
    )
    _, clip = VoiceRegistry(voices_dir).load("en-clone")
    model = english_model(TINY)
    voice = model.create_voice(clip, 24000)
    sampling = EnglishSampling(cfg_weight=0.3)
    chunks = model.stream(
        TEXT, voice, seed=3, exaggeration=0.8, sampling=sampling, chunking=StreamChunking()
    )
    streamed = np.concatenate([chunk.audio for chunk in chunks])
    whole = model.generate(TEXT, voice, seed=3, exaggeration=0.8, sampling=sampling)
    assert seen == [(0.8, sampling)]  # the body's knobs reached the model
    assert audio.shape == streamed.shape == whole.audio.shape
    assert np.abs(audio - np.clip(streamed, -1, 1)).max() <= PCM_BOUND


def test_short_builtin_server_voice_is_accepted(server):
    """The English prepare_conditionals has no length check (Turbo's needs > 5 s): the server's
    ~3 s voices speak."""
    assert pcm(server, input="Hi.", voice="alloy", seed=1, cfg_weight=0.0).size > 0


def test_knob_range_errors_and_models(server):
    for name, value in (("cfg_weight", 3.0), ("exaggeration", -1.0), ("min_p", 1.5)):
        body = {"model": "tts-1", "input": "Hi.", "voice": "en-clone", name: value}
        response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=60)
        assert response.status_code == 400 and response.json()["error"]["param"] == name
    models = httpx.get(f"{server}/v1/models", timeout=30).json()["data"]
    assert any(m["id"].endswith("chatterbox-english-tiny-a") for m in models)


def test_the_page_shows_the_english_knobs(backend, tmp_path) -> None:
    from tts_core.ui.page import build_demo

    engine = Engine(backend, EngineConfig(fade_ms=0.0, max_concurrent=1, max_queue=0))
    config = build_demo(engine, VoiceRegistry(tmp_path / "voices")).get_config_file()
    labels = {c.get("props", {}).get("label") for c in config["components"]}
    assert {"Exaggeration", "CFG weight", "Min-p"} <= labels


def test_text_too_long_is_an_input_error(backend) -> None:
    from tts_core.engine import InputError

    params = SynthesisParams(seed=1)
    with pytest.raises(InputError, match="text too long"):
        list(
            backend.stream(
                "word " * 3000, backend.create_voice(None, None), params, threading.Event()
            )
        )
