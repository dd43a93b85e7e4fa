"""The OpenAI-compatible speech API over real HTTP (uvicorn on 127.0.0.1) with the eSpeak engine.

Streaming, formats, errors, the busy limit and client disconnects. `PacedBackend` wraps the
real eSpeak backend and releases its audio no faster than a few times real time, like a neural
model would, so that "before generation ends" and "mid-stream" are observable.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import HANG_S, GatedBackend

from tts_core.audio import SAMPLE_RATE
from tts_core.engine import Engine, EngineConfig, Limits, SynthesisRequest
from tts_core.server.text_split import split_text

TEXT = "Hello there. This is a test of the streaming speech endpoint, spoken by eSpeak."
LONG_TEXT = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 12)
ERROR_KEYS = {"message", "type", "param", "code"}


class PacedBackend:
    """The real eSpeak backend, but each piece waits until `speedup` x real time allows it."""

    def __init__(self, inner, speedup: float) -> None:  # noqa: ANN001 - EspeakBackend
        self._inner = inner
        self.speedup = speedup

    def __getattr__(self, name: str):  # noqa: ANN204 - delegate the Backend attributes
        return getattr(self._inner, name)

    def stream(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        start, produced = time.perf_counter(), 0
        for piece in self._inner.stream(text, voice, params, cancel):
            produced += piece.audio.size
            delay = start + produced / SAMPLE_RATE / self.speedup - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            yield piece


class RecordingEngine(Engine):
    """The real engine, remembering what each request produced and when it ended."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.runs: list[dict] = []

    def stream(self, request: SynthesisRequest, cancel: threading.Event | None = None):  # noqa: ANN201
        cancel = cancel or threading.Event()
        events = super().stream(request, cancel)
        record = {"samples": 0, "stats": None, "cancel": cancel, "ended": None}
        self.runs.append(record)
        return self._recorded(events, record)

    @staticmethod
    def _recorded(events, record: dict) -> Iterator:  # noqa: ANN001
        try:
            for event in events:
                record["samples"] += event.audio.size
                record["stats"] = event.stats
                yield event
        finally:
            events.close()
            record["ended"] = time.perf_counter()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(app) -> Iterator[str]:  # noqa: ANN001 - an ASGI app
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_S  # a hang guard: it starts in well under a second
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def make_api(engine: Engine, voices_dir: Path, **config):  # noqa: ANN003, ANN201 - FastAPI
    from fastapi import FastAPI

    from tts_core.server import ApiConfig, VoiceRegistry, install_routes

    app = FastAPI()
    install_routes(app, engine, VoiceRegistry(voices_dir), ApiConfig(**config))
    return app


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def parse_streamed_wav(data: bytes, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The int16 samples of a streamed WAV, after checking its header field by field."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE" and data[12:16] == b"fmt "
    fmt, channels, rate, byte_rate, _align, bits = struct.unpack("<HHIIHH", data[20:36])
    assert (fmt, channels, rate, bits, byte_rate) == (1, 1, sample_rate, 16, 2 * sample_rate)
    assert data[36:40] == b"data" and struct.unpack("<I", data[40:44])[0] == 0xFFFFFFFF
    return np.frombuffer(data[44:], dtype="<i2")


@pytest.fixture(scope="module")
def api(espeak_backend, tmp_path_factory):
    """(base url, engine): paced eSpeak at 6x real time, two slots, eight may wait."""
    config = EngineConfig(max_concurrent=2, max_queue=8)
    engine = RecordingEngine(PacedBackend(espeak_backend, 6.0), config)
    app = make_api(engine, tmp_path_factory.mktemp("voices"))
    with serve(app) as url:
        yield url, engine


def speech(url: str, **body) -> httpx.Response:  # noqa: ANN003
    return httpx.post(f"{url}/v1/audio/speech", json={"model": "tts-1", **body}, timeout=60)


@pytest.fixture()
def gated_api(espeak_backend, tmp_path):
    """(base url, engine, backend): eSpeak held after its first chunks until backend.gate is
    set (conftest.GatedBackend); the gate opens at the end."""
    backend = GatedBackend(espeak_backend)
    engine = RecordingEngine(backend, EngineConfig(max_concurrent=2))
    with serve(make_api(engine, tmp_path / "voices")) as url:
        try:
            yield url, engine, backend
        finally:
            backend.gate.set()


def test_wav_streams_before_generation_ends_and_has_the_engine_length(gated_api):
    """The first bytes come while the synthesis is held (the gate opens only once they are
    here): a response made whole before it is sent never gets past its hang detector."""
    url, engine, backend = gated_api
    body = {
        "model": "tts-1",
        "input": TEXT,
        "voice": "alloy",
        "response_format": "wav",
        "stream_format": "audio",
    }
    data = b""
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=HANG_S) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/wav"
        assert response.headers.get("transfer-encoding") == "chunked"
        for part in response.iter_bytes():
            if not backend.gate.is_set():
                assert engine.runs[-1]["ended"] is None  # generation still held
                backend.gate.set()
            data += part
    run = engine.runs[-1]
    samples = parse_streamed_wav(data)
    assert samples.size == run["samples"] and run["stats"]["done"]
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")  # libsndfile accepts the open size
    assert rate == SAMPLE_RATE and np.array_equal(audio, samples)
    assert np.abs(samples).max() > 1000  # speech, not silence


