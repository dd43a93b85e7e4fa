"""/v1/audio/speech on the Qwen3-TTS CustomVoice and VoiceDesign checkpoints (#41).

Real HTTP (uvicorn) on the tiny checkpoints: `voice` = a preset name, OpenAI's
`instructions`, vLLM-Omni's `task_type` checked against the served checkpoint (left out: a
reference means Base, anything else CustomVoice; VoiceDesign must be named; another task is a
400 naming both). Seeded sampling makes every request reproducible, so "the same voice" is
checked as equal bytes, and the route's audio equals the engine's for the same ModelVoice.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from tests.test_openai_api import assert_error, make_api, serve
from tts_core.audio import to_int16
from tts_core.engine import Engine, InputError, SynthesisParams, SynthesisRequest
from tts_core.engine.capabilities import Capabilities
from tts_core.engine.requests import ModelVoice
from tts_core.server.errors import ApiError
from tts_core.server.speech_body import SpeechBody, speech_task

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello from a preset voice."
SEED = 99

pytestmark = pytest.mark.slow


def _api(name: str, tmp_path_factory):  # noqa: ANN202
    from tts_core.backends import load_backend

    backend, _ = load_backend(str(FIXTURES / name), "cpu", allow_fallback=False, quantize="none")
    engine = Engine(backend)
    app = make_api(engine, tmp_path_factory.mktemp("voices"))
    return engine, app


@pytest.fixture(scope="module")
def custom_voice_api(tmp_path_factory):
    engine, app = _api("qwen3-tiny-cv", tmp_path_factory)
    with serve(app) as url:
        yield url, engine


@pytest.fixture(scope="module")
def voice_design_api(tmp_path_factory):
    engine, app = _api("qwen3-tiny-vd", tmp_path_factory)
    with serve(app) as url:
        yield url, engine


def speech(url: str, **body) -> httpx.Response:  # noqa: ANN003
    body = {
        "model": "tts-1",
        "input": TEXT,
        "seed": SEED,
        "response_format": "pcm",
        "max_new_tokens": 16,
        **body,
    }
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def engine_pcm(engine: Engine, spec: ModelVoice) -> bytes:
    params = SynthesisParams("auto", seed=SEED, max_new_tokens=16)
    audio, _stats = engine.synthesize(SynthesisRequest(TEXT, params=params, model_voice=spec))
    return to_int16(audio).tobytes()


def test_models_say_what_the_checkpoint_does(custom_voice_api, voice_design_api):
    for (url, _engine), task, speakers in (
        (custom_voice_api, "CustomVoice", ["serena", "dylan", "eric"]),
        (voice_design_api, "VoiceDesign", []),
    ):
        info = httpx.get(f"{url}/v1/models", timeout=60).json()["data"][-1]["info"]
        assert (info["task_type"], info["speakers"], info["needs_reference"]) == (
            task,
            speakers,
            False,
        )


def test_a_preset_voice_with_and_without_instructions(custom_voice_api):
    url, engine = custom_voice_api
    plain = speech(url, voice="serena")
    assert plain.status_code == 200, plain.text[:300]
    assert plain.content == engine_pcm(engine, ModelVoice("serena"))
    named = speech(url, voice="Serena", task_type="CustomVoice")  # case-insensitive, explicit
    assert named.content == plain.content
    told = speech(url, voice="serena", instructions="Speak slowly and warmly.")
    assert told.status_code == 200
    assert told.content == engine_pcm(engine, ModelVoice("serena", "Speak slowly and warmly."))
    assert told.content != plain.content
    assert speech(url, voice="dylan").content != plain.content


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        # not a preset: a saved voice's name, so a reference (Base); the presets are offered
        ({"voice": "vivian"}, "task_type", ["Base", "CustomVoice", "serena, dylan, eric"]),
        (
            {"voice": "serena", "task_type": "VoiceDesign"},
            "task_type",
            ["VoiceDesign", "CustomVoice"],
        ),
        ({"voice": "serena", "task_type": "Base"}, "task_type", ["Base", "CustomVoice"]),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "task_type", ["Base", "CustomVoice"]),
        ({"task_type": "Omni"}, "task_type", ["Base", "CustomVoice", "VoiceDesign"]),
        ({"task_type": "CustomVoice"}, "voice", []),  # no preset named
    ],
)
def test_custom_voice_refusals_name_the_field(custom_voice_api, body, param, words):
    url, engine = custom_voice_api
    error = assert_error(speech(url, **body), 400, param)
    assert all(word in error["message"] for word in words), error["message"]
    assert engine.active_requests == 0


def test_a_designed_voice_must_be_named(voice_design_api):
    url, engine = voice_design_api
    described = speech(url, task_type="VoiceDesign", instructions="A deep, slow voice.")
    assert described.status_code == 200, described.text[:300]
    assert described.content == engine_pcm(engine, ModelVoice(None, "A deep, slow voice."))
    bare = speech(url, task_type="VoiceDesign")  # no description: allowed, as the official
    assert bare.status_code == 200 and bare.content != described.content
    error = assert_error(speech(url, instructions="A deep, slow voice."), 400, "task_type")
    assert "VoiceDesign must be named" in error["message"]


def test_the_task_rules_without_a_server():
    def task(served: str, **body):  # noqa: ANN003, ANN202
        backend = SimpleNamespace(capabilities=Capabilities(task_type=served, speakers=("serena",)))
        return speech_task(SpeechBody(input="x", **body), backend)

    assert task("Base", voice="saved-voice") is None
    assert task("Base", voice="default") is None  # the model's own voice, as before
    assert task("CustomVoice", voice="serena", instructions="Whisper.") == ModelVoice(
        "serena", "Whisper."
    )
    assert task("VoiceDesign", task_type="VoiceDesign", instructions="") == ModelVoice(None, None)
    for served, body in (
        ("CustomVoice", {"voice": "saved-voice"}),  # a reference: Base
        ("VoiceDesign", {"voice": "default"}),  # no reference: CustomVoice
        ("Base", {"voice": "x", "task_type": "CustomVoice"}),
    ):
        with pytest.raises(ApiError, match="does not match the served checkpoint"):
            task(served, **body)


def test_a_0b6_custom_voice_refuses_instructions(tmp_path):
    """Where the official drops `instruct` silently (tts_model_size "0b6"), the request is
    refused naming `instructions`; without them it is served."""
    import json

    from tts_core.backends import load_backend

    folder = tmp_path / "cv-0b6"
    shutil.copytree(FIXTURES / "qwen3-tiny-cv", folder)
    config = json.loads((folder / "config.json").read_text())
    config["tts_model_size"] = "0b6"
    (folder / "config.json").write_text(json.dumps(config))
    backend, _ = load_backend(str(folder), "cpu", allow_fallback=False, quantize="none")
    engine = Engine(backend)
    with pytest.raises(InputError) as refused:
        engine.prepare(SynthesisRequest(TEXT, model_voice=ModelVoice("serena", "Angrily.")))
    assert refused.value.param == "instructions" and "drops" in str(refused.value)
    audio, _ = engine.synthesize(
        SynthesisRequest(
            TEXT, params=SynthesisParams(max_new_tokens=4), model_voice=ModelVoice("serena")
        )
    )
    assert np.isfinite(audio).all() and audio.size > 0


def test_the_websocket_speaks_a_preset_as_it_arrives(custom_voice_api):
    """WebSocket /v1/audio/speech/stream (text in pieces) with a preset and instructions: the
    bytes of POST with the whole text (both use the streaming-text layout)."""
    from tests.test_speech_ws import pieces_by, speak

    url, _engine = custom_voice_api
    host = url.removeprefix("http://")
    config = {"voice": "eric", "instructions": "Angrily.", "seed": SEED, "max_new_tokens": 16}
    whole = speech(url, **config, stream=False)
    assert whole.status_code == 200, whole.text[:300]
    audio, messages = speak(
        host, {**config, "response_format": "pcm"}, pieces_by("word", TEXT, None)
    )
    assert messages[-1]["type"] == "session.done", messages[-1]
    assert audio == whole.content
