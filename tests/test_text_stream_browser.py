"""The page's "Speak while the text arrives" (issue #27 item 5): headless Chromium feeds the
text box word by word over the page's WebSocket /tts_stream/text, on the tiny Qwen3 checkpoint
(a backend that speaks while its text arrives); and the route's access rules over a plain
WebSocket client.

Event order, not timing: the page records how many words it had sent when the first audio
frame arrived (m.text.firstAudioWord) and sends input.done only after the last word, so
"firstAudioWord < total" means the speech began before the text was complete. The page's test
hook (window.__ttsTextHoldAfter = HOLD_AFTER) makes the feed wait after word 5 of 20 until the
first audio frame has come: a server that spoke only after input.done would never send it
(the hang detector fails the test), however slow or loaded the machine. The page is served in this process (`build_demo(...).launch`), so the test
sees the engine: which path a click took, and that Stop freed the request's row and slot. The
page session's idle timeout is raised for these tests so that it cannot be what frees them.

The browser is conftest's (`chromium_context`). Skips when it, Playwright or the checkpoint is
missing, unless REQUIRE_BROWSER=1 (CI), where a missing browser fails.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
import test_speech_ws
from conftest import BROWSER_HANG_MS, chromium_context
from test_page_browser import serve_page
from test_speech_ws import FAIL_AFTER_S, api_app, guarded_server, receive_utterance, send, until
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from tts_core.engine import Engine, EngineConfig, EngineSlot
from tts_core.engine.awaiting import wait_future
from tts_core.server import AccessPolicy, VoiceRegistry, page_text_ws
from tts_core.server.http_server import server_config
from tts_core.server.speech_ws import ROUTE as API_ROUTE
from tts_core.server.speech_ws import StreamLimits

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QWEN3_TINY = FIXTURES / "qwen3-tiny-a"
FEMALE_CLIP = Path(__file__).resolve().parents[1] / "assets" / "reference_female_en.wav"
WORDS = (
    "One two three four five six seven eight nine ten, eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty."
)
KEY = "page-text-stream-test-key"
HOLD_AFTER = 5  # the feed waits here for the first audio frame (the page's test hook)
LAST_RUN = (
    "() => { const m = window.__ttsLowLatency.last; return m && JSON.parse(JSON.stringify(m)); }"  # noqa: E501
)


class CountingEngine(Engine):
    """The real engine, remembering the requests of each path: whole text (`stream`, the PCM
    route) and text in pieces (`open_fed`, the WebSocket)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.whole, self.fed = 0, []

    def stream(self, request, cancel=None):  # noqa: ANN001, ANN201
        self.whole += 1
        return super().stream(request, cancel)

    def open_fed(self, request, cancel=None):  # noqa: ANN001, ANN201
        stream = super().open_fed(request, cancel)
        self.fed.append(stream)
        return stream


# ---------------------------------------------------------------- in Chromium, on tiny Qwen3
@pytest.fixture(scope="module")
def qwen3_site(tmp_path_factory):
    """(url, engine, scheduler): the page on the tiny Qwen3 checkpoint."""
    if not (QWEN3_TINY / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    from tts_core.backends.qwen3 import Qwen3Backend

    backend = Qwen3Backend.load(str(QWEN3_TINY), "cpu")
    engine = CountingEngine(backend, EngineConfig(max_concurrent=2))
    voices = VoiceRegistry(tmp_path_factory.mktemp("voices"))
    with pytest.MonkeyPatch.context() as patch:  # read once, when launch() makes the routes
        patch.setattr(page_text_ws, "LIMITS", StreamLimits(idle_timeout_s=10 * FAIL_AFTER_S))
        demo, url = serve_page(EngineSlot.holding(engine), voices)
    try:
        yield url, engine, backend.loop
    finally:
        demo.close()
        backend.loop.close()


@pytest.fixture(scope="module")
def page(qwen3_site, tmp_path_factory):
    """The page with a clip uploaded (x-vector mode: no transcript) and the 20-word text."""
    url, _, _ = qwen3_site
    with chromium_context(tmp_path_factory.mktemp("chromium-profile")) as context:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function(
            "() => window.__ttsLowLatency && window.__ttsStats", timeout=BROWSER_HANG_MS
        )
        page.fill("#text textarea", WORDS)
        page.click("#voice input")  # the page starts on a built-in recording (issue 36)
        page.get_by_role("option", name="Upload or record a clip", exact=True).click()
        page.wait_for_selector("#reference", state="visible", timeout=BROWSER_HANG_MS)
        page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))
        page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
        yield page


