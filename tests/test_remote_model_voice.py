"""`--model URL` in front of a Qwen3-TTS CustomVoice / VoiceDesign server (#41): the front
takes the remote's task_type and presets from its GET /v1/models and sends each request's
task_type, `voice` preset and `instructions` (it sent `task_type: "Base"` always, which such a
server refuses). The remote is this app's own /v1 on the tiny checkpoints (real HTTP); its
audio comes back exactly (int16 <-> float, remote.py), so the front's samples are the remote
engine's for the same ModelVoice and seed (within one int16 step).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.test_openai_api import make_api, serve
from tts_core.audio import to_int16
from tts_core.backends.remote import RemoteBackend, RemoteInfo
from tts_core.engine import Engine, EngineConfig, InputError, SynthesisParams, SynthesisRequest
from tts_core.engine.requests import ModelVoice

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello through a front."
SEED = 11

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["qwen3-tiny-cv", "qwen3-tiny-vd"])
def remote(request, tmp_path_factory):
    """(the remote's /v1 URL, its engine)."""
    from tts_core.backends import load_backend

    if not (FIXTURES / request.param).is_dir():
        pytest.skip(f"tests/fixtures/{request.param} is not there")
    backend, _ = load_backend(
        str(FIXTURES / request.param), "cpu", allow_fallback=False, quantize="none"
    )
    engine = Engine(backend)
    with serve(make_api(engine, tmp_path_factory.mktemp("voices"))) as url:
        yield f"{url}/v1", engine


def front_of(url: str) -> Engine:
    # as app.build_engine for a remote: its audio is faded already
    return Engine(RemoteBackend.connect(url), EngineConfig(fade_ms=0.0))


def spoken(engine: Engine, spec: ModelVoice) -> np.ndarray:
    params = SynthesisParams("auto", seed=SEED, max_new_tokens=16)
    audio, _ = engine.synthesize(SynthesisRequest(TEXT, params=params, model_voice=spec))
    return to_int16(audio)


def test_the_front_speaks_the_remotes_own_voices(remote):
    url, engine = remote
    front = front_of(url)
    backend = front.backend
    assert (backend.task_type, backend.speakers) == (
        engine.backend.task_type,
        tuple(engine.backend.speakers),
    )
    assert front.info()["task_type"] == engine.backend.task_type and not backend.can_clone
    if backend.task_type == "CustomVoice":
        spec = ModelVoice(backend.speakers[1], "Speak with a smile.")
        # the instruction reached the remote: without it, other samples
        plain, told = spoken(front, ModelVoice(spec.speaker)), spoken(front, spec)
        assert plain.size != told.size or int(np.abs(plain.astype(int) - told).max()) > 1
    else:
        spec = ModelVoice(None, "A low, slow voice.")
    heard = spoken(front, spec)
    assert heard.size > 0
    # two runs of one request on the remote's engine: the same codes, float32 sums maybe not in
    # one order (tests/test_family_page_browser.py SAME_RUN_LSB): within one int16 step
    alone = spoken(engine, spec)
    assert heard.size == alone.size and int(np.abs(heard.astype(int) - alone).max()) <= 1


def test_the_remotes_refusal_names_the_preset(remote):
    url, engine = remote
    if engine.backend.task_type != "CustomVoice":
        pytest.skip("presets are CustomVoice's")
    with pytest.raises(InputError, match="nobody"):
        spoken(front_of(url), ModelVoice("nobody"))


def test_a_model_list_says_the_task_or_it_is_base():
    assert RemoteInfo.from_models({"data": [{"id": "m"}]}).task_type == "Base"
    info = RemoteInfo.from_models(
        {
            "data": [
                {
                    "id": "m",
                    "info": {
                        "task_type": "CustomVoice",
                        "speakers": ["a", "b"],
                        "instruct_supported": True,
                    },
                }
            ]
        }
    )
    assert (info.task_type, info.speakers, info.instruct_supported) == (
        "CustomVoice",
        ("a", "b"),
        True,
    )
    with pytest.raises(ValueError, match="task_type"):
        RemoteInfo.from_models({"data": [{"info": {"task_type": "Other"}}]})
    with pytest.raises(ValueError, match="speakers"):
        RemoteInfo.from_models({"data": [{"info": {"speakers": "a"}}]})
