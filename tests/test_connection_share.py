"""No client holds a connection or a place under the cap for ever (issue #37 M3, M4): a peer that
stops reading is aborted after the send timeout (WebSocket and HTTP); one client address gets
its share of the connection cap, not the whole of it; a request body has a deadline as a
whole, not only between its bytes; Gradio's endless heartbeat streams are bounded per address.

The tests connect from 127.0.0.1, and from 127.0.0.2 as "another visitor" (Linux routes the
whole 127/8 to loopback), with a small per-address share, so the share is what is tested.
Every wait ends on an event (a connection counted out, a socket closed, an answer); the time
limits only decide when a test has failed.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from conftest import start_app, stop_app
from test_speech_ws import _GUARDS, FedRecordingEngine, api_app, guarded_server, until

from tts_core.engine import EngineConfig
from tts_core.server.connections import ConnectionGuard, ConnectionLimits, address_key
from tts_core.server.http_server import STREAMS_PER_ADDRESS

FAIL_AFTER_S = 60
SPEECH = "This sentence keeps the voice busy for a good while, again and again. " * 40
UTTERANCE = "This sentence keeps the voice busy for a good while, again and again. " * 13
OTHER_VISITOR = "127.0.0.2"


def connect(
    host: str, source: str = "127.0.0.1", receive_buffer: int | None = None
) -> socket.socket:
    """A TCP connection to `host` ("name:port") from `source`; a small receive buffer makes
    a peer that does not read fill up fast."""
    name, port = host.split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(FAIL_AFTER_S)
    sock.bind((source, 0))
    sock.connect((name, int(port)))
    return sock


def ws_frame(text: str) -> bytes:
    """A client's masked text frame (RFC 6455)."""
    data, mask = text.encode(), os.urandom(4)
    if len(data) < 126:
        head = struct.pack("!BB", 0x81, 0x80 | len(data))
    else:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, len(data))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def ws_open(host: str, path: str = "/v1/audio/speech/stream", **connect_args) -> socket.socket:  # noqa: ANN003
    """A WebSocket by hand (so that nothing reads it unless the test does): upgraded."""
    sock = connect(host, **connect_args)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def other_visitor() -> httpx.Client:
    return httpx.Client(
        timeout=FAIL_AFTER_S, transport=httpx.HTTPTransport(local_address=OTHER_VISITOR)
    )


@contextmanager
def espeak_server(espeak_backend, tmp_path, limits: ConnectionLimits) -> Iterator[tuple]:
    """(host, its connection guard, engine): eSpeak behind the /v1 routes on our server."""
    engine = FedRecordingEngine(espeak_backend, EngineConfig())
    with guarded_server(api_app(engine, tmp_path), limits) as host:
        yield host, _GUARDS[host], engine


# ---------------------------------------------------------------- M3: peers that do not read
def test_a_websocket_client_that_never_reads_is_aborted(espeak_backend, tmp_path, caplog) -> None:
    """A session's audio (MBs of PCM) to a client that reads nothing: past the send timeout
    the server aborts the connection, so it leaves the count and the slot comes back (before:
    ~3.8 MB stayed queued and the socket ESTABLISHED for good, holding its place)."""
    limits = ConnectionLimits(send_timeout_s=1.0)
    with espeak_server(espeak_backend, tmp_path, limits) as (host, guard, engine):
        sock = ws_open(host, receive_buffer=4096)
        config = {"type": "session.config", "voice": "alloy", "response_format": "pcm"}
        sock.sendall(ws_frame(json.dumps(config)))
        for _ in range(4):  # ~7 MB of PCM, past the kernel's buffers; each under 1000 characters
            for message in ({"type": "input.text", "text": UTTERANCE}, {"type": "input.done"}):
                sock.sendall(ws_frame(json.dumps(message)))
        until(lambda: engine.active_requests == 1, "the utterance running")
        until(lambda: guard.open == 0, "the connection aborted and counted out")
        until(lambda: engine.active_requests == 0, "the slot given back")
        assert "aborted: a peer stopped reading" in caplog.text  # not closed for another reason
        sock.close()


