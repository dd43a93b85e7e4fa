"""The production server (`app.py` -> tts_core.server.http_server): connections that never
finish a request are closed, the open-files limit cannot be exhausted by idle sockets, SIGTERM
drains and exits 0, an unknown Gradio event is a 404.

Every wait here ends on an event (a socket closing, a log line, the process exiting); the
time limits only decide when a test has failed, and are many times what the work needs.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import StalledBackend, start_app

from tts_core.engine import Engine, EngineBusy, EngineSlot, SynthesisRequest
from tts_core.server.connections import ConnectionGuard, ConnectionLimits, RateLimitedLog

FAIL_AFTER_S = 60  # only a hung server takes this long; the work itself takes a few seconds
SPEECH = "This is a long sentence that keeps the voice busy for a while. " * 60


def _wait_for_log(log_path: Path, pattern: str, process: subprocess.Popen) -> re.Match:
    deadline = time.monotonic() + FAIL_AFTER_S
    while time.monotonic() < deadline:
        found = re.search(pattern, log_path.read_text())
        if found:
            return found
        assert process.poll() is None, log_path.read_text()[-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in the log:\n{log_path.read_text()[-2000:]}")


def _closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection (fails if it never does). A
    server closing a socket with bytes it has not read (a slowloris client still trickling)
    makes the kernel send a reset instead of a FIN: that too is the server closing it (seen
    under load, where a trickled byte lands between the server's last read and its close)."""
    sock.settimeout(FAIL_AFTER_S)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _host(url: str) -> bytes:
    return url.removeprefix("http://").encode()


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=FAIL_AFTER_S)


@pytest.fixture(scope="module")
def guarded_app(tmp_path_factory):
    """The real app with a short head deadline, so the tests wait seconds, not tens."""
    url, process, log_path = start_app(
        tmp_path_factory.mktemp("served"),
        "--model",
        "espeak",
        "--header-timeout",
        "2",
        "--body-timeout",
        "2",
    )
    yield url, log_path
    process.terminate()
    process.wait(FAIL_AFTER_S)


def test_a_connection_that_sends_nothing_is_closed(guarded_app):
    url, _ = guarded_app
    with _connect(url) as sock:
        assert _closed_by_server(sock).startswith(b"HTTP/1.1 408")


def test_slowloris_connections_are_closed_and_the_server_keeps_answering(guarded_app):
    """300 connections trickling header bytes (a byte each per 0.5 s, so no idle timer ever
    fires) are all closed by the head deadline; a real request meanwhile gets its answer."""
    url, _ = guarded_app
    socks = [_connect(url) for _ in range(300)]
    for sock in socks:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.5):
            for sock in socks:
                try:
                    sock.send(b"X")
                except OSError:
                    pass

    threading.Thread(target=trickle, daemon=True).start()
    try:
        assert httpx.get(f"{url}/v1/models", timeout=FAIL_AFTER_S).status_code == 200
        started = time.monotonic()
        for sock in socks:
            _closed_by_server(sock)
        assert time.monotonic() - started < 30  # the bound; the deadline is 2 s
    finally:
        stop.set()
        for sock in socks:
            sock.close()


def test_a_stalled_request_body_is_closed(guarded_app):
    url, _ = guarded_app
    with _connect(url) as sock:
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\ncontent-length: 100\r\n"
            b"content-type: application/json\r\n\r\n{" % _host(url)
        )
        # past the body deadline the server closes without answering the request
        assert _closed_by_server(sock) == b""


def test_unknown_gradio_event_is_404_and_known_ones_still_run(guarded_app):
    url, _ = guarded_app
    body = {"fn_index": 9999, "data": [], "session_hash": "abcdefgh"}
    response = httpx.post(f"{url}/gradio_api/queue/join", json=body, timeout=FAIL_AFTER_S)
    assert response.status_code == 404, response.text
    assert "9999" in response.json()["detail"]
    config = httpx.get(f"{url}/config", timeout=FAIL_AFTER_S).json()
    known = next(d["id"] for d in config["dependencies"] if d["api_name"] == "synthesize_full")
    body = {"fn_index": known, "data": [], "session_hash": "abcdefgh"}  # wrong inputs, but known
    response = httpx.post(f"{url}/gradio_api/queue/join", json=body, timeout=FAIL_AFTER_S)
    assert response.status_code != 404, response.text


