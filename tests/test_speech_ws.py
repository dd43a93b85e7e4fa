"""The WebSocket /v1/audio/speech/stream (issue #27) over real sockets, on our guarded server.

Exactness: for the same seed and knobs, text fed by word, by character and in random splits
gives PCM byte-identical to POST /v1/audio/speech with the whole text, on the tiny Qwen3
checkpoint in x-vector mode and in ICL mode (a saved voice with its transcript), with pauses
in which the row has used up its text and the model's loop is idle (an event: the server's
request holds the text sent so far and the loop has nothing to step); VoxCPM2 tiny buffers
until input.done and equals the whole text too. Errors: each gives an `error` message and a
clean close, and the server keeps serving.

Every wait ends on an event (a message, the loop going idle); FAIL_AFTER_S only decides when a
test has failed.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, FastAPI, WebSocket
from test_openai_api import free_port
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tts_core.engine import Engine, EngineConfig, InputError
from tts_core.engine.backend import TextInlet, TextTooLong
from tts_core.engine.validation import printable
from tts_core.quant.linear import int8_matmul_available
from tts_core.server import AccessPolicy, ApiConfig, ServerState, VoiceRegistry, install_routes
from tts_core.server.connections import ConnectionGuard, ConnectionLimits
from tts_core.server.http_server import ServeOptions, server_config
from tts_core.server.speech_ws import ROUTE, SpeechSession, StreamLimits, add_speech_stream_route

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAIL_AFTER_S = 120  # only a hung server takes this long
WEIGHTS = "int8" if int8_matmul_available() else "none"  # what quantize="auto" serves here
XVEC_TEXT = "Hello there, how are you today? One two three, four five six."
# ICL: the prompt's prefill holds T2 - len(ref_text) target tokens (alloy's clip: ~30), so the
# text must be longer for the request to start before input.done
ICL_TEXT = (
    "This is a longer piece of text, spoken in the cloned voice of the reference clip, and it "
    "keeps going for a while so that the request starts before all of it has arrived."
)


class FedRecordingEngine(Engine):
    """The real engine, remembering each request opened for text in pieces."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.fed: list = []

    def open_fed(self, request, cancel=None):  # noqa: ANN001, ANN201
        stream = super().open_fed(request, cancel)
        self.fed.append(stream)
        return stream


_GUARDS: dict[str, ConnectionGuard] = {}  # host -> its server's connection guard


@contextmanager
def guarded_server(app: FastAPI, limits: ConnectionLimits | None = None) -> Iterator[str]:
    """`app` on our server's uvicorn configuration (guarded h11 + WebSocket protocols)."""
    import uvicorn

    options = ServeOptions(port=free_port(), connections=limits or ConnectionLimits())
    guard = ConnectionGuard(options.connections, options.connections.max_connections)
    server = uvicorn.Server(server_config(app, options, guard, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + FAIL_AFTER_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "uvicorn did not start"
    host = f"127.0.0.1:{options.port}"
    _GUARDS[host] = guard
    try:
        yield host
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def api_app(engine: Engine, voices: Path, **config) -> FastAPI:  # noqa: ANN003
    app = FastAPI()
    install_routes(app, engine, VoiceRegistry(voices), ApiConfig(**config))
    return app


def post_pcm(host: str, body: dict) -> bytes:
    response = httpx.post(
        f"http://{host}/v1/audio/speech",
        timeout=FAIL_AFTER_S,
        json={**body, "response_format": "pcm", "stream": False},
    )
    assert response.status_code == 200, response.text[:300]
    return response.content


def open_ws(host: str, headers: dict | None = None) -> ClientConnection:
    return connect(
        f"ws://{host}{ROUTE}",
        additional_headers=headers,
        max_size=None,
        max_queue=None,
        open_timeout=FAIL_AFTER_S,
    )


def send(ws: ClientConnection, kind: str, **fields: object) -> None:
    ws.send(json.dumps({"type": kind, **fields}))


def receive_utterance(ws: ClientConnection) -> tuple[bytes, list[dict]]:
    """(the binary frames joined, the JSON messages) up to session.done or an error."""
    audio, messages = b"", []
    while True:
        message = ws.recv(timeout=FAIL_AFTER_S)
        if isinstance(message, bytes):
            audio += message
            continue
        messages.append(json.loads(message))
        if messages[-1]["type"] in ("session.done", "error"):
            return audio, messages


def speak(
    host: str,
    config: dict,
    pieces: list[str],
    pause: Callable[[str], None] | None = None,
    before_done: Callable[[], None] | None = None,
) -> tuple[bytes, list[dict]]:
    """One utterance over the WebSocket: config, the pieces (after each, `pause(text so
    far)`), `before_done()`, input.done; then session.close."""
    with open_ws(host) as ws:
        send(ws, "session.config", **config)
        sent = ""
        for piece in pieces:
            send(ws, "input.text", text=piece)
            sent += piece
            if pause is not None:
                pause(sent)
        if before_done is not None:
            before_done()
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
        send(ws, "session.close")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=FAIL_AFTER_S)
        assert ws.close_code == 1000
    return audio, messages


def pieces_by(mode: str, text: str, rng: random.Random) -> list[str]:
    if mode == "char":
        return list(text)
    if mode == "word":
        words = text.split(" ")
        return [w + " " for w in words[:-1]] + [words[-1]]
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(3, 8)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + FAIL_AFTER_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.002)


