"""`python app.py --model tests/fixtures/qwen3-tiny-a`: the neural backend served end to end.

The checkpoint is tiny and random, so the speech is noise-like; what is tested is the path:
model loading, voice cloning from a reference, exact streaming chunks, stats, errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "qwen3-tiny-a"
REFERENCE = FIXTURES / "ref_clip_24k.wav"
SEEDED = (0.9, 50, 1.0, 1.05, 1234, 2, 4)  # sampling with a fixed seed, chunks of 2 then 4 frames

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen3_client(launch_app):
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    url, _ = launch_app("--model", str(CHECKPOINT), "--no-fallback")
    return Client(url, verbose=False)


def call(text: str, reference=REFERENCE, ref_text: str = "") -> tuple:
    return (text, "english", handle_file(str(reference)) if reference else None, ref_text, *SEEDED)


def wav_samples(path: str) -> int:
    return sf.info(path).frames


def test_streams_the_neural_model(qwen3_client):
    outputs = list(qwen3_client.submit(*call("Hello, tiny model."), api_name="/synthesize"))
    stats = outputs[-1][1]
    assert stats["backend"] == "qwen3" and stats["model"].endswith("qwen3-tiny-a")
    assert stats["weight_format"] == "int8"  # --quantize auto on a CPU: the 8-bit layers held
    assert stats["done"] and stats["stop_reason"] == "eos"
    assert stats["voice"]["mode"] == "xvector"  # no transcript: speaker embedding only
    assert len(outputs) >= 2 and stats["chunks"] == len(outputs)
    streamed = sum(wav_samples(audio) for audio, _ in outputs if audio)
    assert streamed == round(stats["audio_s"] * 24_000)
    assert streamed % 1920 == 0  # whole codec frames: no crossfade ate any samples

    # same seed, same request, not streamed: the same audio length
    path, full_stats = qwen3_client.predict(
        *call("Hello, tiny model."), api_name="/synthesize_full"
    )
    assert wav_samples(path) == streamed
    assert full_stats["backend"] == "qwen3"


def test_reference_is_required_and_bad_clips_are_errors(qwen3_client, tmp_path):
    with pytest.raises(AppError, match="needs a reference clip"):
        qwen3_client.predict(*call("No reference.", reference=None), api_name="/synthesize_full")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not a wav file at all" * 20)
    with pytest.raises(AppError, match="not audio"):
        qwen3_client.predict(*call("Bad reference.", reference=junk), api_name="/synthesize_full")


def test_a_model_loaded_in_the_background_is_served_once_ready(launch_app):
    """Without --wait-for-model the app loads the model on its own thread and serves it once
    /v1/models says ready (the tiny model may be ready before the first look; the loading
    state itself: tests/test_model_loading.py, tests/test_page_launch.py)."""
    import time

    import httpx

    url, log_path = launch_app("--model", str(CHECKPOINT), "--no-fallback", wait_for_model=False)
    assert httpx.get(url, timeout=10).status_code == 200
    deadline = time.monotonic() + 120
    while True:
        served = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][-1]
        if served["status"]["status"] in ("ready", "failed") or time.monotonic() > deadline:
            break
        assert served["status"]["status"] in ("starting", "loading", "warming")  # a local folder
        time.sleep(0.2)
    assert served["status"]["status"] == "ready", log_path.read_text()[-2000:]
    assert served["info"]["backend"] == "qwen3" and served["info"]["notice"] is None
    info = served["info"]  # --quantize auto: what was chosen and why (tiny layers: not timed)
    assert info["weight_format"] == "int8", info
    assert info["weight_format_reason"].startswith("int8: every layer >= 30 dB SQNR"), info
    body = {"input": "Hello.", "voice": "alloy", "response_format": "wav", "seed": 1}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200 and len(response.content) > 44