def _raise_own_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"this test needs {wanted} open files; the hard limit here is {hard}")
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def test_idle_sockets_cannot_exhaust_the_open_files_limit(tmp_path):
    """With `ulimit -n 1024`, 1100 idle connections: the oldest idle ones are closed to make
    room (the cap stays below the limit), the server keeps answering, and the log says so in a
    line or two, not thousands."""
    _raise_own_open_files(1400)

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    url, process, log_path = start_app(
        tmp_path, "--model", "espeak", "--header-timeout", "60", preexec_fn=limit_files
    )
    socks: list[socket.socket] = []
    try:
        socks = [_connect(url) for _ in range(1100)]
        for _ in range(3):
            assert httpx.get(f"{url}/v1/models", timeout=FAIL_AFTER_S).status_code == 200
        log = log_path.read_text()
        assert "Too many open files" not in log
        assert 1 <= log.count("connection guard:") <= 3, log[-2000:]
        assert re.search(r"at most 768 connections", log)  # 1024 - the reserve of 256
    finally:
        for sock in socks:
            sock.close()
        process.terminate()
        process.wait(FAIL_AFTER_S)


@pytest.fixture()
def own_app(tmp_path):
    """own_app(*args) -> start_app(...) for a test that ends the process itself; killed at
    teardown if the test failed before it did."""
    processes: list[subprocess.Popen] = []

    def start(*args: str) -> tuple[str, subprocess.Popen, Path]:
        url, process, log_path = start_app(tmp_path, *args)
        processes.append(process)
        return url, process, log_path

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(FAIL_AFTER_S)


def test_sigterm_drains_answers_503_meanwhile_and_exits_0(own_app):
    url, process, log_path = own_app("--model", "espeak", "--shutdown-timeout", "30")
    ffmpeg_folder = re.search(r"ffmpeg: (\S+)/ffmpeg ->", log_path.read_text())
    request = {"input": SPEECH, "voice": "alloy", "response_format": "pcm"}
    with httpx.stream(
        "POST", f"{url}/v1/audio/speech", json=request, timeout=FAIL_AFTER_S
    ) as response:
        chunks = response.iter_bytes()
        received = len(next(chunks))  # the stream is under way
        process.send_signal(signal.SIGTERM)
        _wait_for_log(log_path, "SIGTERM: draining", process)
        refused = httpx.post(
            f"{url}/v1/audio/speech", json={"input": "Hi.", "voice": "alloy"}, timeout=FAIL_AFTER_S
        )
        received += sum(len(chunk) for chunk in chunks)  # the stream in flight ends whole
    assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
    assert "shutting down" in refused.json()["error"]["message"]
    assert received > 20 * 24_000 * 2  # tens of seconds of int16 audio
    assert process.wait(FAIL_AFTER_S) == 0, log_path.read_text()[-2000:]
    if ffmpeg_folder:  # made only where no system ffmpeg/ffprobe exists
        assert not Path(ffmpeg_folder.group(1)).exists()


def test_sigterm_cuts_a_response_nobody_reads_at_the_deadline(own_app):
    """A client that stops reading cannot hold the process past the shutdown deadline."""
    url, process, log_path = own_app("--model", "espeak", "--shutdown-timeout", "1")
    body = json.dumps({"input": SPEECH, "voice": "alloy", "response_format": "pcm"}).encode()
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        # a small receive window: the ~7 MB answer cannot all sit in the kernel's buffers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\ncontent-type: application/json"
            b"\r\ncontent-length: %d\r\n\r\n%s" % (_host(url), len(body), body)
        )
        sock.settimeout(FAIL_AFTER_S)
        assert sock.recv(64).startswith(b"HTTP/1.1 200")  # under way; never read again
        process.send_signal(signal.SIGTERM)
        assert process.wait(FAIL_AFTER_S) == 0, log_path.read_text()[-2000:]
    assert "still open at the deadline" in log_path.read_text()