def test_a_wav_sent_whole_has_its_real_sizes_and_a_content_length(api):
    """`stream: false`: what `curl -o` and `soxi` need (a streamed WAV says "until the end")."""
    url, engine = api
    response = speech(url, input=TEXT, voice="alloy", response_format="wav", stream=False)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    samples = engine.runs[-1]["samples"]
    assert int(response.headers["content-length"]) == len(response.content) == 44 + 2 * samples
    data = response.content
    assert int.from_bytes(data[4:8], "little") == 36 + 2 * samples
    assert int.from_bytes(data[40:44], "little") == 2 * samples
    assert sf.info(io.BytesIO(data)).frames == samples


def test_a_wav_not_asked_to_stream_is_sent_whole_so_a_saved_file_reads_right(api, tmp_path):
    """Regression (issue 36): the OpenAI SDK's `stream_to_file("hello.wav")` sends no `stream`
    field; the WAV it saved was streamed, and its placeholder sizes made Python's `wave` read
    it as 24 h 51 min. Asked for nothing, a WAV is now sent whole with its real sizes; other
    formats, and a WAV asked to stream, still stream (chunked)."""
    import wave

    url, engine = api
    response = speech(url, input=TEXT, voice="alloy", response_format="wav")
    assert response.status_code == 200 and "content-length" in response.headers
    saved = tmp_path / "hello.wav"
    saved.write_bytes(response.content)
    samples = engine.runs[-1]["samples"]
    with wave.open(str(saved)) as clip:
        assert (clip.getnframes(), clip.getframerate()) == (samples, SAMPLE_RATE)
    for body in (
        {"response_format": "pcm"},
        {"response_format": "wav", "stream": True, "stream_format": "audio"},
    ):
        streamed = speech(url, input=TEXT, voice="alloy", **body)
        assert streamed.headers.get("transfer-encoding") == "chunked", body


def test_a_client_gone_before_a_whole_response_stops_the_generation(held_backend, tmp_path):
    """The synthesis trickles after its first second until its cancel (conftest.HeldBackend),
    so the file is still being made when the client gives up, however slow the machine; what
    it made after the cancel is counted, not timed."""
    engine = RecordingEngine(held_backend, EngineConfig(max_concurrent=2))
    body = {
        "model": "tts-1",
        "input": LONG_TEXT,
        "voice": "alloy",
        "response_format": "wav",
        "stream": False,
    }
    with serve(make_api(engine, tmp_path / "voices")) as url:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up while the file is made
            httpx.post(f"{url}/v1/audio/speech", json=body, timeout=httpx.Timeout(HANG_S, read=1.0))
        wait_until(lambda: engine.runs and engine.runs[-1]["ended"] is not None, HANG_S)
        run, held = engine.runs[-1], held_backend.runs[-1]
        assert run["cancel"].is_set()
        assert held.cancelled.is_set(), "it ended without the client's leaving cancelling it"
        assert held.after_cancel <= 1  # no more audio made after the cancel (one in flight)
        wait_until(lambda: engine.active_requests == 0, HANG_S)