def idle_pause(engine: FedRecordingEngine, scheduler) -> Callable[[str], None]:  # noqa: ANN001
    """After a piece: the model's request has taken all the text sent so far (cleaned as the
    engine cleans it) and its row is queued once its prompt's text is in (the request's own
    pipeline queues it: `settled`), and the model's loop has nothing to step (the row has used
    up its text and waits)."""

    opened = len(engine.fed)  # the request of this utterance comes after these

    def pause(sent: str) -> None:
        def arrived() -> bool:
            return len(engine.fed) > opened and engine.fed[-1].text == printable(sent)

        until(lambda: arrived() and engine.fed[-1].forwarded, "the model has the text")
        request = engine.fed[-1]._inlet._sink  # the backend's FedRequest (qwen3_tts/serving)
        until(lambda: request.settled, "the row queued once its prompt's text is in")

        def idle() -> bool:
            with scheduler._cond:
                return not scheduler._has_work()

        until(idle, "the loop idle")

    return pause


def check_messages(messages: list[dict], audio: bytes, response_format: str, rate: int) -> None:
    kinds = [m["type"] for m in messages]
    assert kinds == ["audio.start", "audio.done", "session.done"], messages
    start, done, session = messages
    assert start["format"] == response_format and start["sample_rate"] == rate
    assert start["channels"] == 1 and start["sentence_index"] == 0
    assert done["total_bytes"] == len(audio) and done["error"] is False
    assert session["total_sentences"] == 1 and session["stats"]["done"]


# ---------------------------------------------------------------- the engine's text inlet
class ListSink:
    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.done_calls = 0

    def feed(self, piece: str) -> None:
        self.pieces.append(piece)

    def done(self) -> None:
        self.done_calls += 1


def test_the_inlet_cleans_pieces_as_the_engine_cleans_the_whole() -> None:
    """Random strings of visible, whitespace, control and zero-width characters, split at
    random (the sink attached at a random point): the text, and the pieces the sink gets,
    join to exactly `printable(whole)`."""
    alphabet = list("ab Z.,!é你😀") + [
        " ",
        "  ",
        "\t",
        "\n",
        "\r",
        "\u200b",
        "\x00",
        "\x85",
        "\u00a0",
        "\u2028",
        "\ufeff",
        "\u202e",
    ]
    rng = random.Random(27)
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        inlet, sink = TextInlet(max_chars=1000), ListSink()
        pieces = pieces_by("random" if len(text) > 9 else "char", text, rng)
        attach_at = rng.randint(0, len(pieces))
        for i, piece in enumerate(pieces):
            if i == attach_at:
                inlet.attach(sink)
            inlet.push(piece)
        if not printable(text):
            with pytest.raises(InputError):
                inlet.finish()
            continue
        inlet.finish()
        if attach_at == len(pieces):
            inlet.attach(sink)
        assert inlet.text == printable(text), repr(text)
        assert "".join(sink.pieces) == printable(text) and sink.done_calls == 1, repr(text)