def set_text_stream(page, on: bool, words_per_s: float = 1.0) -> None:  # noqa: ANN001
    box = page.locator("#text-stream input[type=checkbox]")
    box.set_checked(on)
    number = page.locator("#text-stream-rate input[type=number]")
    number.fill(str(words_per_s))
    number.press("Enter")
    page.wait_for_function(
        "(rate) => Number(document.querySelector('#text-stream-rate input[type=range]').value)"
        " === rate",
        arg=words_per_s,
        timeout=BROWSER_HANG_MS,
    )


def click_generate(page) -> None:  # noqa: ANN001
    page.evaluate("() => { window.__ttsLowLatency.last = null; }")  # wait for this click's run
    page.click("#generate")


def wait_run(page, condition: str, feed_s: float = 0.0) -> dict:  # noqa: ANN001
    """The run once `condition` (JS over m, the run's metrics) holds, or it failed. `feed_s`:
    how long the page's feed takes by its own rate (the words per second), which the hang
    detector comes on top of."""
    page.wait_for_function(
        f"() => {{ const m = window.__ttsLowLatency.last; return m && (m.error || ({condition})); }}",
        timeout=BROWSER_HANG_MS + 1000 * feed_s,
    )
    return page.evaluate(LAST_RUN)


@pytest.mark.browser
def test_speech_starts_before_the_last_word_is_sent(qwen3_site, page) -> None:
    _, engine, scheduler = qwen3_site
    set_text_stream(page, True, 1.0)
    page.evaluate(f"window.__ttsTextHoldAfter = {HOLD_AFTER}")
    fed, whole = len(engine.fed), engine.whole
    click_generate(page)
    run = wait_run(page, "m.done", feed_s=len(WORDS.split()) / 1.0)  # 20 words at 1 a second
    assert run["error"] is None, run["error"]
    text = run["text"]
    print(f"\ntext streamed in at 1 word/s: {text}")
    assert text["total"] == 20 and text["sent"] == 20 and text["doneSent"]
    # the first audio frame came while words were still to be sent (so before input.done)
    assert 1 <= text["firstAudioWord"] <= HOLD_AFTER < text["total"], text
    assert run["samples"] > 0  # every sample the engine made reached the page
    assert text["audioS"] == pytest.approx(run["stats"]["audio_s"], abs=1e-3)
    assert run["stats"]["done"] and run["stats"]["stop_reason"] != "cancelled"
    assert len(engine.fed) == fed + 1 and engine.whole == whole  # one request, fed in pieces
    assert engine.fed[-1].text == WORDS  # the words as typed, spaces included
    panel = page.text_content("#live-stats [data-s='text-stream']")
    assert "20 / 20 words sent" in panel
    assert f"first audio after {text['firstAudioWord']} words" in panel
    assert "text streamed in" in page.text_content("#live-stats [data-s='mode']")
    until(lambda: engine.active_requests == 0 and scheduler.active == 0, "request ended")


