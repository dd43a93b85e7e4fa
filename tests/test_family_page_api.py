"""The page's Gradio API and its PCM route on the Qwen3-TTS CustomVoice and VoiceDesign
checkpoints (#41): gradio_client passes `speaker` / `instructions` by name, and the audio is the
engine's for the same ModelVoice and seed (one engine, one seed: the same samples, within one
int16 step). On a
cloning model the two values are refused, not dropped; a plain-HTTP caller of the first
releases (the values before `speaker`, `instructions`) keeps working. The instruction box of a
checkpoint that refuses instructions (a 0.6B CustomVoice) is disabled with the reason.
"""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import free_port
from gradio_client import Client
from gradio_client.exceptions import AppError

from tts_core.engine import Engine, InputError, SynthesisParams, SynthesisRequest
from tts_core.engine.requests import ModelVoice
from tts_core.server.pcm_stream import FRAME_PCM, model_voice_of
from tts_core.ui import handlers
from tts_core.ui.page import build_demo
from tts_core.ui.voice_library import NO_INSTRUCTIONS, model_voice_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello from the page's API."
SEED = 5


def launched(engine: Engine, tmp_path: Path):  # noqa: ANN201 - (demo, url)
    from tts_core.server import VoiceRegistry

    demo = build_demo(engine, VoiceRegistry(tmp_path / "voices")).queue()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    return demo, url


def engine_audio(engine: Engine, spec: ModelVoice) -> np.ndarray:
    params = SynthesisParams("auto", seed=SEED)
    audio, _ = engine.synthesize(SynthesisRequest(TEXT, params=params, model_voice=spec))
    return audio


def assert_same_run(a: np.ndarray, b: np.ndarray) -> None:
    """Two runs of one request on one engine: the same codes, the codec's float32 sums maybe
    not in the same order (test_family_page_browser.SAME_RUN_LSB: at most one int16 step)."""
    assert a.size == b.size
    assert int(np.abs(a.astype(int) - b).max(initial=0)) <= 1


def pcm_samples(body: bytes) -> np.ndarray:
    """The PCM frames' samples of a /tts_stream/pcm answer (pcm_stream.py: 8-byte headers)."""
    samples, offset = [], 0
    while offset < len(body):
        kind, size = struct.unpack_from("<II", body, offset)
        if kind == FRAME_PCM:
            samples.append(np.frombuffer(body[offset + 8 : offset + 8 + size], dtype="<i2"))
        offset += 8 + size
    return np.concatenate(samples)


def as_int16(audio: np.ndarray) -> np.ndarray:
    from tts_core.audio import to_int16

    return to_int16(audio)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "named", "spec"),
    [
        (
            "qwen3-tiny-cv",
            {"speaker": "eric", "instructions": "Sound cheerful."},
            ModelVoice("eric", "Sound cheerful."),
        ),
        ("qwen3-tiny-vd", {"instructions": "A calm old man."}, ModelVoice(None, "A calm old man.")),
    ],
    ids=["custom-voice", "voice-design"],
)
def test_gradio_client_speaks_a_model_voice(fixture, named, spec, tmp_path):
    from tts_core.backends import load_backend

    if not (FIXTURES / fixture).is_dir():
        pytest.skip(f"tests/fixtures/{fixture} is not there")
    backend, _ = load_backend(str(FIXTURES / fixture), "cpu", allow_fallback=False, quantize="none")
    engine = Engine(backend)
    demo, url = launched(engine, tmp_path)
    try:
        client = Client(url, verbose=False)
        wav, stats = client.predict(text=TEXT, seed=SEED, api_name="/synthesize_full", **named)
        assert stats["done"]
        heard, rate = sf.read(wav, dtype="int16")
        assert rate == engine.sample_rate and heard.size > 0
        assert_same_run(heard, as_int16(engine_audio(engine, spec)))
        if fixture == "qwen3-tiny-cv":  # no preset named: the checkpoint's own list says which
            with pytest.raises(AppError, match="serena"):
                client.predict(text=TEXT, api_name="/synthesize_full")
            # the page's PCM route reads the same two fields
            body = {"text": TEXT, "seed": SEED, **named}
            pcm = httpx.post(f"{url.rstrip('/')}/tts_stream/pcm", json=body, timeout=300)
            assert pcm.status_code == 200, pcm.text
            assert_same_run(pcm_samples(pcm.content), heard)
    finally:
        demo.close()


def test_speaker_and_instructions_on_a_cloning_model_are_refused_not_dropped():
    assert model_voice_of("Base", None, "") is None
    with pytest.raises(InputError, match="CustomVoice or VoiceDesign"):
        model_voice_of("Base", "serena", None)
    with pytest.raises(InputError, match="CustomVoice or VoiceDesign"):
        model_voice_of("Base", None, "Speak softly.")
    # VoiceDesign has no presets: a picker's leftover value is not a speaker
    assert model_voice_of("VoiceDesign", "serena", " A deep voice. ") == ModelVoice(
        None, "A deep voice."
    )


def test_a_checkpoint_that_refuses_instructions_disables_the_box_and_says_why():
    info = {"task_type": "CustomVoice", "speakers": ["a", "b"], "instruct_supported": False}
    spec = model_voice_spec(info)
    assert spec["instructions"]["interactive"] is False
    assert spec["instructions"]["info"] == NO_INSTRUCTIONS
    assert spec["samples"] == [] and spec["speakers"] == ["a", "b"] and spec["speaker"] == "a"
    assert not model_voice_spec({"task_type": "Base", "speakers": []})["box"]
    assert not model_voice_spec({"status": {"status": "loading"}})["box"]  # not known yet


def test_a_first_release_plain_http_call_still_works(app_server):
    """The values up to `min_p` (the README's list before #41), by position: the endpoint
    fills in those added since (`speaker`, `instructions`, TADA's knobs) with None."""
    url, _ = app_server
    names = handlers.ApiParameters.for_engine().names
    before = names.index(handlers.MODEL_VOICE_FIELDS[0])  # 20: the list before #41
    data = ["Hello over HTTP.", "english", None, "", *[None] * (before - 4)]
    data[names.index("seed")] = 1234
    response = httpx.post(f"{url}/gradio_api/call/synthesize_full", json={"data": data}, timeout=60)
    assert response.status_code == 200, response.text
    event = response.json()["event_id"]
    with httpx.stream(
        "GET", f"{url}/gradio_api/call/synthesize_full/{event}", timeout=120
    ) as stream:
        lines = list(stream.iter_lines())
    assert "event: complete" in lines, lines[-6:]
