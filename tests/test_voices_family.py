"""GET /v1/audio/voices on the Qwen3-TTS CustomVoice and VoiceDesign checkpoints (#41): the
checkpoint's presets come first, marked `kind: "preset"` and fitting the model (its own list,
GET /v1/models' `speakers`), and each one listed speaks on /v1/audio/speech; a clip voice fits
neither checkpoint (they make their own voices) and says why.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import speech_like

from tests.test_openai_api import make_api, serve
from tts_core.engine import Engine

FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["qwen3-tiny-cv", "qwen3-tiny-vd"])
def served(request, tmp_path_factory):
    from tts_core.backends import load_backend
    from tts_core.server import VoiceRegistry

    if not (FIXTURES / request.param).is_dir():
        pytest.skip(f"tests/fixtures/{request.param} is not there")
    backend, _ = load_backend(
        str(FIXTURES / request.param), "cpu", allow_fallback=False, quantize="none"
    )
    folder = tmp_path_factory.mktemp("voices")
    clip = (24_000, speech_like(4.0, 24_000))
    VoiceRegistry(folder).register("a-clip", clip, "Some words.")
    with serve(make_api(Engine(backend), folder)) as url:
        yield url


def test_the_presets_are_listed_first_and_fit(served):
    info = httpx.get(f"{served}/v1/models", timeout=30).json()["data"][-1]["info"]
    listed = httpx.get(f"{served}/v1/audio/voices", timeout=30).json()["data"]
    presets = [voice for voice in listed if voice.get("kind") == "preset"]
    assert [voice["id"] for voice in presets] == info["speakers"]  # none on VoiceDesign
    assert listed[: len(presets)] == presets
    assert all(voice["fits_model"] and voice["status"] == "ok" for voice in presets)
    clip = next(voice for voice in listed if voice["id"] == "a-clip")
    assert clip["fits_model"] is False and info["task_type"] in clip["unfit_reason"]
    for voice in presets:  # every preset listed speaks
        answer = httpx.post(
            f"{served}/v1/audio/speech",
            timeout=120,
            json={
                "model": "tts-1",
                "input": "Hi.",
                "voice": voice["id"],
                "seed": 1,
                "response_format": "pcm",
                "max_new_tokens": 8,
            },
        )
        assert answer.status_code == 200, answer.text
        assert np.frombuffer(answer.content, "<i2").size > 0
