"""One engine (issue #22): what `POST /v1/audio/speech` sends is what the library's
`model.stream` yields for the same request and seed, byte for byte. The server path (engine ->
Qwen3Backend -> the batch scheduler's loop thread) and `model.stream` (the same runner and step,
one row, on the caller's thread) must be the same code; any second decode path, or a knob the
server passes differently, shows here as different bytes. Fades off (the engine's only change
to the audio, a documented one); PCM is int16 of the same float samples (audio.to_int16)."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from test_openai_api import make_api, serve

from tts_core.audio import SAMPLE_RATE, to_int16
from tts_core.engine import Engine, EngineConfig
from tts_core.quant.linear import int8_matmul_available
from tts_core.server.voices import VoiceRegistry

CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "qwen3-tiny-a"
WEIGHTS = "int8" if int8_matmul_available() else "none"  # what quantize="auto" serves here
CASES = [  # (text, voice, seed, knobs): x-vector and ICL voices, default and set knobs
    ("The server and the library speak alike.", "alloy", 3, {}),
    (
        "Another request, with its own knobs.",
        "arctic-slt",
        11,
        {"temperature": 0.8, "top_k": 20, "first_chunk_frames": 1, "chunk_frames": 4},
    ),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tts_core.backends.qwen3 import Qwen3Backend

    backend = Qwen3Backend.load(str(CHECKPOINT), "cpu", quantize=WEIGHTS, max_batch=4)
    engine = Engine(backend, EngineConfig(fade_ms=0.0))
    with serve(make_api(engine, tmp_path_factory.mktemp("voices"))) as url:
        yield url, backend
    backend.loop.close()


@pytest.mark.parametrize(("text", "name", "seed", "knobs"), CASES)
def test_a_v1_response_is_model_stream_byte_for_byte(served, text, name, seed, knobs):
    url, backend = served
    body = {"input": text, "voice": name, "response_format": "pcm", "seed": seed, **knobs}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text[:300]

    named, clip = VoiceRegistry(Path("/nonexistent")).load(name)  # the built-in clip
    model = backend.model
    voice = model.create_voice(clip, SAMPLE_RATE, named.transcript)
    chunks = {k: knobs[k] for k in ("first_chunk_frames", "chunk_frames") if k in knobs}
    sampling = {k: v for k, v in knobs.items() if k not in chunks}
    audio = np.concatenate(
        [chunk.audio for chunk in model.stream(text, voice, seed=seed, **chunks, **sampling)]
    )
    assert len(response.content) == 2 * audio.size
    assert response.content == to_int16(audio).tobytes()