def test_an_http_client_that_never_reads_a_stream_is_aborted(
    espeak_backend, tmp_path, caplog
) -> None:
    limits = ConnectionLimits(send_timeout_s=1.0)
    with espeak_server(espeak_backend, tmp_path, limits) as (host, guard, engine):
        body = json.dumps(
            {"input": SPEECH, "voice": "alloy", "response_format": "pcm", "stream_format": "audio"}
        ).encode()
        sock = connect(host, receive_buffer=4096)
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\ncontent-type: "
            b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
        )
        until(lambda: engine.active_requests == 1, "the request running")
        until(lambda: guard.open == 0, "the connection aborted and counted out")
        until(lambda: engine.active_requests == 0, "the slot given back")
        assert "aborted: a peer stopped reading" in caplog.text  # not closed for another reason
        sock.close()


def test_a_slow_reader_that_keeps_reading_is_not_aborted(espeak_backend, tmp_path) -> None:
    """A whole WAV written at once to a client reading ~1 MB/s: the write buffer stays above
    its high-water mark for seconds, far past the 1 s send timeout, but shrinks between two
    checks, so the client gets every byte (a timeout on the pause alone cut it off)."""
    limits = ConnectionLimits(send_timeout_s=1.0)
    with espeak_server(espeak_backend, tmp_path, limits) as (host, guard, _engine):
        body = json.dumps(
            {"input": SPEECH, "voice": "alloy", "response_format": "wav", "stream": False}
        ).encode()
        with connect(host, receive_buffer=65536) as sock:
            sock.sendall(
                b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\ncontent-type: "
                b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (host.encode(), len(body), body)
            )
            received = b""
            while b"\r\n\r\n" not in received:
                received += sock.recv(65536)
            head, _, audio = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            assert length > 4 * 1024 * 1024  # more than the kernel's buffers take at once
            stop = threading.Event()
            while len(audio) < length:
                chunk = sock.recv(65536)
                assert chunk, f"cut off after {len(audio)} of {length} bytes"
                audio += chunk
                stop.wait(0.05)  # pacing the reader: ~1 MB/s
        assert guard.open <= 1


# ---------------------------------------------------------------- M4: a share per address
def test_an_address_gets_its_share_and_other_visitors_keep_theirs(espeak_backend, tmp_path) -> None:
    """Share 3: three WebSockets (busy) from one address, a fourth from it is refused (503),
    while another visitor's connection is admitted and answered; an idle connection of the
    busy address makes room for that address's own new request, not another visitor's."""
    limits = ConnectionLimits(max_per_address=3)
    with espeak_server(espeak_backend, tmp_path, limits) as (host, guard, _engine):
        held = [ws_open(host) for _ in range(3)]
        until(lambda: guard.by_address.get("127.0.0.1") == 3, "three counted")
        with connect(host) as fourth:
            assert fourth.recv(100).startswith(b"HTTP/1.1 503")
        with other_visitor() as client:
            answer = client.get(f"http://{host}/v1/models")
        assert answer.status_code == 200
        held.pop().close()
        until(lambda: guard.by_address.get("127.0.0.1") == 2, "one given back")
        idle_own = connect(host)  # the third place: a connection that sends nothing
        idle_other = connect(host, source=OTHER_VISITOR)
        until(lambda: len(guard.waiting) == 2, "both idle connections counted")
        assert httpx.get(f"http://{host}/v1/models", timeout=FAIL_AFTER_S).status_code == 200
        assert idle_own.recv(100).startswith(b"HTTP/1.1 408")  # closed to make room
        assert guard.by_address.get(address_key(OTHER_VISITOR)) == 1  # kept its place
        for sock in (*held, idle_own, idle_other):
            sock.close()


def test_an_ipv6_client_counts_by_its_64() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9")
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:10.0.0.7") == address_key("10.0.0.7") == "10.0.0.7"


