"""`python app.py --model tests/fixtures/chatterbox-turbo-tiny-a`: Chatterbox Turbo served end to
end through the page's API (gradio_client), with its own knobs.

The Chatterbox knobs (the shared sampling knobs with Turbo's defaults, the S3Gen chunk sizes, the
watermark) are parameters of every API endpoint whatever model is served, like every model's
(tts_core.backends.request_knobs), and a knob left out takes the served backend's default, not
another model's. The checkpoint is tiny and random: the path is tested, not the voice.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from conftest import page_controls_shown
from gradio_client import Client
from gradio_client.exceptions import AppError

from .conftest import FIXTURES

CHECKPOINT = FIXTURES / "chatterbox-turbo-tiny-a"
TEXT = "Hello from the page."
UNMARKED = {"seed": 7, "watermark": 0}  # the pre-watermark stream: any change is the knobs'
OFFICIAL_DEFAULTS = {"temperature": 0.8, "top_k": 1000, "top_p": 0.95, "repetition_penalty": 1.2}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(launch_app) -> Client:
    url, _ = launch_app("--model", str(CHECKPOINT), "--no-fallback")
    return Client(url, verbose=False)


def full(client: Client, **knobs) -> np.ndarray:
    """/synthesize_full in the checkpoint's built-in voice (no clip): the clip's samples."""
    path, stats = client.predict(text=TEXT, api_name="/synthesize_full", **knobs)
    audio, rate = sf.read(path, dtype="float32")
    assert stats["backend"] == "chatterbox" and rate == stats["sample_rate"] == 24_000
    return audio


def test_knobs_left_out_take_turbos_own_defaults(client) -> None:
    """Not the page's neutral values nor Qwen3's: the official Turbo generate()'s."""
    left_out = full(client, **UNMARKED)
    assert left_out.size > 0 and np.abs(left_out).max() > 1e-4
    np.testing.assert_array_equal(full(client, **UNMARKED, **OFFICIAL_DEFAULTS), left_out)
    neutral = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "repetition_penalty": 1.0}
    assert not np.array_equal(full(client, **UNMARKED, **neutral), left_out)


def test_each_chatterbox_knob_reaches_the_stream(client) -> None:
    base = full(client, **UNMARKED)
    hotter = full(client, **UNMARKED, temperature=1.6)  # other draws
    assert not np.array_equal(hotter, base)
    # the same tokens through other S3Gen passes: the same length, other samples
    chunked = full(client, **UNMARKED, first_chunk_tokens=4, chunk_tokens=6)
    assert chunked.shape == base.shape and not np.array_equal(chunked, base)
    marked = full(client, seed=UNMARKED["seed"])  # the watermark is on by default
    assert marked.shape == base.shape and not np.array_equal(marked, base)


def test_a_bad_chatterbox_knob_is_refused_by_name_and_the_server_keeps_serving(client) -> None:
    for knob, value in (("top_k", -1), ("chunk_tokens", 0), ("watermark", 2)):
        with pytest.raises(AppError, match=knob):
            full(client, **{knob: value})
    assert full(client, **UNMARKED).size > 0


def test_the_page_shows_turbos_knobs_only(client) -> None:
    shown = page_controls_shown(client.src.rstrip("/"))
    for label in (
        "Temperature",
        "Top-k (0: off)",
        "Later S3Gen chunks (tokens)",
        "Perth watermark (1: on)",
    ):
        assert shown[label], label
    for label in ("Guidance (CFG value)", "Min-p", "Exaggeration", "CFG weight"):
        assert not shown[label], label


def test_every_built_in_voice_speaks_through_the_api(client) -> None:
    """Issue 36: all 13 built-in clips were 2.8-4.0 s and Turbo refuses 5 s or less, so every
    named voice (gradio_client, /v1) answered "must be longer than 5 s"; now each fits."""
    import httpx

    url = client.src.rstrip("/")
    listed = httpx.get(f"{url}/v1/audio/voices", timeout=30).json()
    assert listed["reference"]["min_seconds"] == 5.0 and listed["reference"]["min_exclusive"]
    assert all(voice["fits_model"] for voice in listed["data"]), listed["data"]
    for name in ("arctic-slt", "arctic-awb", "alloy"):
        path, stats = client.predict(text=TEXT, voice=name, api_name="/synthesize_full", **UNMARKED)
        assert sf.info(path).frames > 0 and stats["done"], name
    speech = httpx.post(
        f"{url}/v1/audio/speech",
        timeout=120,
        json={"model": "tts-1", "input": TEXT, "voice": "nova", "response_format": "pcm"},
    )
    assert speech.status_code == 200 and len(speech.content) > 0, speech.text[:300]