# ---------------------------------------------------------------- in-process pieces


def test_closing_the_slot_refuses_new_requests_and_cancels_the_stuck_ones(espeak_backend):
    backend = StalledBackend(espeak_backend)
    slot = EngineSlot.holding(Engine(backend))
    stream = slot.engine.stream(SynthesisRequest(text="Hello there."))
    outcome: list = []
    consumer = threading.Thread(target=lambda: outcome.extend(stream), daemon=True)
    consumer.start()
    assert backend.started.wait(FAIL_AFTER_S)
    assert slot.close(timeout_s=0.2) is False  # it did not end on its own: it was cancelled
    consumer.join(FAIL_AFTER_S)
    assert outcome and outcome[-1].final and outcome[-1].stats["stop_reason"] == "cancelled"
    with pytest.raises(EngineBusy, match="shutting down"):
        slot.engine  # noqa: B018 - the property raises


def test_closing_an_idle_slot_returns_at_once(engine):
    assert EngineSlot.holding(engine).close(timeout_s=FAIL_AFTER_S) is True


def test_voice_writes_are_waited_for(tmp_path, monkeypatch, write_clip, speech_like):
    from tts_core.server import VoiceRegistry, voices

    registry = VoiceRegistry(tmp_path / "voices")
    entered, release = threading.Event(), threading.Event()
    real_stage = voices.stage

    def slow_stage(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        entered.set()
        release.wait(FAIL_AFTER_S)
        return real_stage(*args, **kwargs)

    monkeypatch.setattr(voices, "stage", slow_stage)
    clip = write_clip("ref.wav", speech_like(3.0, 24_000))
    writer = threading.Thread(target=registry.register, args=("anna", clip, None), daemon=True)
    writer.start()
    assert entered.wait(FAIL_AFTER_S)
    assert registry.wait_for_writes(0.05) is False
    release.set()
    assert registry.wait_for_writes(FAIL_AFTER_S) is True
    assert "anna" in registry.names()


class FakeProtocol:
    def __init__(self) -> None:
        self.closed = False

    def close_idle(self) -> None:
        self.closed = True


def test_the_cap_closes_the_oldest_idle_connection_first():
    guard = ConnectionGuard(ConnectionLimits(), max_connections=2)
    first, second, third = FakeProtocol(), FakeProtocol(), FakeProtocol()
    for protocol in (first, second):
        assert guard.admit(protocol)  # type: ignore[arg-type]
        guard.waiting[protocol] = None  # type: ignore[index]
    guard.waiting.pop(second)  # type: ignore[call-overload] - its request is in: busy
    assert guard.admit(third)  # type: ignore[arg-type]
    assert first.closed and not second.closed
    guard.waiting.pop(third, None)  # type: ignore[call-overload]
    assert not guard.admit(FakeProtocol())  # type: ignore[arg-type] - every one is busy


def test_guard_log_lines_are_rate_limited(caplog):
    now = [0.0]
    notes = RateLimitedLog(period_s=60, clock=lambda: now[0])
    with caplog.at_level("WARNING"):
        for _ in range(5000):
            notes.event("closed: request head too slow")
        now[0] = 61.0
        notes.event("closed: request head too slow")
    lines = [r.getMessage() for r in caplog.records if "connection guard" in r.getMessage()]
    assert len(lines) == 2 and "5000 x closed" in lines[1]


def test_the_served_app_bounds_uploads_per_client(guarded_app):
    """app.py's server carries the disk guard too (tests/test_disk_guard.py has the details):
    past the per-client upload count, 429 with Retry-After."""
    from tts_core.server.disk_guard import CachePolicy

    url, _ = guarded_app
    answers = []
    for i in range(CachePolicy().uploads_per_window + 1):
        files = [("files", (f"c{i}.wav", b"RIFF" + bytes(64), "audio/wav"))]
        answers.append(httpx.post(f"{url}/gradio_api/upload", files=files, timeout=FAIL_AFTER_S))
    assert [a.status_code for a in answers[:-1]] == [200] * (len(answers) - 1)
    assert answers[-1].status_code == 429 and answers[-1].headers["retry-after"]