def test_the_inlet_bounds_the_text_and_reports_a_failed_sink() -> None:
    inlet = TextInlet(max_chars=10)
    inlet.push("0123456789   ")  # trailing whitespace is not counted until a word follows
    with pytest.raises(TextTooLong):
        inlet.push("x")

    class Refusing(ListSink):
        def feed(self, piece: str) -> None:
            raise ValueError("the prompt takes too many positions")

    inlet = TextInlet(max_chars=10)
    inlet.push("Hello")
    inlet.attach(Refusing())
    assert isinstance(inlet.failure, ValueError)
    failure = inlet.failure
    inlet.push(" more")  # nothing more is forwarded; the backend raises the failure
    assert inlet.failure is failure and not inlet.forwarded


# ---------------------------------------------------------------- Qwen3: text streams in
@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    from tts_core.backends.qwen3 import Qwen3Backend

    backend = Qwen3Backend.load(
        str(FIXTURES / "qwen3-tiny-a"), "cpu", quantize=WEIGHTS, max_batch=4
    )
    engine = FedRecordingEngine(backend, EngineConfig(max_queue=8))
    with guarded_server(api_app(engine, tmp_path_factory.mktemp("voices"))) as host:
        # a 3.1 s clip (the built-in ones are 5.7-8.5 s since issue 36): its ICL prompt lets
        # the row start while the text still arrives, as these tests observe
        with SHORT_CLIP.open("rb") as clip:
            made = httpx.post(
                f"http://{host}/v1/audio/voices",
                timeout=FAIL_AFTER_S,
                data={"name": SHORT_VOICE, "transcript": SHORT_TRANSCRIPT},
                files={"file": ("short.wav", clip, "audio/wav")},
            )
        assert made.status_code == 201, made.text
        yield host, engine, backend.loop
    backend.loop.close()


SHORT_VOICE = "short-slt"
SHORT_CLIP = Path(__file__).resolve().parents[1] / "assets" / "voices" / "arctic_slt_a0009.wav"
SHORT_TRANSCRIPT = "He turned sharply, and faced Gregson across the table."


@pytest.mark.parametrize("mode", ["word", "char", "random"])
@pytest.mark.parametrize("clone", ["xvector", "icl"])
def test_fed_text_gives_the_bytes_of_the_whole_text(qwen3, clone: str, mode: str) -> None:
    host, engine, scheduler = qwen3
    text = ICL_TEXT if clone == "icl" else XVEC_TEXT
    voice = {"voice": SHORT_VOICE, "x_vector_only_mode": clone == "xvector"}
    knobs = {"seed": 11, "temperature": 0.8, "top_k": 40}
    whole = post_pcm(host, {"input": text, **voice, **knobs})
    pieces = pieces_by(mode, text, random.Random(mode + clone))
    started = len(engine.fed)
    running: list[int] = []  # the row was running (waiting for its text) before input.done
    audio, messages = speak(
        host,
        {**voice, **knobs, "response_format": "pcm"},
        pieces,
        idle_pause(engine, scheduler),
        lambda: running.append(scheduler.active),
    )
    assert running == [1]
    check_messages(messages, audio, "pcm", engine.sample_rate)
    assert audio == whole, f"{len(audio)} bytes vs {len(whole)}"
    assert len(engine.fed) == started + 1
    assert messages[-1]["stats"]["voice"]["mode"] == clone
    assert engine.active_requests == 0


