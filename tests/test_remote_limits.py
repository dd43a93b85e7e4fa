"""`--model http://…/v1` in front of a misbehaving remote (issue #37 M8, L1): a fake server on
loopback that sends huge bodies, endless lines, endless audio, HTML, absurd numbers. The
front reads every body with a byte bound, checks the content type, caps the audio of a request
and clamps or refuses the remote's numbers.

How much the fake could send before the front closed is what it wrote into the socket: what
the front read, plus at most the kernel's buffers (loopback: tcp_rmem's max, 32 MB here, and
tcp_wmem's, 4 MB). Bodies are 128 MB, so "far less than all" is "under 48 MB". Every wait
ends on an event (the fake's writer stops when the socket breaks or the body ends).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from tts_core.backends.remote import MAX_CONCURRENT, MAX_RETRY_AFTER_S, RemoteBackend
from tts_core.engine import BackendError, EngineBusy, SynthesisParams
from tts_core.engine.backend import Voice

FAIL_AFTER_S = 60
HUGE = 128 << 20  # a body the front must not read whole
FAR_LESS = 48 << 20  # what the front read + the kernel's buffers (module docstring)
CHUNK = 64 << 10
RATE = 24_000


@dataclass
class Script:
    """What the fake remote answers: its model list, and POST /audio/speech's answer."""

    models: Callable[[Fake], None]
    speech: Callable[[Fake], None] | None = None
    sent: int = 0  # bytes of the last body written into the socket
    finished: threading.Event = field(default_factory=threading.Event)