def test_pcm_is_raw_int16_of_the_engine_length(api):
    url, engine = api
    response = speech(url, input=TEXT, voice={"id": "nova"}, response_format="pcm")
    assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
    assert len(response.content) == 2 * engine.runs[-1]["samples"]
    pcm = np.frombuffer(response.content, dtype="<i2")
    assert np.abs(pcm).max() > 1000


def test_voice_default_is_the_models_own_voice_without_a_clip(api):
    """eSpeak without a clip speaks its default voice; a named voice is cloned from its clip."""
    url, engine = api
    assert speech(url, input=TEXT, voice="default", response_format="pcm").status_code == 200
    assert engine.runs[-1]["stats"]["voice"]["ref_f0_hz"] is None  # nothing measured: no clip
    assert speech(url, input=TEXT, voice="nova", response_format="pcm").status_code == 200
    assert engine.runs[-1]["stats"]["voice"]["ref_f0_hz"] is not None


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac", "aac"])
def test_compressed_formats_decode_to_the_engine_duration(api, fmt):
    from tts_core.audio.ffmpeg import ffmpeg_executable

    url, engine = api
    response = speech(
        url, input="Hello there, compressed audio.", voice="echo", response_format=fmt
    )
    assert response.status_code == 200, response.text
    decode = [
        ffmpeg_executable(),
        "-v",
        "error",
        "-i",
        "pipe:0",
        "-f",
        "s16le",
        "-ac",
        "1",
        "-ar",
        str(SAMPLE_RATE),
        "pipe:1",
    ]
    pcm = subprocess.run(decode, input=response.content, capture_output=True, check=True).stdout
    expected = engine.runs[-1]["samples"] / SAMPLE_RATE
    assert abs(len(pcm) / 2 / SAMPLE_RATE - expected) < 0.1  # priming + last-frame padding


def test_sse_events_carry_the_pcm_then_done_with_stats(api):
    url, engine = api
    response = speech(url, input=TEXT, voice="sage", response_format="pcm", stream_format="sse")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(audio) == 2 * engine.runs[-1]["samples"]
    assert events[-1]["stats"]["done"] is True


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"voice": "alloy"}, 400, "input"),
        ({"input": "   ", "voice": "alloy"}, 400, "input"),
        ({"input": "hi"}, 400, "voice"),
        ({"input": "hi", "voice": "no-such-voice"}, 404, "voice"),
        ({"input": "x" * 4097, "voice": "alloy"}, 413, "input"),
        ({"input": "hi", "voice": "alloy", "response_format": "ogg"}, 400, "response_format"),
        ({"input": "hi", "voice": "alloy", "stream_format": "chunks"}, 400, "stream_format"),
        ({"input": "hi", "voice": "alloy", "speed": 2.0}, 400, "speed"),
        ({"input": "hi", "voice": "alloy", "language": "klingon"}, 400, None),
        ({"input": "hi", "voice": "alloy", "temperature": -1}, 400, "temperature"),
        # every known model's knobs are checked, whichever is served (here eSpeak)
        ({"input": "hi", "voice": "alloy", "top_k": 2.5}, 400, "top_k"),
        ({"input": "hi", "voice": "alloy", "cfg_value": "strong"}, 400, "cfg_value"),
        ({"input": "hi", "voice": "alloy", "seed": True}, 400, "seed"),
        ({"input": "hi", "voice": "alloy", "seed": 1.5}, 400, "seed"),
        ({"input": "hi", "voice": "alloy", "first_chunk_frames": 0}, 400, "first_chunk_frames"),
    ],
)
def test_bad_requests_get_openai_errors(api, body, status, param):
    assert_error(speech(api[0], **body), status, param)