def test_speech_starts_before_the_text_is_complete(qwen3) -> None:
    """x-vector mode: the first audio arrives while input.done has not been sent."""
    host, engine, _ = qwen3
    with open_ws(host) as ws:
        send(
            ws,
            "session.config",
            voice="alloy",
            x_vector_only_mode=True,
            seed=2,
            response_format="wav",
            first_chunk_frames=1,
        )
        send(ws, "input.text", text=XVEC_TEXT)  # the last word stays uncommitted until done
        start = json.loads(ws.recv(timeout=FAIL_AFTER_S))
        assert start["type"] == "audio.start" and start["format"] == "wav"
        first = ws.recv(timeout=FAIL_AFTER_S)
        assert isinstance(first, bytes) and first[:4] == b"RIFF"  # the streamed WAV header
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
        assert messages[-1]["type"] == "session.done"
    whole = post_pcm(
        host,
        {
            "input": XVEC_TEXT,
            "voice": "alloy",
            "x_vector_only_mode": True,
            "seed": 2,
            "first_chunk_frames": 1,
        },
    )
    assert first[44:] + audio == whole  # header, then the same PCM


def test_two_utterances_on_one_connection(qwen3) -> None:
    """input.done is a flush: the next text is a new utterance, the config kept."""
    host, engine, _ = qwen3
    models = httpx.get(f"http://{host}/v1/models", timeout=FAIL_AFTER_S).json()
    assert models["data"][-1]["info"]["text_in"] == "streamed"
    config = {"voice": "alloy", "x_vector_only_mode": True, "seed": 4, "response_format": "pcm"}
    with open_ws(host) as ws:
        send(ws, "session.config", **config)
        got = []
        for text in ("First one.", "And the second."):
            send(ws, "input.text", text=text)
            send(ws, "input.done")
            audio, messages = receive_utterance(ws)
            assert messages[-1]["type"] == "session.done"
            got.append((audio, messages[0]["utterance_index"]))
    for (audio, index), (i, text) in zip(
        got, enumerate(("First one.", "And the second.")), strict=True
    ):
        assert index == i
        assert audio == post_pcm(host, {"input": text, **config})


def test_a_client_gone_mid_text_frees_its_row_and_slot(qwen3) -> None:
    """The row waits for text (no step, so nothing asks its should_stop); the client leaves
    without input.done: the row, its cache span and the engine's slot are freed."""
    host, engine, scheduler = qwen3
    with open_ws(host) as ws:
        send(ws, "session.config", voice="alloy", x_vector_only_mode=True, seed=1)
        pause = idle_pause(engine, scheduler)
        send(ws, "input.text", text="Hello there, how are")
        pause("Hello there, how are")
        assert scheduler.active == 1 and engine.active_requests == 1
    until(lambda: scheduler.active == 0 and engine.active_requests == 0, "row and slot freed")


def test_a_shutdown_cancel_ends_a_waiting_utterance_with_an_error(qwen3) -> None:
    """The engine's cancel_all (a draining shutdown) reaches a row waiting for its text: the
    client gets an error (503, cancelled) and a close; the row is freed."""
    host, engine, scheduler = qwen3
    with open_ws(host) as ws:
        send(ws, "session.config", voice="alloy", x_vector_only_mode=True, seed=1)
        pause = idle_pause(engine, scheduler)
        send(ws, "input.text", text="Hello there, how are")
        pause("Hello there, how are")
        assert engine.admission.cancel_all() == 1
        _audio, messages = receive_utterance(ws)  # audio.start and audio made before it
        error = messages[-1]
        assert (error["type"], error["status"], error["code"]) == ("error", 503, "cancelled")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=FAIL_AFTER_S)
        assert ws.close_code == 1013
    until(lambda: scheduler.active == 0 and engine.active_requests == 0, "row and slot freed")


