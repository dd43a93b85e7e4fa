"""`build_demo(...).launch()` serves a working page on its own: the low-latency player's PCM
route and the /v1 API come with it, also when the page is built before the model has loaded."""

from __future__ import annotations

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from test_app import every_input
from test_openai_api import free_port

from tts_core.engine import EngineSlot
from tts_core.server import VoiceRegistry
from tts_core.ui import build_demo
from tts_core.ui.page import VoicePage

HELLO = {"text": "Hello from the page's own launch.", "language": "english"}


def launch(demo, **kwargs) -> str:  # noqa: ANN001
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), quiet=True, **kwargs)
    return url.rstrip("/")


def test_plain_launch_serves_the_pcm_route_and_the_api(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("TTS_VOICES_DIR", str(tmp_path / "voices"))  # voices=None: the default
    demo = build_demo(engine)
    url = launch(demo, prevent_thread_lock=True)
    try:
        response = httpx.post(f"{url}/tts_stream/pcm", json=HELLO, timeout=60)
        assert response.status_code == 200, response.text[:300]
        assert response.headers["x-sample-rate"] == "24000"
        assert len(response.content) > 24_000  # > 0.5 s of int16 audio in frames
        voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["data"]
        assert "alloy" in {v["id"] for v in voices}
    finally:
        demo.close()


def test_launch_blocks_after_installing_the_routes(engine, tmp_path, monkeypatch):
    """Without prevent_thread_lock it blocks, as Gradio's launch does, with the routes up."""
    seen = []

    def block_thread(self) -> None:  # noqa: ANN001 - instead of serving forever
        seen.append(httpx.post(f"{self.local_url}tts_stream/pcm", json=HELLO, timeout=60))

    monkeypatch.setattr(VoicePage, "block_thread", block_thread)
    demo = build_demo(engine, VoiceRegistry(tmp_path))
    try:
        launch(demo)
        assert [r.status_code for r in seen] == [200]
    finally:
        demo.close()


def test_gradio_api_callers_without_a_voice_keep_working(engine, tmp_path):
    """`voice` was appended last: positional gradio_client calls without it still work
    (the client fills defaults; plain HTTP sends every input, None for the later knobs); a
    named voice works."""
    demo = build_demo(engine, VoiceRegistry(tmp_path)).queue()
    url = launch(demo, prevent_thread_lock=True)
    try:
        client = Client(url, verbose=False)
        _, stats = client.predict("Hello.", "english", None, "", api_name="/synthesize_full")
        assert stats["done"]
        every = ["Hello.", "english", None, "", 0.9, 50, 1.0, 1.05, -1, 2, 6, 2.0, 10]
        _, stats = client.predict(*every, "coral", api_name="/synthesize_full")
        assert stats["voice"]["variant"].startswith("+f")  # coral: a female voice
        event = httpx.post(
            f"{url}/gradio_api/call/synthesize_full",
            json={"data": every_input(*every, None)},
            timeout=30,
        ).json()["event_id"]
        answer = httpx.get(f"{url}/gradio_api/call/synthesize_full/{event}", timeout=60).text
        assert "event: complete" in answer, answer[-500:]
    finally:
        demo.close()


def test_a_page_built_while_the_model_loads(engine, tmp_path):
    slot = EngineSlot("some/model")
    slot.report("downloading", done=0.6e9, total=2.4e9)
    demo = build_demo(slot, VoiceRegistry(tmp_path)).queue()
    url = launch(demo, prevent_thread_lock=True)
    try:
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200
        config = httpx.get(f"{url}/config", timeout=30).text
        assert "The model is loading: downloading 0.60 of 2.40 GB (25 %)" in config
        client = Client(url, verbose=False)
        with pytest.raises(AppError, match="still loading"):
            client.predict("Hello.", "english", None, "", api_name="/synthesize_full")
        busy = httpx.post(f"{url}/tts_stream/pcm", json=HELLO, timeout=30)
        assert busy.status_code == 503 and "still loading" in busy.text
        assert busy.headers["retry-after"]

        slot.set(engine)  # the model is ready: the same page now speaks
        _, stats = client.predict("Hello.", "english", None, "", api_name="/synthesize_full")
        assert stats["done"] and stats["backend"] == "espeak"
        assert httpx.post(f"{url}/tts_stream/pcm", json=HELLO, timeout=60).status_code == 200
    finally:
        demo.close()