@pytest.mark.browser
def test_stop_mid_text_cancels_the_request(qwen3_site, page) -> None:
    """Stop once the first audio has come, words still to send: the socket closes and the
    server frees the row waiting for its text (no idle timeout here: raised for the test)."""
    _, engine, scheduler = qwen3_site
    set_text_stream(page, True, 1.0)
    # the feed waits after word HOLD_AFTER for the first audio: words are left to send when
    # it comes, however long the model takes (not only when the test above ran first)
    page.evaluate(f"window.__ttsTextHoldAfter = {HOLD_AFTER}")
    fed = len(engine.fed)
    click_generate(page)
    run = wait_run(page, "m.text && m.text.firstAudioWord !== null")
    assert run["error"] is None, run["error"]
    page.click("#stop")
    run = wait_run(page, "m.stopped && m.text.closeCode !== null")
    assert run["error"] is None and not run["text"]["doneSent"]
    assert run["text"]["sent"] < run["text"]["total"]
    page.wait_for_function(
        "() => document.querySelector(\"#lowlatency-player [data-ll='status']\")"
        ".textContent === 'Stopped'",
        timeout=BROWSER_HANG_MS,
    )
    assert len(engine.fed) == fed + 1
    until(lambda: engine.active_requests == 0 and scheduler.active == 0, "row and slot freed")
    stream = engine.fed[-1]
    assert len(stream.text.split()) < 20  # it never had the whole text


@pytest.mark.browser
def test_unchecked_the_player_takes_the_whole_text_path(qwen3_site, page) -> None:
    _, engine, _ = qwen3_site
    set_text_stream(page, True, 1.0)
    set_text_stream(page, False, 1.0)
    fed, whole = len(engine.fed), engine.whole
    click_generate(page)
    run = wait_run(page, "m.done")
    assert run["error"] is None, run["error"]
    assert run["text"] is None and run["samples"] > 0  # the PCM route: no words fed
    assert (len(engine.fed), engine.whole) == (fed, whole + 1)
    assert "text streamed in" not in page.text_content("#live-stats [data-s='mode']")
    assert not page.is_visible("#live-stats [data-s='text-stream']")
    page.get_by_label("Standard (gr.Audio, HLS)").check()  # the option is the Web Audio player's
    page.wait_for_selector("#text-stream-options", state="hidden", timeout=BROWSER_HANG_MS)
    page.get_by_label("Low latency (Web Audio)").check()
    page.wait_for_selector("#text-stream-options", state="visible", timeout=BROWSER_HANG_MS)


# ---------------------------------------------------------------- the route's access rules
@pytest.fixture(scope="module")
def keyed_host(espeak_backend, tmp_path_factory):
    """The routes on eSpeak behind an API key (install_routes, as the page's launch does)."""
    engine = CountingEngine(espeak_backend, EngineConfig(max_concurrent=2))
    app = api_app(engine, tmp_path_factory.mktemp("voices"), access=AccessPolicy(api_key=KEY))
    with guarded_server(app) as host:
        yield host, engine


def open_ws(host: str, route: str, headers: dict | None = None) -> ClientConnection:
    return connect(
        f"ws://{host}{route}", additional_headers=headers, max_size=None, open_timeout=FAIL_AFTER_S
    )


def error_of(ws: ClientConnection) -> dict:
    error = json.loads(ws.recv(timeout=FAIL_AFTER_S))
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=FAIL_AFTER_S)
    assert error["type"] == "error", error
    return error


def test_the_page_route_needs_no_key_and_speaks_pcm(keyed_host) -> None:
    host, engine = keyed_host
    with open_ws(host, page_text_ws.ROUTE, {"Origin": f"http://{host}"}) as ws:
        send(ws, "session.config", voice="alloy", language="english", seed=3)
        for word in ("Hello ", "from ", "the ", "page."):
            send(ws, "input.text", text=word)
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
    assert [m["type"] for m in messages] == ["audio.start", "audio.done", "session.done"]
    assert messages[0]["format"] == "pcm" and messages[0]["sample_rate"] == engine.sample_rate
    assert len(audio) == messages[1]["total_bytes"] > 0 and len(audio) % 2 == 0
    assert engine.fed[-1].text == "Hello from the page."
    with open_ws(host, API_ROUTE) as ws:  # the /v1 route still needs the key
        assert error_of(ws)["status"] == 401