# ---------------------------------------------------------------- VoxCPM2: buffered
def test_voxcpm_buffers_and_equals_the_whole_text(tmp_path) -> None:
    from tts_core.backends.voxcpm import VoxCPMBackend

    backend = VoxCPMBackend.load(str(FIXTURES / "voxcpm2-tiny"), "cpu")
    try:
        engine = FedRecordingEngine(backend, EngineConfig())
        assert engine.info()["text_in"] == "buffered"
        text = "Hello there, my friend. How are you?"
        config = {"voice": "alloy", "x_vector_only_mode": True, "seed": 3}
        with guarded_server(api_app(engine, tmp_path)) as host:
            whole = post_pcm(host, {"input": text, **config})
            audio, messages = speak(
                host,
                {**config, "response_format": "pcm"},
                pieces_by("word", text, random.Random(1)),
            )
        check_messages(messages, audio, "pcm", engine.sample_rate)
        assert audio == whole
    finally:
        backend.close()


# ---------------------------------------------------------------- errors and bounds
KEY = "secret-key-of-the-test"


@pytest.fixture(scope="module")
def espeak_ws(espeak_backend, tmp_path_factory):
    """eSpeak (buffered) behind an API key, with a short idle timeout and a small text limit."""
    engine = FedRecordingEngine(espeak_backend, EngineConfig(max_concurrent=1, max_queue=0))
    config = ApiConfig(access=AccessPolicy(api_key=KEY), max_input_chars=60)
    state = ServerState(
        slot=_slot(engine), voices=VoiceRegistry(tmp_path_factory.mktemp("v")), config=config
    )
    router = APIRouter()
    add_speech_stream_route(router, state, StreamLimits(idle_timeout_s=0.5))
    app = FastAPI()
    app.include_router(router)
    with guarded_server(app) as host:
        yield host, engine


def _slot(engine: Engine):  # noqa: ANN202
    from tts_core.server import as_slot

    return as_slot(engine)


AUTH = {"Authorization": f"Bearer {KEY}"}


def refused(host: str, messages: list[dict], headers: dict | None = AUTH) -> dict:
    """Send `messages` (a str is sent raw); the server answers with an error and closes."""
    with open_ws(host, headers) as ws:
        for message in messages:
            ws.send(message if isinstance(message, str) else json.dumps(message))
        error = json.loads(ws.recv(timeout=FAIL_AFTER_S))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=FAIL_AFTER_S)
    assert error["type"] == "error" and error["message"], error
    return {**error, "close_code": ws.close_code}


def still_serving(host: str) -> None:
    with open_ws(host, AUTH) as ws:
        send(ws, "session.config", voice="alloy", response_format="pcm")
        send(ws, "input.text", text="Still here.")
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
    assert [m["type"] for m in messages] == ["audio.start", "audio.done", "session.done"]
    assert len(audio) > 0


CONFIG = {"type": "session.config", "voice": "alloy"}


@pytest.mark.parametrize(
    ("messages", "headers", "status", "close_code"),
    [
        (["{not json"], AUTH, 400, 1008),
        ([{"type": "audio.bogus"}], AUTH, 400, 1008),
        ([{"type": "input.text", "text": "Hi"}], AUTH, 400, 1008),  # before session.config
        ([{**CONFIG, "voice": "nobody"}], AUTH, 404, 1008),
        ([{**CONFIG, "response_format": "mp3"}], AUTH, 400, 1008),
        ([{**CONFIG, "temperature": -3}], AUTH, 400, 1008),  # a knob, checked by name
        ([CONFIG, {"type": "input.text", "text": "x" * 61}], AUTH, 413, 1009),
        ([CONFIG, {"type": "input.text", "text": 5}], AUTH, 400, 1008),
        (
            [CONFIG, {"type": "input.text", "text": " \u200b "}, {"type": "input.done"}],
            AUTH,
            400,
            1008,
        ),  # nothing visible to speak
        ([], {"Authorization": "Bearer wrong"}, 401, 1008),
        ([], {**AUTH, "Origin": "https://evil.example"}, 403, 1008),
    ],
)
def test_errors_close_cleanly_and_the_server_keeps_serving(
    espeak_ws, messages, headers, status: int, close_code: int
) -> None:
    host, engine = espeak_ws
    error = refused(host, messages, headers)
    assert (error["status"], error["close_code"]) == (status, close_code), error
    until(lambda: engine.active_requests == 0 and engine.waiting_requests == 0, "slot back")
    still_serving(host)


