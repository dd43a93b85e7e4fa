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