def test_body_that_is_not_json_is_a_400(api):
    response = httpx.post(
        f"{api[0]}/v1/audio/speech",
        content=b"{not json",
        timeout=10,
        headers={"Content-Type": "application/json"},
    )
    assert_error(response, 400)


def test_input_longer_than_the_engine_limit_is_split(espeak_backend, tmp_path):
    engine = RecordingEngine(espeak_backend, EngineConfig(limits=Limits(max_chars=80)))
    with serve(make_api(engine, tmp_path)) as url:
        response = speech(url, input=LONG_TEXT, voice="alloy", response_format="pcm")
    assert response.status_code == 200, response.text
    assert len(engine.runs) == len(split_text(LONG_TEXT, 80)) > 1
    assert len(response.content) == 2 * sum(run["samples"] for run in engine.runs)


INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u200e\x07\x7f"  # zero-width, BOM, LRM, BEL, DEL


def test_invisible_characters_at_a_split_point_keep_the_request_valid(espeak_backend, tmp_path):
    """Regression: a long input was cut before control and zero-width characters were removed,
    so a piece made only of them was refused (400 "Please enter some text to speak") and with
    it the whole valid request."""
    first = "The first sentence is long enough to fill most of one piece on its own."
    second = "The second sentence comes after a long run of invisible characters."
    text = f"{first} {INVISIBLE * 25} {second}"  # 200 invisible characters between them
    engine = RecordingEngine(espeak_backend, EngineConfig(limits=Limits(max_chars=80)))
    with serve(make_api(engine, tmp_path)) as url:
        response = speech(url, input=text, voice="alloy", response_format="pcm")
        blank = speech(url, input=f" {INVISIBLE * 3}\n", voice="alloy", response_format="pcm")
    assert response.status_code == 200, response.text
    assert [run["stats"]["done"] for run in engine.runs] == [True, True]  # one per sentence
    assert len(response.content) == 2 * sum(run["samples"] for run in engine.runs) > 0
    assert_error(blank, 400, "input")  # nothing visible at all: still "input must not be empty"


def test_split_text_cleans_like_the_engine_and_gives_no_invisible_piece():
    from tts_core.engine.validation import printable

    text = f"One. {INVISIBLE * 9}\tTwo\u200b words. " + "x" * 25 + f" {INVISIBLE}"
    pieces = split_text(text, 20)
    assert pieces == ["One. Two words.", "x" * 20, "x" * 5]
    assert all(printable(piece) == piece for piece in pieces)
    assert split_text(INVISIBLE * 9, 20) == [] and split_text(INVISIBLE, 20) == []


def test_busy_engine_answers_503_then_recovers(espeak_backend, tmp_path):
    config = EngineConfig(max_concurrent=1, max_queue=0)
    engine = RecordingEngine(PacedBackend(espeak_backend, 3.0), config)
    body = {"input": LONG_TEXT, "voice": "alloy", "response_format": "pcm"}
    with serve(make_api(engine, tmp_path)) as url:
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as first:
            chunks = first.iter_bytes()  # kept referenced: a dropped iterator closes the stream
            next(chunks)  # the one slot is now taken
            busy = speech(url, input="hi", voice="alloy", response_format="pcm")
            assert_error(busy, 503)
            assert busy.headers.get("retry-after")
        wait_until(lambda: engine.active_requests == 0, 60)
        assert speech(url, input="hi", voice="alloy", response_format="pcm").status_code == 200


def test_client_disconnect_stops_the_generation(api):
    url, engine = api
    body = {"input": LONG_TEXT, "voice": "alloy", "response_format": "pcm"}
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as response:
        next(response.iter_bytes())
    run = engine.runs[-1]
    wait_until(lambda: run["ended"] is not None, 60)
    assert run["cancel"].is_set()
    full = len(LONG_TEXT) / 15 * SAMPLE_RATE  # ~15 characters per second of eSpeak speech
    assert run["samples"] < 0.5 * full
    wait_until(lambda: engine.active_requests == 0, 60)