def test_idle_timeout(espeak_ws) -> None:
    host, engine = espeak_ws
    error = refused(host, [CONFIG, {"type": "input.text", "text": "Waiting for"}])
    assert (error["status"], error["code"], error["close_code"]) == (408, "idle_timeout", 1000)
    until(lambda: engine.active_requests == 0, "the slot given back")
    still_serving(host)


def test_busy_engine_is_an_error(espeak_ws) -> None:
    """One slot, no queue: a second utterance while the first holds it is refused (503)."""
    host, engine = espeak_ws
    with open_ws(host, AUTH) as first:
        send(first, "session.config", voice="alloy")
        send(first, "input.text", text="Holding the slot")
        until(lambda: engine.active_requests == 1, "the first holds the slot")
        error = refused(host, [CONFIG, {"type": "input.text", "text": "Me too"}])
        assert (error["status"], error["close_code"]) == (503, 1013)
        send(first, "input.done")
        audio, messages = receive_utterance(first)
        assert messages[-1]["type"] == "session.done" and audio[:4] == b"RIFF"  # wav default
    still_serving(host)


def test_the_sessions_access_mode_decides_its_handshake(espeak_backend, tmp_path) -> None:
    """SpeechSession(access="page") (the page's /tts_stream/text) checks Host and Origin but no
    API key, on the server's own state (no copy of it); "api" (/v1) needs the key."""
    engine = FedRecordingEngine(espeak_backend, EngineConfig())
    config = ApiConfig(access=AccessPolicy(api_key=KEY))
    state = ServerState(slot=_slot(engine), voices=VoiceRegistry(tmp_path), config=config)
    sessions: list[SpeechSession] = []
    router = APIRouter()
    add_speech_stream_route(router, state)

    @router.websocket("/page-mode")
    async def page_mode(websocket: WebSocket) -> None:
        sessions.append(SpeechSession(websocket, state, StreamLimits(), access="page"))
        await sessions[-1].run()

    app = FastAPI()
    app.include_router(router)
    with guarded_server(app) as host:
        page = f"ws://{host}/page-mode"
        with connect(page, open_timeout=FAIL_AFTER_S) as ws:  # no key
            send(ws, "session.config", voice="alloy", response_format="pcm")
            send(ws, "input.text", text="No key here.")
            send(ws, "input.done")
            audio, messages = receive_utterance(ws)
        assert messages[-1]["type"] == "session.done" and len(audio) > 0
        with connect(
            page, additional_headers={"Origin": "https://evil.example"}, open_timeout=FAIL_AFTER_S
        ) as ws:
            assert json.loads(ws.recv(timeout=FAIL_AFTER_S))["status"] == 403
        assert refused(host, [], headers=None)["status"] == 401  # /v1: the key still counts
    assert all(session.state is state for session in sessions)
    assert state.config.access.api_key == KEY
    with pytest.raises(ValueError, match="access"):
        SpeechSession(None, state, StreamLimits(), access="anyone")  # type: ignore[arg-type]


