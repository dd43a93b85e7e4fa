"""16 concurrent HTTP clients on /v1/audio/speech with --max-batch 16 (the tiny checkpoint with
the weights this CPU serves: int8, or float where it has no int8 matmul, see
tests/qwen3/test_batching.py): all complete, run batched, and each response is byte-identical
to the same request alone."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from test_openai_api import RecordingEngine, make_api, serve

from tts_core.engine import EngineConfig
from tts_core.quant.linear import int8_matmul_available

CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "qwen3-tiny-a"
CLIENTS = 16
WORDS = ["Hi there.", "Yes, please.", "Good morning to you.", "Thank you.", "See you soon."]

WEIGHTS = "int8" if int8_matmul_available() else "none"  # what quantize="auto" serves here


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from tts_core.backends.qwen3 import Qwen3Backend

    backend = Qwen3Backend.load(str(CHECKPOINT), "cpu", quantize=WEIGHTS, max_batch=CLIENTS)
    engine = RecordingEngine(backend, EngineConfig(max_queue=CLIENTS))
    app = make_api(engine, tmp_path_factory.mktemp("voices"))
    with serve(app) as url:
        yield url, engine
    backend.loop.close()


def body(i: int) -> dict:
    text = f"{WORDS[i % len(WORDS)]} Number {i}."
    return {
        "input": text,
        "voice": ["alloy", "echo"][i % 2],
        "response_format": "pcm",
        "seed": i,
        "temperature": 0.7 + 0.02 * i,
    }


def post(url: str, i: int) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", json=body(i), timeout=300)


def test_sixteen_concurrent_clients_get_what_they_get_alone(api):
    url, engine = api
    together: dict[int, httpx.Response] = {}

    def client(i: int) -> None:
        together[i] = post(url, i)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batched_runs = list(engine.runs)
    for i in range(CLIENTS):
        alone = post(url, i)
        assert together[i].status_code == 200 == alone.status_code, together[i].text[:200]
        assert len(together[i].content) > 0
        assert together[i].content == alone.content, f"client {i}: bytes differ from alone"
    sizes = [b for run in batched_runs for b in run["stats"]["chunk_batch_size"]]
    assert max(sizes) > 1  # they were decoded together, not one after the other
    assert all(run["stats"]["done"] for run in batched_runs)
    assert engine.info()["weight_format"] == ("int8" if WEIGHTS == "int8" else "float32")