def test_models_and_voices_are_listed(api):
    url, _ = api
    models = httpx.get(f"{url}/v1/models", timeout=10).json()
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= {m["id"] for m in models["data"]}
    voices = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["data"]
    stock = {
        "alloy",
        "ash",
        "ballad",
        "coral",
        "echo",
        "fable",
        "onyx",
        "nova",
        "sage",
        "shimmer",
        "verse",
    }
    assert stock <= {v["id"] for v in voices if v["kind"] == "builtin"}


def test_routes_work_on_a_launched_gradio_app(engine, tmp_path):
    import gradio as gr

    from tts_core.server import VoiceRegistry, install_routes

    with gr.Blocks() as demo:
        gr.Markdown("speech API next to a Gradio page")
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    try:
        install_routes(demo.app, engine, VoiceRegistry(tmp_path))
        response = speech(
            url.rstrip("/"),
            input="Hello from Gradio.",
            voice="coral",
            response_format="wav",
            stream_format="audio",
        )
        assert response.status_code == 200
        assert parse_streamed_wav(response.content).size > SAMPLE_RATE // 2
        assert httpx.get(f"{url}gradio_api/info", timeout=10).status_code == 200
    finally:
        demo.close()


def wait_until(condition, timeout_s: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_split_text_keeps_every_word_and_prefers_sentence_ends():
    text = "One two three. Four five six seven! " + "x" * 25 + " eight nine."
    pieces = split_text(text, 20)
    assert all(len(p) <= 20 for p in pieces)
    assert " ".join(pieces).replace(" ", "") == text.replace(" ", "")
    assert pieces[0] == "One two three."
    assert split_text("short", 20) == ["short"]


def test_requests_waiting_in_line_do_not_hold_the_shared_pool(espeak_backend, tmp_path):
    """Regression: the first event was fetched on asyncio's shared pool (cpu + 4 threads), where
    requests waiting for their turn could take every thread while the head of the line, queued
    behind them, never ran (a deadlock seen with 16 clients on 2 cores). Waiting requests now
    hold no thread at all: their wait for a turn is awaited on the event loop (awaiting.py)."""
    engine = RecordingEngine(
        PacedBackend(espeak_backend, 3.0), EngineConfig(max_concurrent=1, max_queue=4)
    )
    body = {"input": LONG_TEXT, "voice": "alloy", "response_format": "pcm"}
    with serve(make_api(engine, tmp_path)) as url:
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as first:
            chunks = first.iter_bytes()  # kept referenced: a dropped iterator closes the stream
            next(chunks)  # the one slot is now taken
            results: dict[int, int] = {}

            def client(i: int) -> None:
                short = {**body, "input": f"Number {i}."}
                results[i] = httpx.post(
                    f"{url}/v1/audio/speech", json=short, timeout=60
                ).status_code

            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(3)]
            for thread in threads:
                thread.start()
            wait_until(lambda: engine.waiting_requests == 3, 10)  # each in line
            names = _threads_in_admission_wait()
            assert names == [], names  # no thread blocked in the line (was: one each)
        for thread in threads:
            thread.join(timeout=60)
        assert results == {0: 200, 1: 200, 2: 200}


def _threads_in_admission_wait() -> list[str]:
    """The names of the threads waiting for a turn in the engine's line now."""
    return [
        threading._active[ident].name
        for ident, frame in sys._current_frames().items()
        if ident in threading._active and _in_admission_wait(frame)
    ]


def _in_admission_wait(frame) -> bool:  # noqa: ANN001 - a frame object
    while frame is not None:
        if frame.f_code.co_name == "_wait" and frame.f_code.co_filename.endswith("admission.py"):
            return True
        frame = frame.f_back
    return False