@pytest.mark.parametrize(
    ("headers", "config", "status", "code"),
    [
        ({"Origin": "https://evil.example"}, {"voice": "alloy"}, 403, "origin_not_allowed"),
        ({}, {"reference": "/etc/passwd"}, 400, "invalid_value"),  # not an upload of the page
        ({}, {"voice": "alloy", "temperature": -1}, 400, "invalid_value"),
        ({}, {"voice": "nobody"}, 404, "voice_not_found"),
    ],
)
def test_the_page_route_refuses_with_a_clear_error(
    keyed_host, headers, config, status, code
) -> None:
    host, engine = keyed_host
    with open_ws(host, page_text_ws.ROUTE, headers) as ws:
        if not headers:
            send(ws, "session.config", **config)
        error = error_of(ws)
    assert (error["status"], error["code"]) == (status, code), error
    assert error["message"]
    until(lambda: engine.active_requests == 0, "nothing left running")


class GatedOpenEngine(CountingEngine):
    """A CountingEngine whose requests for text in pieces open once `gate` is set: a session
    busy with one message (as a wait in the engine's line or for the model thread makes it)
    while its client sends more. The wait is one the engine's code makes (a future of the
    model thread's, awaited on the event loop under awaiting.run_awaiting), so the session
    waits as a real one does, without holding the loop."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.opening, self.gate = threading.Event(), OpenGate()

    def open_fed(self, request, cancel=None):  # noqa: ANN001, ANN201
        self.opening.set()
        wait_future(self.gate.future)
        return super().open_fed(request, cancel)


class OpenGate:
    """`set()` lets every open waiting on `future` go on (any thread)."""

    def __init__(self) -> None:
        self.future: Future = Future()

    def set(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class PingCountingConnection(ClientConnection):
    """A client that counts the server's keepalive pings (it answers each, as any does)."""

    pings = 0

    def process_event(self, event) -> None:  # noqa: ANN001
        if isinstance(event, Frame) and event.opcode is Opcode.PING:
            self.pings += 1
        super().process_event(event)


PING_INTERVAL_S = 0.05  # the server's keepalive pings, often; the pong deadline: a hang's


def test_a_busy_session_keeps_a_client_that_answers_its_pings(
    espeak_backend, tmp_path, monkeypatch
) -> None:
    """The session is stuck on one message (the engine's open waits) while its client has
    sent more. uvicorn stopped reading such a socket, the client's pongs included, so a
    session busier than the ping timeout (20 s by default: a loaded machine) had its client
    dropped (1011; 1006 in Chromium). The server sends its next ping only once it has read
    the last one's pong: two pings while the session is stuck prove the pongs are read."""
    configured = server_config

    def pinging(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        config = configured(*args, **kwargs)
        config.ws_ping_interval, config.ws_ping_timeout = PING_INTERVAL_S, FAIL_AFTER_S
        return config

    monkeypatch.setattr(test_speech_ws, "server_config", pinging)
    engine = GatedOpenEngine(espeak_backend, EngineConfig(max_concurrent=2))
    try:
        with guarded_server(api_app(engine, tmp_path / "voices")) as host:
            with connect(
                f"ws://{host}{page_text_ws.ROUTE}",
                ping_interval=None,
                open_timeout=FAIL_AFTER_S,
                create_connection=PingCountingConnection,
            ) as ws:
                send(ws, "session.config", voice="alloy", language="english")
                for word in ("Hello ", "from ", "a ", "busy ", "server."):
                    send(ws, "input.text", text=word)
                send(ws, "input.done")
                until(engine.opening.is_set, "the session waits for the engine")
                seen = ws.pings
                until(
                    lambda: ws.pings >= seen + 2 or ws.protocol.state is State.CLOSED,
                    "two pings while the session waits",
                )
                assert ws.pings >= seen + 2, ws.close_code  # not dropped
                engine.gate.set()
                audio, messages = receive_utterance(ws)
    finally:
        engine.gate.set()
    assert [m["type"] for m in messages] == ["audio.start", "audio.done", "session.done"]
    assert len(audio) == messages[1]["total_bytes"] > 0
    assert engine.fed[-1].text == "Hello from a busy server."