class Fake(http.server.BaseHTTPRequestHandler):
    script: Script  # set by the fixture
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.script.models(self)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", 0)))
        assert self.script.speech is not None
        self.script.speech(self)

    def head(self, status: int, media: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("content-type", media)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("connection", "close")
        self.end_headers()

    def body(self, chunks: Iterator[bytes]) -> None:
        """Write `chunks` until they end or the front closes; record how much went out."""
        self.script.sent = 0
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.script.sent += len(chunk)
        except OSError:  # the front closed: a reset or a broken pipe
            pass
        finally:
            self.script.finished.set()
            self.close_connection = True

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


def repeated(byte: bytes, total: int) -> Iterator[bytes]:
    block = byte * CHUNK
    for _ in range(total // CHUNK):
        yield block


def listing(info: dict | None = None) -> Callable[[Fake], None]:
    def answer(handler: Fake) -> None:
        data = json.dumps({"object": "list", "data": [{"id": "fake", "info": info or {}}]})
        handler.head(200, "application/json", content_length=str(len(data)))
        handler.body(iter([data.encode()]))

    return answer


@pytest.fixture()
def fake_remote() -> Iterator[Callable[[Script], str]]:
    """fake_remote(script) -> the base URL (…/v1) of a fake server answering by `script`."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(script: Script) -> str:
        handler = type("ScriptedFake", (Fake,), {"script": script})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def speak(backend: RemoteBackend, text: str = "Hello there.") -> int:
    """Samples of one request's audio (the errors raised as they come)."""
    voice = Voice(backend.name, None, {})
    chunks = backend.stream(text, voice, SynthesisParams("english"), threading.Event())
    return sum(len(chunk.audio) for chunk in chunks)


def test_an_error_body_is_read_up_to_a_bound(fake_remote) -> None:
    """A 500 with a 128 MB body: the error names the status; the body is not read on (before
    the fix all of it was read into memory: 400 MB took the process to 1.3 GB)."""

    def huge_error(handler: Fake) -> None:
        handler.head(500, "text/plain", content_length=str(HUGE))
        handler.body(repeated(b"x", HUGE))

    script = Script(listing(), huge_error)
    backend = RemoteBackend.connect(fake_remote(script))
    with pytest.raises(BackendError, match="answered 500"):
        speak(backend)
    assert script.finished.wait(FAIL_AFTER_S)
    assert script.sent < FAR_LESS, script.sent


def test_an_event_line_without_an_end_is_cut(fake_remote) -> None:
    """SSE: a `data:` line of 128 MB with no newline is a BackendError once it passes the
    line bound (before the fix: read whole, 2.25 GB, then a JSON traceback)."""

    def endless_line(handler: Fake) -> None:
        handler.head(200, "text/event-stream")
        handler.body(iter([b"data: ", *repeated(b"A", HUGE)]))

    script = Script(listing(), endless_line)
    backend = RemoteBackend.connect(fake_remote(script), stream_format="sse")
    with pytest.raises(BackendError, match="event line of more than"):
        speak(backend)
    assert script.finished.wait(FAIL_AFTER_S)
    assert script.sent < FAR_LESS, script.sent


def test_a_huge_model_list_is_refused_at_start(fake_remote) -> None:
    def huge_listing(handler: Fake) -> None:
        handler.head(200, "application/json", content_length=str(HUGE))
        handler.body(iter([b'{"data": "', *repeated(b"x", HUGE)]))

    script = Script(huge_listing)
    with pytest.raises(BackendError, match="model list of more than"):
        RemoteBackend.connect(fake_remote(script))
    assert script.finished.wait(FAIL_AFTER_S)
    assert script.sent < FAR_LESS, script.sent


def test_the_audio_of_a_request_is_capped(fake_remote) -> None:
    """ "Hello there." and 300 s of audio: the front stops at max_audio_s (30 s: MIN_AUDIO_S)
    with a BackendError (before the fix: all 289 s were played)."""

    def endless_audio(handler: Fake) -> None:
        handler.head(200, "audio/pcm")
        handler.body(repeated(b"\x01", 300 * RATE * 2))

    script = Script(listing(), endless_audio)
    backend = RemoteBackend.connect(fake_remote(script))
    limit = backend.max_audio_s("Hello there.")
    assert limit == 30.0
    heard = 0
    with pytest.raises(BackendError, match="more than 30 s of audio"):
        voice = Voice(backend.name, None, {})
        for chunk in backend.stream(
            "Hello there.", voice, SynthesisParams("english"), threading.Event()
        ):
            heard += len(chunk.audio)
    assert heard <= limit * RATE


@pytest.mark.parametrize(
    ("media", "stream_format"),
    [("text/html", "audio"), ("application/json", "audio"), ("audio/pcm", "sse")],
)
def test_an_answer_that_is_not_audio_is_refused(fake_remote, media, stream_format) -> None:
    def page(handler: Fake) -> None:
        data = b"<html><body>Hello</body></html>"
        handler.head(200, media, content_length=str(len(data)))
        handler.body(iter([data]))

    backend = RemoteBackend.connect(
        fake_remote(Script(listing(), page)), stream_format=stream_format
    )
    with pytest.raises(BackendError, match=f"answered {media}, not"):
        speak(backend)


@pytest.mark.parametrize(
    ("said", "passed_on"),
    [
        ("99999999999999999999", MAX_RETRY_AFTER_S),
        ("0", 1),
        ("7", 7),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 5),
    ],
)
def test_the_remotes_retry_after_is_clamped(fake_remote, said, passed_on) -> None:
    def busy(handler: Fake) -> None:
        data = json.dumps({"error": {"message": "busy"}}).encode()
        handler.head(503, "application/json", retry_after=said, content_length=str(len(data)))
        handler.body(iter([data]))

    backend = RemoteBackend.connect(fake_remote(Script(listing(), busy)))
    with pytest.raises(EngineBusy) as raised:
        speak(backend)
    assert raised.value.retry_after_s == passed_on


def test_the_remotes_concurrency_is_clamped(fake_remote) -> None:
    backend = RemoteBackend.connect(fake_remote(Script(listing({"max_concurrent": 100_000}))))
    assert backend.default_concurrency == MAX_CONCURRENT


@pytest.mark.parametrize(
    "info",
    [
        {"sample_rate": 0},
        {"sample_rate": -5},
        {"sample_rate": 24000.5},
        {"sample_rate": "24k"},
        {"sample_rate": 10**9},
        {"frame_ms": 0},
        {"frame_ms": -80},
        {"max_concurrent": 0},
    ],
)
def test_the_remotes_absurd_numbers_refuse_it_at_start(fake_remote, info) -> None:
    """A rate of 0 was a ZeroDivisionError traceback later; -5 was accepted."""
    (name,) = info
    with pytest.raises(BackendError, match=f"unusable model list: '{name}' must be"):
        RemoteBackend.connect(fake_remote(Script(listing(info))))


def test_a_well_behaved_fake_still_speaks(fake_remote) -> None:
    """The bounds leave a normal answer alone: raw PCM in odd-sized chunks, every sample."""
    samples = np.arange(-1000, 1000, dtype="<i2").tobytes()

    def answer(handler: Fake) -> None:
        handler.head(200, "audio/pcm", x_sample_rate=str(RATE))
        handler.body(iter([samples[:333], samples[333:]]))

    backend = RemoteBackend.connect(fake_remote(Script(listing({"sample_rate": RATE}), answer)))
    assert speak(backend) == 2000
