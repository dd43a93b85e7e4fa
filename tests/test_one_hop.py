"""One hop per request (issue 39): a streaming POST /v1/audio/speech touches two threads, the
server's event loop and the thread the model computes on; no worker thread per request, and no
generator advanced on two threads.

Recorded, not inferred: every place that runs part of the request notes the thread it ran
on (its `threading.current_thread()`: an ident is reused once its thread ended) each time it
runs: the response body's messages (an ASGI wrapper), the engine's pipeline (each step of
`Engine._produce`), the backend's stream (each step) and voice, the turn in line, the saved
voice's clip read, and the model's own work (each engine step and the model's voice; eSpeak's
synthesis calls). Before this change (measured with this test) the same request ran on five
threads: the event loop, asyncio's pool (the saved voice's clip), a "tts-first-event" thread
(the turn in line, the voice, the first event), a "tts-http-stream" thread (the rest: the
engine's and the backend's generators advanced on both) and the model's thread
("tts-scheduler"; Chatterbox's "tts-chatterbox"; eSpeak: an "espeak-synth" thread per request
instead); a WebSocket utterance on eSpeak ran on four ("tts-ws-stream", "espeak-synth", the
pool, the loop). Now two each; and a WebSocket utterance on Qwen3-TTS, which reads its text as
it arrives, too (before: four, its pipeline on a "tts-backend" thread of its own and each piece
of text handed over on asyncio's pool, waiting there for the model's thread).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from test_openai_api import make_api, serve
from test_speech_ws import speak, until

from tts_core.engine import BackendChunk, Engine, EngineConfig, SynthesisRequest
from tts_core.engine.admission import Admission
from tts_core.engine.capabilities import Capabilities
from tts_core.models.qwen3_tts.serving.fed import FedRequest
from tts_core.server.voices import VoiceRegistry
from tts_core.serving.batch import BatchEngine

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Two threads: the event loop and the model's."


class ThreadLog:
    """Where each part of a request ran: place -> the threads it ran on."""

    def __init__(self) -> None:
        self.places: dict[str, set[threading.Thread]] = defaultdict(set)

    def note(self, place: str) -> None:
        self.places[place].add(threading.current_thread())

    def call(self, place: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def noted(*args: Any, **kwargs: Any) -> Any:
            self.note(place)
            return fn(*args, **kwargs)

        return noted

    def generator(self, place: str, fn: Callable[..., Iterator[Any]]) -> Callable[..., Any]:
        """`fn`'s generator, noted at each step (its start, every item, its close)."""

        def noted(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self.note(place)
            items = fn(*args, **kwargs)
            try:
                while True:
                    self.note(place)
                    try:
                        item = next(items)
                    except StopIteration:
                        return
                    yield item
            finally:
                self.note(place)
                items.close()

        return noted

    def threads(self) -> set[threading.Thread]:
        return set().union(*self.places.values())

    def report(self) -> str:
        return f"{len(self.threads())} threads; " + "; ".join(
            f"{place}: {sorted(thread.name for thread in threads)}"
            for place, threads in sorted(self.places.items())
        )


class NotedBody:
    """ASGI wrapper: notes the thread that sends each response body (or WebSocket) message."""

    def __init__(self, app: Any, log: ThreadLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def noted_send(message: dict) -> None:
            if message["type"] in ("http.response.body", "websocket.send"):
                self.log.note("response body")
            await send(message)

        await self.app(scope, receive, noted_send)


def note_request(monkeypatch: pytest.MonkeyPatch, log: ThreadLog, backend: Any) -> None:
    """Every place of a request that runs in the server, whatever the backend."""
    monkeypatch.setattr(Engine, "_produce", log.generator("engine pipeline", Engine._produce))
    monkeypatch.setattr(Admission, "_wait", log.call("turn in line", Admission._wait))
    monkeypatch.setattr(VoiceRegistry, "load", log.call("saved voice read", VoiceRegistry.load))
    monkeypatch.setattr(backend, "stream", log.generator("backend stream", backend.stream))
    monkeypatch.setattr(backend, "create_voice", log.call("backend voice", backend.create_voice))


def stream_speech(url: str, **body: Any) -> bytes:
    """A streaming /v1 request's bytes, read as they come."""
    body = {"input": TEXT, "response_format": "pcm", "stream": True, "seed": 5, **body}
    data = b""
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=300) as response:
        assert response.status_code == 200, response.read()[:300]
        for part in response.iter_bytes():
            data += part
    return data


def load_qwen3() -> Any:
    from tts_core.backends.qwen3 import Qwen3Backend

    return Qwen3Backend.load(str(FIXTURES / "qwen3-tiny-a"), "cpu", quantize="none", max_batch=2)


def load_chatterbox() -> Any:
    from tts_core.backends import load_backend

    tiny = FIXTURES / "chatterbox-turbo-tiny-a"
    return load_backend(str(tiny), "cpu", allow_fallback=False, quantize="none")[0]


@pytest.mark.slow
@pytest.mark.parametrize("load", [load_qwen3, load_chatterbox], ids=["qwen3", "chatterbox"])
def test_a_v1_stream_runs_on_the_event_loop_and_the_model_thread(monkeypatch, tmp_path, load):
    """A model on its engine loop (Chatterbox: its watermark too, on the model thread)."""
    backend = load()
    log = ThreadLog()
    note_request(monkeypatch, log, backend)
    monkeypatch.setattr(BatchEngine, "step", log.call("model step", BatchEngine.step))
    model = backend.model
    monkeypatch.setattr(model, "create_voice", log.call("model voice", model.create_voice))
    try:
        with serve(NotedBody(make_api(Engine(backend), tmp_path), log)) as url:
            data = stream_speech(url, voice="alloy")
    finally:
        backend.loop.close()
    assert len(data) > 0
    loop = log.places["response body"]
    model_thread = log.places["model step"]
    assert len(loop) == 1 and len(model_thread) == 1, log.report()
    assert log.places["model voice"] == model_thread, log.report()  # the clip's voice, too
    for place in (
        "engine pipeline",
        "backend stream",
        "backend voice",
        "turn in line",
        "saved voice read",
    ):
        assert log.places[place] == loop, log.report()
    assert log.threads() == loop | model_thread, log.report()


def test_an_espeak_v1_stream_runs_on_the_event_loop_and_one_synthesis_thread(
    monkeypatch, tmp_path, espeak_backend
):
    """eSpeak computes in its stream (the C library): the request's pipeline runs on one thread
    of its own, which every synthesis call and every step of the pipeline use."""
    log = ThreadLog()
    note_request(monkeypatch, log, espeak_backend)
    library = espeak_backend._lib
    monkeypatch.setattr(library, "synthesize", log.call("synthesis", library.synthesize))
    with serve(NotedBody(make_api(Engine(espeak_backend), tmp_path), log)) as url:
        data = stream_speech(url, voice="alloy", input=TEXT + " " + TEXT)  # two phrases at least
    assert len(data) > 0
    loop = log.places["response body"]
    synthesis = log.places["synthesis"]
    assert len(loop) == 1 and len(synthesis) == 1 and loop != synthesis, log.report()
    for place in ("engine pipeline", "backend stream", "backend voice"):
        assert log.places[place] == synthesis, log.report()
    for place in ("turn in line", "saved voice read"):
        assert log.places[place] == loop, log.report()
    assert log.threads() == loop | synthesis, log.report()


def test_an_espeak_websocket_utterance_runs_on_the_event_loop_and_one_synthesis_thread(
    monkeypatch, tmp_path, espeak_backend
):
    """WebSocket /v1/audio/speech/stream, text in pieces (buffered by eSpeak until done): the
    session, its pieces and its turn on the event loop; the synthesis on one thread."""
    log = ThreadLog()
    note_request(monkeypatch, log, espeak_backend)
    library = espeak_backend._lib
    monkeypatch.setattr(library, "synthesize", log.call("synthesis", library.synthesize))
    with serve(NotedBody(make_api(Engine(espeak_backend), tmp_path), log)) as url:
        config = {"voice": "alloy", "response_format": "pcm"}
        audio, messages = speak(url.removeprefix("http://"), config, ["Two threads, ", TEXT])
    assert len(audio) > 0 and messages[-1]["type"] == "session.done", messages
    loop = log.places["response body"]
    synthesis = log.places["synthesis"]
    assert len(loop) == 1 and len(synthesis) == 1 and loop != synthesis, log.report()
    for place in ("engine pipeline", "backend stream", "backend voice"):
        assert log.places[place] == synthesis, log.report()
    for place in ("turn in line", "saved voice read"):
        assert log.places[place] == loop, log.report()
    assert log.threads() == loop | synthesis, log.report()


@pytest.mark.slow
def test_a_text_fed_qwen3_websocket_utterance_runs_on_the_event_loop_and_the_model_thread(
    monkeypatch, tmp_path
):
    """WebSocket /v1/audio/speech/stream on Qwen3-TTS, which reads the text as it arrives: the
    session, each piece handed to the model's request, the request's waits for more text and
    its pipeline on the event loop; the row (built once the prompt's text is in, before
    input.done: the text really streams), its steps and the voice on the model thread."""
    backend = load_qwen3()
    log = ThreadLog()
    note_request(monkeypatch, log, backend)
    monkeypatch.setattr(backend, "stream_fed", log.generator("backend stream", backend.stream_fed))
    monkeypatch.setattr(FedRequest, "feed", log.call("text piece", FedRequest.feed))
    monkeypatch.setattr(FedRequest, "done", log.call("text piece", FedRequest.done))
    monkeypatch.setattr(BatchEngine, "step", log.call("model step", BatchEngine.step))
    model = backend.model
    monkeypatch.setattr(model, "create_voice", log.call("model voice", model.create_voice))
    share = log.call("model prompt share", model.fed_prefill_tokens)
    monkeypatch.setattr(model, "fed_prefill_tokens", share)
    monkeypatch.setattr(model, "fed_request", log.call("model row", model.fed_request))
    config = {"voice": "alloy", "x_vector_only_mode": True, "response_format": "pcm", "seed": 5}
    pieces = [word + " " for word in TEXT.split(" ")]

    def row_built() -> None:
        until(lambda: bool(log.places.get("model row")), "the row built before input.done")

    try:
        with serve(NotedBody(make_api(Engine(backend), tmp_path), log)) as url:
            host = url.removeprefix("http://")
            audio, messages = speak(host, config, pieces, before_done=row_built)
    finally:
        backend.loop.close()
    assert len(audio) > 0 and messages[-1]["type"] == "session.done", messages
    loop = log.places["response body"]
    model_thread = log.places["model step"]
    assert len(loop) == 1 and len(model_thread) == 1, log.report()
    for place in ("model voice", "model prompt share", "model row"):
        assert log.places[place] == model_thread, log.report()
    for place in (
        "engine pipeline",
        "backend stream",
        "backend voice",
        "text piece",
        "turn in line",
        "saved voice read",
    ):
        assert log.places[place] == loop, log.report()
    assert log.threads() == loop | model_thread, log.report()


class ModelChunks:
    """eSpeak's attributes, but a model's stream: chunks of its own sizes (as Chatterbox's
    token chunks), not eSpeak's independent phrases; the last carries the stop reason."""

    SIZES = (3000, 500, 700, 900)  # samples; the default first event asks for 2 x 1920

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.capabilities = Capabilities()  # one stream: no phrases, no crossfades

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        last = len(self.SIZES) - 1
        for i, size in enumerate(self.SIZES):
            audio = np.full(size, 0.1 * (i + 1), np.float32)
            yield BackendChunk(audio, stop_reason="end" if i == last else None)


def test_a_models_chunks_are_the_events_not_chunked_again(espeak_backend):
    """Re-chunking happens once, where a model needs it: eSpeak's phrase buffers are gathered
    to the request's cadence; a model's chunks (made at its own cadence) are the events as
    they come, the last with the end. (Before: gathered again to first_chunk_frames, so the
    3000 + 500 + 700 samples went out as one event.) Fades off: sizes compare exactly."""
    engine = Engine(ModelChunks(espeak_backend), EngineConfig(fade_ms=0.0, crossfade_ms=0.0))
    events = list(engine.stream(SynthesisRequest("Any text.")))
    assert [event.audio.size for event in events] == list(ModelChunks.SIZES)
    assert [event.final for event in events] == [False, False, False, True]
    assert [event.index for event in events] == [0, 1, 2, 3]
