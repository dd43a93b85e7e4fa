"""`python app.py --model tests/fixtures/voxcpm2-tiny`: VoxCPM2 served end to end, chosen from
the checkpoint's config.json, at its native 48 kHz, through gradio_client and /v1.

The checkpoint is tiny and random: what is tested is the path (dispatch, zero-shot and cloned
requests, the native rate in every output, stats, errors), not the voice.
"""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import page_controls_shown
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "voxcpm2-tiny"
REFERENCE = FIXTURES / "ref_clip_24k.wav"
RATE = 48_000  # the tiny config's audio_vae_config.out_sample_rate, as the release's
SEEDED = (0.9, 50, 1.0, 1.05, 1234, 2, 2)  # the sampling values do not apply; seed does

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(launch_app) -> str:
    url, _ = launch_app("--model", str(CHECKPOINT), "--no-fallback")
    return url


def call(text: str, reference=None, ref_text: str = "") -> tuple:
    clip = handle_file(str(reference)) if reference else None
    return (text, "auto", clip, ref_text, *SEEDED)


def test_the_page_api_serves_voxcpm_at_its_native_rate(server):
    client = Client(server, verbose=False)
    outputs = list(client.submit(*call("Hello from a second model."), api_name="/synthesize"))
    stats = outputs[-1][1]
    assert stats["backend"] == "voxcpm" and stats["model"].endswith("voxcpm2-tiny")
    assert stats["sample_rate"] == RATE and stats["done"]
    chunks = [sf.read(path, dtype="float32") for path, _ in outputs if path]
    assert chunks and all(rate == RATE for _, rate in chunks)
    audio = np.concatenate([a for a, _ in chunks])
    assert abs(audio.size / RATE - stats["audio_s"]) <= 0.5e-4 + 1e-9  # audio_s: 4 decimals
    assert np.isfinite(audio).all() and np.abs(audio).max() > 1e-3  # finite, not silent

    path, full = client.predict(*call("Hello from a second model."), api_name="/synthesize_full")
    clip, rate = sf.read(path, dtype="float32")
    assert rate == RATE and clip.size == audio.size  # same seed: same length

    cloned, cloned_stats = client.predict(
        *call("A cloned voice.", REFERENCE, "a short reference"), api_name="/synthesize_full"
    )
    assert sf.info(cloned).samplerate == RATE and cloned_stats["voice"]["transcript"]


def test_v1_speech_follows_the_native_rate(server):
    # the model's own voice: the built-in clips (>= 5.7 s, for Chatterbox Turbo) are longer
    # than this tiny checkpoint's caches hold (2.9 s of reference; GET /v1/audio/voices says so)
    body = {"input": "Hello over HTTP.", "voice": "default", "response_format": "wav", "seed": 3}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["x-sample-rate"] == str(RATE)
    rate = struct.unpack("<I", response.content[24:28])[0]
    assert rate == RATE and len(response.content) > 44
    models = httpx.get(f"{server}/v1/models", timeout=30).json()
    assert any(m["id"].endswith("voxcpm2-tiny") for m in models["data"])


def test_v1_refuses_a_voice_too_long_for_the_model_before_streaming(server, tmp_path, speech_like):
    """A request only the model can refuse (its prompt is longer than the model's cache) is an
    HTTP 400 with the reason, not a 200 whose body stops midway."""
    clip = tmp_path / "long.wav"
    sf.write(clip, speech_like(9.0, 24_000), 24_000)
    with clip.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "long-voxcpm"},
            files={"file": ("long.wav", f, "audio/wav")},
            timeout=60,
        )
    assert made.status_code == 201, made.text[:300]
    body = {"input": "Hello.", "voice": "long-voxcpm", "response_format": "wav"}
    response = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 400, response.text[:300]
    assert "shorter reference clip" in response.json()["error"]["message"]


def pcm_frames(body: bytes) -> list[tuple[int, bytes]]:
    """The PCM route's frames: (type, payload), each behind an 8-byte (type, length) header."""
    frames, at = [], 0
    while at < len(body):
        kind, size = struct.unpack_from("<II", body, at)
        frames.append((kind, body[at + 8 : at + 8 + size]))
        at += 8 + size
    return frames


def test_pcm_route_refuses_a_transcript_without_a_clip_before_streaming(server):
    """Regression: the page's PCM route answered 200 and then an error frame for a VoxCPM2
    transcript sent without its clip (the backend checked it once the stream ran); the engine
    now checks it while validating, so it is a 400 before any audio, as the README says."""
    body = {"text": "Words without a clip.", "reference_text": "some words", "seed": 1}
    response = httpx.post(f"{server}/tts_stream/pcm", json=body, timeout=120)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["param"] == "reference_text" and "transcript" in error["message"]
    del body["reference_text"]  # the same request without the transcript: zero-shot audio
    response = httpx.post(f"{server}/tts_stream/pcm", json=body, timeout=120)
    assert response.status_code == 200 and response.headers["x-sample-rate"] == str(RATE)
    kinds = [kind for kind, _ in pcm_frames(response.content)]
    assert 1 in kinds and 3 not in kinds  # PCM, and no error frame


def test_bad_input_is_an_error_and_the_server_keeps_serving(server, tmp_path, speech_like):
    client = Client(server, verbose=False)
    # the tiny model's caches hold 4096 positions, ~7.7 s of reference at its tiny hop
    long_clip = tmp_path / "long.wav"
    sf.write(long_clip, speech_like(9.0, 24_000), 24_000)
    with pytest.raises(AppError, match="shorter reference clip"):
        client.predict(*call("Too long a clip.", long_clip), api_name="/synthesize_full")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not a wav file at all" * 20)
    with pytest.raises(AppError, match="not audio"):
        client.predict(*call("Bad reference.", junk), api_name="/synthesize_full")
    with pytest.raises(AppError, match="transcript"):
        client.predict(
            *call("Words without a clip.", None, "some words"), api_name="/synthesize_full"
        )
    path, _ = client.predict(*call("Still here."), api_name="/synthesize_full")
    assert sf.info(path).samplerate == RATE


def test_the_page_shows_the_models_own_knobs(server):
    """VoxCPM2's guidance and diffusion steps are shown; Qwen3's sampling sliders are not."""
    shown = page_controls_shown(server)
    assert shown["Guidance (CFG value)"] and shown["Diffusion steps"]
    assert not shown["Temperature"] and not shown["Top-p"]


def test_the_page_offers_no_language_choice_for_voxcpm(server):
    """VoxCPM2's language follows the text: /v1/models says so and the page hides its
    Language dropdown (issue #24; Qwen3-TTS and eSpeak keep it: tests/test_app.py)."""
    served = httpx.get(f"{server}/v1/models", timeout=30).json()["data"][-1]
    assert served["info"]["reads_language"] is False
    config = httpx.get(f"{server}/config", timeout=30).json()
    (language,) = [
        c for c in config["components"] if c.get("props", {}).get("elem_id") == "language"
    ]
    assert language["props"]["visible"] is False
