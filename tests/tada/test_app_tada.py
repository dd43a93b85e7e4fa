"""`python app.py --model tests/fixtures/tada-tiny-a`: TADA served end to end by its one
registration (models/specs.py), at 24 kHz, through /v1, gradio_client and the page's API.

The checkpoint is tiny and random: what is tested is the path (detection of the root folder,
cloned requests with a transcript, the refusal of a clip without one naming the field, the
knobs declared once reaching /v1/models and the Gradio API), not the voice.
"""

from __future__ import annotations

import base64
import io
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import page_controls_shown
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHECKPOINT = FIXTURES / "tada-tiny-a"
REFERENCE = FIXTURES / "ref_clip_24k.wav"  # 3 s at 24 kHz
TRANSCRIPT = "a short reference clip"
RATE = 24_000
# The tiny random flow head can predict a Gray-coded duration outside [0, 2^bits) for some seeds
# (the official decode does the same, and its embedding lookup fails alike): seeds 1-4 and 6 of
# 0-11 speak "Hello there." with this clip at 2, 4 and 10 flow steps; every request sets one.
SEED = 3
TADA_KNOBS = (
    "flow_steps",
    "acoustic_cfg",
    "noise_temperature",
    "temperature",
    "top_p",
    "repetition_penalty",
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(launch_app) -> str:
    url, _ = launch_app("--model", str(CHECKPOINT), "--no-fallback")
    return url


def data_url(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


def wav_audio(body: bytes) -> tuple[np.ndarray, int]:
    rate = struct.unpack("<I", body[24:28])[0]
    audio, _ = sf.read(io.BytesIO(body), dtype="float32")
    return audio, rate


def speech(server: str, **body) -> httpx.Response:
    body = {"input": "Hello there.", "response_format": "wav", "seed": SEED, **body}
    return httpx.post(f"{server}/v1/audio/speech", json=body, timeout=300)


def test_v1_models_reports_tada_and_its_knobs(server):
    model = httpx.get(f"{server}/v1/models", timeout=30).json()["data"][-1]
    info = model["info"]
    assert model["id"].endswith("tada-tiny-a") and info["backend"] == "tada"
    knobs = info["knobs"]
    assert set(TADA_KNOBS) <= set(knobs)
    # the official InferenceOptions' defaults (hume-tada 0.1.9)
    assert knobs["flow_steps"]["default"] == 10 and knobs["acoustic_cfg"]["default"] == 1.6
    assert knobs["noise_temperature"]["default"] == 0.9


def test_v1_clones_with_ref_audio_and_ref_text_at_24k(server):
    reply = speech(server, ref_audio=data_url(REFERENCE), ref_text=TRANSCRIPT)
    assert reply.status_code == 200, reply.text[:300]
    assert reply.headers["x-sample-rate"] == str(RATE)
    audio, rate = wav_audio(reply.content)
    assert rate == RATE and audio.size > 0 and np.isfinite(audio).all()
    again = speech(server, ref_audio=data_url(REFERENCE), ref_text=TRANSCRIPT)
    assert again.content == reply.content  # same seed, same request: the same audio


def test_v1_refuses_a_clip_without_its_transcript_naming_ref_text(server):
    reply = speech(server, ref_audio=data_url(REFERENCE))
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    assert error["param"] == "ref_text" and "transcript" in error["message"]


def test_v1_speaks_with_a_registered_voice_and_its_transcript(server):
    with REFERENCE.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "tada-voice", "transcript": TRANSCRIPT},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=60,
        )
    assert made.status_code == 201, made.text[:300]
    reply = speech(server, voice="tada-voice")
    assert reply.status_code == 200, reply.text[:300]
    audio, rate = wav_audio(reply.content)
    assert rate == RATE and audio.size > 0


def test_gradio_api_clones_with_reference_and_its_text(server):
    client = Client(server, verbose=False)
    path, stats = client.predict(
        text="Hello there.",
        reference=handle_file(str(REFERENCE)),
        reference_text=TRANSCRIPT,
        flow_steps=4,
        seed=SEED,
        api_name="/synthesize_full",
    )
    assert stats["done"] and stats["backend"] == "tada" and stats["sample_rate"] == RATE
    assert sf.info(path).samplerate == RATE and stats["voice"]["transcript"]
    with pytest.raises(AppError, match="transcript"):
        client.predict(
            text="Hello there.",
            reference=handle_file(str(REFERENCE)),
            reference_text="",
            seed=SEED,
            api_name="/synthesize_full",
        )


def test_gradio_api_takes_tadas_knobs_by_name(server):
    api = Client(server, verbose=False).view_api(print_info=False, return_format="dict")
    names = {p["parameter_name"] for p in api["named_endpoints"]["/synthesize_full"]["parameters"]}
    assert {"reference", "reference_text", *TADA_KNOBS} <= names


def test_the_knobs_reach_the_model_and_are_checked_by_name(server):
    asked = dict(ref_audio=data_url(REFERENCE), ref_text=TRANSCRIPT)
    default = speech(server, **asked)
    fewer = speech(server, **asked, flow_steps=2)
    assert default.status_code == fewer.status_code == 200
    assert fewer.content != default.content  # the flow head ran 2 steps, not 10
    refused = speech(server, **asked, acoustic_cfg=11.0)  # above its declared 10
    assert refused.status_code == 400 and "acoustic_cfg" in refused.text


def test_a_saved_voice_without_a_transcript_does_not_fit(server):
    with REFERENCE.open("rb") as f:
        made = httpx.post(
            f"{server}/v1/audio/voices",
            data={"name": "tada-no-words"},
            files={"file": ("ref.wav", f, "audio/wav")},
            timeout=60,
        )
    assert made.status_code == 201, made.text[:300]
    listed = httpx.get(f"{server}/v1/audio/voices", timeout=30).json()
    assert listed["reference"]["transcript"] == "required"
    voice = next(v for v in listed["data"] if v["id"] == "tada-no-words")
    assert voice["fits_model"] is False and "transcript" in voice["unfit_reason"]
    reply = speech(server, voice="tada-no-words")
    assert reply.status_code == 400 and "transcript" in reply.text


def test_the_page_shows_tadas_knobs_and_the_transcript_box(server):
    shown = page_controls_shown(server)
    assert shown["Flow steps"] and shown["Acoustic guidance (CFG)"] and shown["Noise temperature"]
    assert not shown["Guidance (CFG value)"] and not shown["Exaggeration"]  # others' knobs


def test_the_spec_detects_the_root_and_the_model_folder():
    from tts_core import load_model
    from tts_core.backends.tada import HUB_CODEC, checkpoint_folders
    from tts_core.models.registry import detect_architecture
    from tts_core.models.tada.model import TadaModel

    model_dir, codec_dir = CHECKPOINT / "model", CHECKPOINT / "codec"
    assert detect_architecture(CHECKPOINT) == detect_architecture(model_dir) == "tada"
    assert checkpoint_folders(CHECKPOINT) == (str(model_dir), str(codec_dir))
    assert checkpoint_folders(model_dir) == (str(model_dir), str(codec_dir))  # codec beside it
    assert checkpoint_folders("HumeAI/tada-1b") == ("HumeAI/tada-1b", HUB_CODEC)
    assert isinstance(load_model(CHECKPOINT), TadaModel)
    with pytest.raises(ValueError, match="CPU only"):
        load_model(CHECKPOINT, device="cuda")
