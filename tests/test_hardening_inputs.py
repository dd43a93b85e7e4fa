"""The page's own events are not an API: only /synthesize and /synthesize_full are.

Gradio runs an event called by its name (`POST /gradio_api/call/<name>`, `/run/<name>`) even
when it is `api_visibility="private"`, which only hides it from the API docs and gradio_client.
The EventGuard (server/gradio_guard.py), on both serving paths, answers such a call with 404
before Gradio sees it: nothing saved or deleted. The page itself sends its events by index, and
still saves and deletes voices (tests/test_page_browser.py drives it in Chromium).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from gradio_client import Client
from test_openai_api import RecordingEngine, free_port

from tts_core.engine import EngineConfig, EngineSlot
from tts_core.server import VoiceRegistry
from tts_core.ui import build_demo

ASSETS = Path(__file__).resolve().parents[1] / "assets"
CLIP = ASSETS / "reference_female_en.wav"
OWNER = "owner-key-of-a-browser"
LIBRARY_EVENTS = ("refresh", "pick", "save", "delete")  # voice_library.wire_voice_library
PUBLIC = {"synthesize", "synthesize_full"}


@pytest.fixture(scope="module")
def page(espeak_backend, tmp_path_factory):
    """(url, demo, voices, engine): the page launched as app.py's `VoicePage.launch` does,
    with a voice some browser saved."""
    engine = RecordingEngine(espeak_backend, EngineConfig(max_concurrent=2))
    voices = VoiceRegistry(tmp_path_factory.mktemp("voices"))
    voices.register("kept", str(CLIP), None, owner_key=OWNER)
    demo = build_demo(EngineSlot.holding(engine), voices, assets=ASSETS).queue()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    try:
        yield url.rstrip("/"), demo, voices, engine
    finally:
        demo.close()


def uploaded_clip(url: str) -> dict:
    """CLIP uploaded as the page uploads it: a FileData the save event's gr.Audio accepts."""
    with CLIP.open("rb") as f:
        answer = httpx.post(
            f"{url}/gradio_api/upload", files=[("files", ("c.wav", f, "audio/wav"))], timeout=30
        )
    answer.raise_for_status()
    return {"path": answer.json()[0], "meta": {"_type": "gradio.FileData"}}


def library_calls(url: str) -> dict[str, list]:
    """Inputs each voice-library event would do its work with, called by name."""
    return {
        "save": ["by-name", uploaded_clip(url), "", OWNER],
        "delete": ["kept", OWNER],
        "refresh": [OWNER],
        "pick": ["kept", OWNER],
    }


ROUTES_BY_NAME = ("call", "call/v2", "run", "api")


def test_the_voice_library_events_cannot_be_called_by_name(page):
    url, demo, voices, _ = page
    for name, data in library_calls(url).items():
        for route in ROUTES_BY_NAME:
            answer = httpx.post(f"{url}/gradio_api/{route}/{name}", json={"data": data}, timeout=30)
            assert answer.status_code == 404, (route, name, answer.status_code, answer.text[:200])
            assert "No API endpoint named" in answer.text
        assert "by-name" not in voices.names()  # nothing saved
        assert voices.get("kept").owned_by(OWNER)  # nothing deleted
    # those are the names Gradio gave the events: what a caller would try
    assert set(LIBRARY_EVENTS) <= {fn.api_name for fn in demo.fns.values()}


def test_no_internal_event_of_the_page_answers_by_name(page):
    url, demo, _, _ = page
    internal = [fn.api_name for fn in demo.fns.values() if fn.api_name not in PUBLIC]
    assert {"generate", "load_example"} <= set(internal)
    for name in internal:
        answer = httpx.post(f"{url}/gradio_api/call/{name}", json={"data": []}, timeout=30)
        assert answer.status_code == 404, (name, answer.status_code)


def test_the_public_api_and_the_page_s_own_calls_still_pass(page):
    url, demo, _, _ = page
    answer = httpx.post(
        f"{url}/gradio_api/call/synthesize_full",
        json={"data": ["Hello there.", "english", None, ""]},
        timeout=30,
    )
    assert answer.status_code == 200 and "event_id" in answer.json()
    refresh = next(i for i, fn in demo.fns.items() if fn.api_name == "refresh")
    answer = httpx.post(
        f"{url}/gradio_api/run/predict",
        timeout=30,
        json={"fn_index": refresh, "data": [OWNER], "session_hash": "s1"},
    )
    assert answer.status_code == 200, answer.text[:300]
    answer = httpx.post(
        f"{url}/gradio_api/queue/join",
        timeout=30,
        json={"fn_index": 10_000, "data": [], "session_hash": "s1"},
    )
    assert answer.status_code == 404


def test_view_api_lists_only_the_two_endpoints(page):
    url, demo, _, _ = page
    api = Client(url, verbose=False).view_api(return_format="dict", print_info=False)
    assert set(api["named_endpoints"]) == {f"/{name}" for name in PUBLIC}
    assert not api["unnamed_endpoints"]
    internal = [fn for fn in demo.fns.values() if fn.api_name not in PUBLIC]
    assert internal and all(fn.api_visibility == "private" for fn in internal)