def test_the_share_makes_room_from_the_address_itself() -> None:
    """Unit: at its share, an address's own oldest idle connection is closed (not the oldest
    of all, another visitor's); when it has none idle, the new one is refused."""

    class Fake:
        def __init__(self, address: str) -> None:
            self.address, self.closed = address, False

        def close_idle(self) -> None:
            self.closed = True

    guard = ConnectionGuard(ConnectionLimits(max_per_address=2), max_connections=100)
    other, mine_idle, mine_busy = Fake("b"), Fake("a"), Fake("a")
    for fake in (other, mine_idle, mine_busy):
        assert guard.admit(fake, fake.address)  # type: ignore[arg-type]
    guard.waiting.update({other: None, mine_idle: None})  # type: ignore[dict-item]
    assert guard.admit(Fake("a"), "a")  # type: ignore[arg-type]
    assert mine_idle.closed and not other.closed and not mine_busy.closed
    guard.left(mine_idle, "a")
    assert not guard.admit(Fake("a"), "a")  # type: ignore[arg-type] - both busy
    assert guard.admit(Fake("c"), "c")  # type: ignore[arg-type]


def test_a_trusted_proxy_is_not_bound_by_one_addresss_share() -> None:
    """Behind a reverse proxy (FORWARDED_ALLOW_IPS set, as the README says) every visitor's
    connection comes from the proxy's address: it is not held to one client's share."""
    from tts_core.server.http_server import proxies_share

    limits = proxies_share(ConnectionLimits(max_per_address=1), "10.0.0.0/8, 192.0.2.1")
    guard = ConnectionGuard(limits, max_connections=100)
    busy = [object() for _ in range(3)]
    assert all(guard.admit(p, "10.1.2.3") for p in busy)  # type: ignore[arg-type]
    assert all(guard.admit(p, "192.0.2.1") for p in busy)  # type: ignore[arg-type]
    assert guard.admit(object(), "203.0.113.9")  # type: ignore[arg-type]
    assert not guard.admit(object(), "203.0.113.9")  # type: ignore[arg-type] - its share
    everyone = ConnectionGuard(proxies_share(ConnectionLimits(max_per_address=1), "*"), 100)
    assert all(everyone.admit(p, "203.0.113.9") for p in busy)  # type: ignore[arg-type]
    assert proxies_share(ConnectionLimits(), "") == ConnectionLimits()


def test_a_trickled_body_is_closed_at_the_whole_body_deadline(espeak_backend, tmp_path) -> None:
    """A byte every 0.1 s keeps the 1 s pause deadline from firing; the whole body's 2 s
    deadline closes it anyway (before: held as long as the bytes came)."""
    limits = ConnectionLimits(body_idle_timeout_s=1.0, body_timeout_s=2.0)
    with espeak_server(espeak_backend, tmp_path, limits) as (host, guard, _engine):
        sock = connect(host)
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\ncontent-length: 100000\r\n"
            b"content-type: application/json\r\n\r\n{" % host.encode()
        )
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.1):
                try:
                    sock.send(b" ")
                except OSError:
                    return

        threading.Thread(target=trickle, daemon=True).start()
        try:
            until(lambda: guard.open == 0, "the connection closed at the body deadline")
        finally:
            stop.set()
            sock.close()


# ---------------------------------------------------------------- M4: endless streams
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url, process, log_path = start_app(tmp_path_factory.mktemp("share"), "--model", "espeak")
    yield url, log_path
    stop_app(process)


def test_the_served_app_bounds_heartbeat_streams_per_address(served) -> None:
    """Gradio's /gradio_api/heartbeat/<any> streams until the client leaves: one address gets
    STREAMS_PER_ADDRESS of them at once, then 429; another visitor still gets its own."""
    url, _ = served
    with (
        httpx.Client(timeout=FAIL_AFTER_S) as own,
        httpx.Client(
            timeout=FAIL_AFTER_S, transport=httpx.HTTPTransport(local_address=OTHER_VISITOR)
        ) as other,
    ):
        streams = []
        try:
            for i in range(STREAMS_PER_ADDRESS):
                request = own.build_request("GET", f"{url}/gradio_api/heartbeat/h{i}")
                streams.append(own.send(request, stream=True))
                assert streams[-1].status_code == 200
            request = own.build_request("GET", f"{url}/gradio_api/heartbeat/one-more")
            streams.append(own.send(request, stream=True))  # before: one more endless stream
            assert streams[-1].status_code == 429 and streams[-1].headers["retry-after"]
            request = other.build_request("GET", f"{url}/gradio_api/heartbeat/visitor")
            visitor = other.send(request, stream=True)
            assert visitor.status_code == 200
            visitor.close()
        finally:
            for stream in streams:
                stream.close()