class TextRecordingBackend:
    """A backend that remembers the texts its `stream` was given."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self._inner = inner
        self.texts: list[str] = []

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        self.texts.append(text)
        return self._inner.stream(text, voice, params, cancel)


def test_espeak_buffers_the_whole_cleaned_text(espeak_backend, tmp_path) -> None:
    """eSpeak's audio is not bit-stable from call to call (so no byte comparison here): its
    one synthesis gets the whole text, cleaned as POST cleans it, once input.done came."""
    backend = TextRecordingBackend(espeak_backend)
    engine = FedRecordingEngine(backend, EngineConfig())
    assert engine.info()["text_in"] == "buffered"
    text = "  Hello there.\tThis is eSpeak,\n\n buffered \u200buntil done.  "
    with guarded_server(api_app(engine, tmp_path)) as host:
        post_pcm(host, {"input": text, "voice": "alloy"})
        audio, messages = speak(
            host,
            {"voice": "alloy", "response_format": "pcm"},
            pieces_by("char", text, random.Random(0)),
        )
    check_messages(messages, audio, "pcm", engine.sample_rate)
    assert backend.texts == [printable(text)] * 2


def test_upgraded_connections_give_their_place_back(espeak_ws) -> None:
    """The connection guard counts a WebSocket while it is open and not after it closed."""
    host, _ = espeak_ws
    guard = _GUARDS[host]
    until(lambda: guard.open == 0, "the earlier tests' connections closed")
    with open_ws(host, AUTH) as ws:
        send(ws, "session.config", voice="alloy")
        until(lambda: guard.open == 1 and not guard.waiting, "counted while open, as busy")
    until(lambda: guard.open == 0, "given back after the close")


def test_a_vllm_omni_style_client_against_the_real_app(app_server) -> None:
    """`python app.py --model espeak` (conftest.app_server): the flow of vLLM-Omni's
    ws_speech_stream_demo.py (its config fields, words sent as they come, each utterance's
    frames between audio.start and audio.done read as one WAV file by soundfile)."""
    import io

    import soundfile as sf

    url, _log = app_server
    config = {
        "voice": "alloy",
        "task_type": "Base",
        "response_format": "wav",
        "speed": 1.0,
        "split_granularity": "sentence",
        "language": "English",
    }
    text = "Hello world. How are you today?"
    with open_ws(url.removeprefix("http://")) as ws:
        send(ws, "session.config", **config)
        words = text.split(" ")
        for i, word in enumerate(words):
            send(ws, "input.text", text=word + (" " if i < len(words) - 1 else ""))
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
    assert [m["type"] for m in messages] == ["audio.start", "audio.done", "session.done"]
    samples, rate = sf.read(io.BytesIO(audio))
    assert rate == messages[0]["sample_rate"] and samples.ndim == 1
    assert len(samples) * 2 + 44 == len(audio) == messages[1]["total_bytes"]


def test_an_open_websocket_outlives_the_head_and_body_deadlines(espeak_backend, tmp_path) -> None:
    """h11 stops at the upgrade request (its state: a body to come), so the guard must arm no
    deadline for it. Event: a plain connection opened after the upgrade, sending nothing, is
    closed by its head deadline (so an armed one of the WebSocket's would have fired first);
    the WebSocket still speaks."""
    import socket

    engine = FedRecordingEngine(espeak_backend, EngineConfig())
    limits = ConnectionLimits(header_timeout_s=0.2, body_idle_timeout_s=0.2)
    with guarded_server(api_app(engine, tmp_path), limits) as host, open_ws(host) as ws:
        send(ws, "session.config", voice="alloy", response_format="pcm")
        name, port = host.split(":")
        with socket.create_connection((name, int(port)), timeout=FAIL_AFTER_S) as idle:
            assert idle.recv(100).startswith(b"HTTP/1.1 408")
        send(ws, "input.text", text="Still open.")
        send(ws, "input.done")
        audio, messages = receive_utterance(ws)
        assert messages[-1]["type"] == "session.done" and len(audio) > 0


def test_the_readme_client_example_runs(app_server) -> None:
    """The README's `websockets` example, against the real app (eSpeak), as written."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Streaming text in", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    url, _log = app_server
    scope: dict = {}
    exec(code.replace("ws://127.0.0.1:7860", "ws://" + url.removeprefix("http://")), scope)  # noqa: S102
    assert len(scope["audio"]) > 2 * 24000 // 2  # some speech: more than half a second


# ---------------------------------------------------------------- time held (issue #37 M2, M4)
@contextmanager
def bounded_ws(espeak_backend, tmp_path: Path, limits: StreamLimits) -> Iterator[tuple]:
    """eSpeak behind the /v1 route with `limits`: (host, engine)."""
    engine = FedRecordingEngine(espeak_backend, EngineConfig())
    state = ServerState(slot=_slot(engine), voices=VoiceRegistry(tmp_path), config=ApiConfig())
    router = APIRouter()
    add_speech_stream_route(router, state, limits)
    app = FastAPI()
    app.include_router(router)
    with guarded_server(app) as host:
        yield host, engine


def held_until_error(host: str, first: list[dict], repeated: dict, every_s: float) -> dict:
    """Send `first`, then `repeated` every `every_s` from a second thread until the server
    answers with its error (which the test waits for: an event) and closes."""
    stop = threading.Event()
    with open_ws(host) as ws:
        for message in first:
            ws.send(json.dumps(message))

        def repeat() -> None:
            while not stop.wait(every_s):
                try:
                    ws.send(json.dumps(repeated))
                except ConnectionClosed:
                    return

        threading.Thread(target=repeat, daemon=True).start()
        try:
            error = json.loads(ws.recv(timeout=FAIL_AFTER_S))
        finally:
            stop.set()
    return error


@pytest.mark.parametrize(
    ("first", "repeated"),
    [
        ([CONFIG, {"type": "input.text", "text": "Holding"}], {"type": "input.text", "text": ""}),
        ([CONFIG], CONFIG),
    ],
    ids=["empty-pieces", "config-again"],
)
def test_messages_that_add_nothing_do_not_hold_a_session_open(
    espeak_backend, tmp_path, first, repeated
) -> None:
    """An empty piece every 0.05 s (the slot held by the utterance's first word) or the same
    session.config again and again (a connection held): neither renews the 1 s idle timeout,
    so the session ends with 408 idle_timeout and the slot comes back (before the fix each
    message renewed it: the socket and the slot were held forever)."""
    limits = StreamLimits(idle_timeout_s=1.0)
    with bounded_ws(espeak_backend, tmp_path, limits) as (host, engine):
        error = held_until_error(host, first, repeated, every_s=0.05)
        assert (error["status"], error["code"]) == (408, "idle_timeout"), error
        until(lambda: engine.active_requests == 0, "the slot given back")


def test_an_utterance_has_a_time_limit(espeak_backend, tmp_path) -> None:
    """Real text every 0.05 s keeps the idle timer going, but an utterance holds its slot for
    at most max_utterance_s from its first piece."""
    limits = StreamLimits(max_utterance_s=1.0)
    with bounded_ws(espeak_backend, tmp_path, limits) as (host, engine):
        piece = {"type": "input.text", "text": "a"}
        error = held_until_error(host, [CONFIG], piece, every_s=0.05)
        assert (error["status"], error["code"]) == (408, "utterance_timeout"), error
        until(lambda: engine.active_requests == 0, "the slot given back")


def test_an_utterance_has_a_count_of_pieces(espeak_backend, tmp_path) -> None:
    """Empty pieces count too: the sixth of at most five is a 413 (close 1009)."""
    limits = StreamLimits(max_utterance_pieces=5)
    with bounded_ws(espeak_backend, tmp_path, limits) as (host, engine):
        pieces = [{"type": "input.text", "text": "Hi"}] + [{"type": "input.text", "text": ""}] * 5
        error = refused(host, [CONFIG, *pieces], headers=None)
        assert (error["status"], error["code"], error["close_code"]) == (
            413,
            "too_many_pieces",
            1009,
        )
        until(lambda: engine.active_requests == 0, "the slot given back")


def test_a_session_has_a_time_limit(espeak_backend, tmp_path) -> None:
    """Real text every 0.05 s, within the utterance's own limit: the session still ends at
    max_session_s."""
    limits = StreamLimits(max_session_s=1.0)
    with bounded_ws(espeak_backend, tmp_path, limits) as (host, engine):
        piece = {"type": "input.text", "text": "a"}
        error = held_until_error(host, [CONFIG], piece, every_s=0.05)
        assert (error["status"], error["code"]) == (408, "session_timeout"), error
        until(lambda: engine.active_requests == 0, "the slot given back")
