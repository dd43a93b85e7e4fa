"""The HTTP routes refuse what they must: other sites' pages (CSRF, DNS rebinding), missing API
keys, oversized or malformed bodies, and more requests than the engine's line holds.

Each test starts from an attack or bad input that was found against the server; the exact
probe is in its docstring or comment.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
from conftest import HANG_S  # wait_until's deadlines: hang detectors, not speed claims
from test_openai_api import PacedBackend, RecordingEngine, assert_error, serve, wait_until

from tts_core.engine import EngineConfig
from tts_core.server import AccessPolicy, ApiConfig, install_routes, open_voice_registry
from tts_core.server.access import normalize_origin

TEXT = "Hello there, this is a short test."
LONG = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 6)
EVIL = "https://evil.example"


def make_app(engine, voices_dir, **config):  # noqa: ANN001, ANN003, ANN201 - FastAPI
    from fastapi import FastAPI

    app = FastAPI()
    install_routes(app, engine, open_voice_registry(voices_dir), ApiConfig(**config))
    return app


@pytest.fixture()
def api(engine, tmp_path):
    with serve(make_app(engine, tmp_path)) as url:
        yield url


@pytest.fixture()
def clip(write_clip, speech_like) -> str:
    return write_clip("ref.wav", speech_like(2.0, 24_000))


def register(url: str, clip: str, headers: dict | None = None, **fields) -> httpx.Response:  # noqa: ANN003
    with open(clip, "rb") as f:
        return httpx.post(
            f"{url}/v1/audio/voices",
            data={"transcript": "hi", **fields},
            files={"file": ("c.wav", f, "audio/wav")},
            headers=headers or {},
            timeout=30,
        )


# ----------------------------------------------------------------- D2: cross-site requests
def test_other_sites_cannot_register_or_overwrite_voices(api, clip):
    """curl .../v1/audio/voices -H 'Origin: https://evil.example' -F name=v -F replace=true
    -F transcript=OVERWRITTEN -F file=@good.wav   # was 201"""
    assert register(api, clip, name="v").status_code == 201
    refused = register(
        api, clip, {"Origin": EVIL}, name="v", replace="true", transcript="OVERWRITTEN"
    )
    assert assert_error(refused, 403)["code"] == "origin_not_allowed"
    voices = httpx.get(f"{api}/v1/audio/voices", timeout=10).json()["data"]
    assert next(v for v in voices if v["id"] == "v")["transcript"] == "hi"
    gone = httpx.delete(f"{api}/v1/audio/voices/v", headers={"Origin": EVIL}, timeout=10)
    assert_error(gone, 403)
    assert httpx.delete(f"{api}/v1/audio/voices/v", timeout=10).status_code == 200


def test_json_sent_as_text_plain_is_refused(api):
    """curl .../v1/audio/speech -H 'Origin: https://evil.example' -H 'Content-Type: text/plain'
    --data '{"input":"x","voice":"alloy"}'   # was 200: a form-like request no page must ask for"""
    body = json.dumps({"input": "x", "voice": "alloy"})
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "text/plain", "Origin": EVIL}):
        response = httpx.post(f"{api}/v1/audio/speech", content=body, headers=headers, timeout=10)
        assert response.status_code in (403, 415), response.text
    plain = httpx.post(
        f"{api}/tts_stream/pcm",
        content=json.dumps({"text": "x"}),
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert_error(plain, 415)


def test_other_sites_cannot_start_syntheses_even_with_json(api):
    """Gradio answers CORS preflights for any origin on a public bind, so a page can send real
    JSON; the Origin check refuses it on both synthesis routes."""
    headers = {"Origin": EVIL}
    speech = httpx.post(
        f"{api}/v1/audio/speech", json={"input": "x", "voice": "alloy"}, headers=headers, timeout=10
    )
    assert_error(speech, 403)
    pcm = httpx.post(f"{api}/tts_stream/pcm", json={"text": "x"}, headers=headers, timeout=10)
    assert_error(pcm, 403)
    for origin in ("null", "file://", "http://127.0.0.1.evil.example"):
        response = httpx.post(
            f"{api}/tts_stream/pcm", json={"text": "x"}, headers={"Origin": origin}, timeout=10
        )
        assert_error(response, 403)


def test_the_servers_own_page_and_clients_without_origin_pass(api):
    port = api.rsplit(":", 1)[1]
    for headers in (
        {},
        {"Origin": f"http://127.0.0.1:{port}"},
        {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"},
    ):
        response = httpx.post(
            f"{api}/tts_stream/pcm", json={"text": TEXT}, headers=headers, timeout=30
        )
        assert response.status_code == 200, (headers, response.text[:200])


def test_dns_rebinding_host_is_refused_on_loopback(api):
    """A page at evil.example re-points its name to 127.0.0.1: same-origin for the browser,
    but the request names Host: evil.example."""
    headers = {"Host": "evil.example:7860", "Origin": "http://evil.example:7860"}
    for method, path in (
        ("GET", "/v1/audio/voices"),
        ("DELETE", "/v1/audio/voices/x"),
        ("POST", "/tts_stream/pcm"),
    ):
        response = httpx.request(
            method, f"{api}{path}", headers=headers, json={"text": "x"}, timeout=10
        )
        assert assert_error(response, 403)["code"] == "host_not_allowed"


def test_allowed_origins_and_public_bind(engine, tmp_path):
    access = AccessPolicy(bind_host="127.0.0.1", allowed_origins=("https://app.example.org",))
    with serve(make_app(engine, tmp_path, access=access)) as url:
        ok = httpx.post(
            f"{url}/tts_stream/pcm",
            json={"text": TEXT},
            timeout=30,
            headers={"Origin": "https://app.example.org"},
        )
        assert ok.status_code == 200
        named = httpx.get(f"{url}/v1/models", headers={"Host": "app.example.org"}, timeout=10)
        assert named.status_code == 200  # an allowed origin's host may name the server
    public = AccessPolicy(bind_host="0.0.0.0")
    with serve(make_app(engine, tmp_path, access=public)) as url:
        # any Host is fine on a public bind, but a foreign Origin still is not
        same = httpx.post(
            f"{url}/tts_stream/pcm",
            json={"text": TEXT},
            timeout=30,
            headers={"Host": "tts.example.org", "Origin": "https://tts.example.org"},
        )
        assert same.status_code == 200
        assert_error(
            httpx.post(
                f"{url}/tts_stream/pcm",
                json={"text": TEXT},
                timeout=10,
                headers={"Host": "tts.example.org", "Origin": EVIL},
            ),
            403,
        )


def test_api_key_guards_v1_only(engine, tmp_path):
    access = AccessPolicy(api_key="s3cret")
    with serve(make_app(engine, tmp_path, access=access)) as url:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            response = httpx.get(f"{url}/v1/models", headers=headers, timeout=10)
            assert assert_error(response, 401)["code"] == "invalid_api_key"
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/v1/models", headers=good, timeout=10).status_code == 200
        speech = httpx.post(
            f"{url}/v1/audio/speech",
            headers=good,
            timeout=30,
            json={"input": TEXT, "voice": "alloy", "response_format": "pcm"},
        )
        assert speech.status_code == 200 and len(speech.content) > 1000
        # the page's own route takes no key (the page cannot hold one); Origin guards it
        assert (
            httpx.post(f"{url}/tts_stream/pcm", json={"text": TEXT}, timeout=30).status_code == 200
        )


# What openai-python (1.x/2.x) sends for `OpenAI(base_url=URL + "/v1", api_key=KEY)
# .audio.speech.create(...)`, header for header (its _base_client default_headers,
# platform_headers and _build_headers; Accept from resources/audio/speech.py), over httpx: no
# Origin (not a browser), the key as a Bearer token, JSON written compactly.
SDK_VERSION = "2.54.0"
SDK_HEADERS = {
    "Accept": "application/octet-stream",
    "Content-Type": "application/json",
    "User-Agent": f"OpenAI/Python {SDK_VERSION}",
    "X-Stainless-Lang": "python",
    "X-Stainless-Package-Version": SDK_VERSION,
    "X-Stainless-OS": "Linux",
    "X-Stainless-Arch": "x64",
    "X-Stainless-Runtime": "CPython",
    "X-Stainless-Runtime-Version": "3.11.9",
    "X-Stainless-Async": "false",
    "x-stainless-retry-count": "0",
    "x-stainless-read-timeout": "600",
}
SDK_BODY = {"input": TEXT, "model": "tts-1", "voice": "alloy", "response_format": "pcm"}


def sdk_speech(url: str, api_key: str | None, **body) -> httpx.Response:  # noqa: ANN003
    headers = dict(SDK_HEADERS)
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    content = json.dumps({**SDK_BODY, **body}, separators=(",", ":")).encode()
    return httpx.post(f"{url}/v1/audio/speech", content=content, headers=headers, timeout=30)


def test_the_openai_sdks_request_passes_the_key_check_and_a_wrong_key_does_not(engine, tmp_path):
    """The request the openai SDK sends, with the server's key: speech; with another key or
    none: 401 with the SDK's error shape (openai.AuthenticationError is raised from it)."""
    with serve(make_app(engine, tmp_path, access=AccessPolicy(api_key="s3cret"))) as url:
        speech = sdk_speech(url, "s3cret")
        assert speech.status_code == 200, speech.text[:300]
        assert len(speech.content) > 24_000  # pcm: > 0.5 s of 24 kHz int16
        for key in ("wrong", "s3cre", None):
            refused = sdk_speech(url, key)
            assert assert_error(refused, 401)["code"] == "invalid_api_key"
            assert refused.headers["www-authenticate"] == "Bearer"
        models = httpx.get(
            f"{url}/v1/models",
            timeout=10,
            headers={**SDK_HEADERS, "Accept": "application/json", "Authorization": "Bearer s3cret"},
        )
        assert models.status_code == 200 and models.json()["data"]


def test_the_openai_sdk_itself_gets_speech_with_the_key(engine, tmp_path):
    openai = pytest.importorskip(
        "openai",
        reason="the openai SDK is not installed: the request its installed version builds "
        "(URL joining, headers, error mapping) is not exercised; the test above sends the one "
        "openai-python 1.x/2.x sends",
    )
    with serve(make_app(engine, tmp_path, access=AccessPolicy(api_key="s3cret"))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret", max_retries=0)
        speech = client.audio.speech.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
        )
        assert len(speech.content) > 24_000
        assert client.models.list().data
        wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("HTTP://Example.org:80/", "http://example.org"),
        ("https://example.org:8443", "https://example.org:8443"),
        ("http://[::1]:7860", "http://[::1]:7860"),
        ("null", None),
        ("file://", None),
        ("http://host:notaport", None),
    ],
)
def test_origin_normalization(origin, expected):
    assert normalize_origin(origin) == expected


# ------------------------------------------------------------- D5: bounded voice uploads
def _chunked_upload(url: str, total_bytes: int) -> tuple[int, int]:
    """Send a chunked multipart body of `total_bytes` without Content-Length; returns
    (status, bytes the server let us send before it answered)."""
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    sent = 0

    def body():  # noqa: ANN202
        nonlocal sent
        yield head
        piece = bytes(256 * 1024)
        while sent < total_bytes:
            sent += len(piece)
            yield piece
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    try:
        response = httpx.post(f"{url}/v1/audio/voices", content=body(), headers=headers, timeout=30)
        return response.status_code, sent
    except httpx.HTTPError:  # the server may close the connection after answering
        return 413, sent


def test_chunked_upload_stops_at_the_limit(engine, tmp_path, monkeypatch):
    """100 MB sent chunked (no Content-Length) was spooled to disk before the 413."""
    spooled = []
    import tempfile as tempfile_module

    real = tempfile_module.SpooledTemporaryFile

    class Counting(real):
        def write(self, data):  # noqa: ANN001, ANN202
            spooled.append(len(data))
            return super().write(data)

    monkeypatch.setattr("starlette.formparsers.SpooledTemporaryFile", Counting)
    limit = 1024 * 1024
    with serve(make_app(engine, tmp_path, max_upload_bytes=limit)) as url:
        status, _sent = _chunked_upload(url, 20 * limit)
    assert status == 413
    assert sum(spooled) <= 2 * limit  # what the server kept before refusing
    assert not list(tmp_path.iterdir()) or all(p.name == "x" for p in tmp_path.iterdir())


def test_max_file_size_applies_to_voice_registration(engine, tmp_path, write_clip, speech_like):
    small = write_clip("small.wav", speech_like(2.0, 24_000))  # ~96 kB
    with serve(make_app(engine, tmp_path, max_upload_bytes=50_000)) as url:
        assert_error(register(url, small, name="v"), 413, "file")
    with serve(make_app(engine, tmp_path, max_upload_bytes=200_000)) as url:
        assert register(url, small, name="v").status_code == 201


# ------------------------------------------------------------- D10, D12: malformed bodies
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in json
        b'{"input": "x", "voice": "alloy", "seed": ' + b"9" * 5000 + b"}",  # int > 4300 digits
        b'{"input": "\xff\xfe"}',  # not UTF-8
    ],
    ids=["deep", "huge-int", "not-utf8"],
)
def test_malformed_json_is_a_400(api, raw):
    for route in ("/v1/audio/speech", "/tts_stream/pcm"):
        response = httpx.post(
            f"{api}{route}", content=raw, timeout=30, headers={"Content-Type": "application/json"}
        )
        assert assert_error(response, 400)["code"] == "invalid_json"


def test_multipart_with_too_many_parts_or_a_huge_field_is_a_400(api, clip):
    with open(clip, "rb") as f:
        data = f.read()
    three_files = [("file", (f"{i}.wav", data, "audio/wav")) for i in range(3)]
    response = httpx.post(
        f"{api}/v1/audio/voices", data={"name": "v"}, files=three_files, timeout=30
    )
    assert assert_error(response, 400)["code"] == "invalid_form"
    many = {f"f{i}": "x" for i in range(12)}
    response = httpx.post(
        f"{api}/v1/audio/voices",
        data={"name": "v", **many},
        files={"file": ("a.wav", data)},
        timeout=30,
    )
    assert_error(response, 400)
    response = httpx.post(
        f"{api}/v1/audio/voices",
        data={"name": "v", "transcript": "x" * 2**20},
        files={"file": ("a.wav", data)},
        timeout=30,
    )
    assert_error(response, 400)


def test_transcript_sent_as_a_file_is_refused(api, clip):
    """It was stored as the text 'UploadFile(filename=...)'."""
    with open(clip, "rb") as f:
        files = {"file": ("c.wav", f, "audio/wav"), "transcript": ("t.txt", b"hello", "text/plain")}
        response = httpx.post(f"{api}/v1/audio/voices", data={"name": "v"}, files=files, timeout=30)
    assert assert_error(response, 400, "transcript")
    assert httpx.get(f"{api}/v1/audio/voices", timeout=10).json()["data"][-1]["id"] != "v"


# ------------------------------------------------------------------- D14: error params
@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("language", "klingon", "language"),
        ("temperature", 99, "temperature"),
        ("top_k", -3, "top_k"),
        ("repetition_penalty", 1e-40, "repetition_penalty"),
        ("temperature", 1e-45, "temperature"),
        ("input", "\x00\x01", "input"),
    ],
)
def test_errors_name_the_field_at_fault(api, field, value, param):
    body = {"input": TEXT, "voice": "alloy", "response_format": "pcm", field: value}
    response = httpx.post(f"{api}/v1/audio/speech", json=body, timeout=30)
    assert_error(response, 400, param)


# -------------------------------------------------------------- D6: one bounded line
def test_pcm_route_is_admitted_through_the_engines_line(espeak_backend, tmp_path):
    """40 concurrent /tts_stream/pcm requests all waited (8 -> 53 server threads); now the
    running + waiting count is bounded and the rest get 503 + Retry-After at once."""
    config = EngineConfig(max_concurrent=1, max_queue=2)
    engine = RecordingEngine(PacedBackend(espeak_backend, 4.0), config)
    results: list[int] = []
    threads_before = threading.active_count()
    peak_threads = threads_before
    with serve(make_app(engine, tmp_path)) as url:

        def one() -> None:
            response = httpx.post(f"{url}/tts_stream/pcm", json={"text": LONG}, timeout=60)
            results.append(response.status_code)
            if response.status_code == 503:
                assert int(response.headers["retry-after"]) >= 1

        clients = [threading.Thread(target=one) for _ in range(12)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 60
        while any(c.is_alive() for c in clients) and time.monotonic() < deadline:
            assert engine.active_requests + engine.waiting_requests <= 3
            peak_threads = max(peak_threads, threading.active_count())
            time.sleep(0.02)
        for client in clients:
            client.join()
    assert sorted(set(results)) == [200, 503]
    assert results.count(200) >= 3  # one ran, two waited (later ones may find room again)
    assert peak_threads - threads_before <= 12 + 3 + 4  # clients + admitted + server slack


def test_v1_busy_check_counts_waiters(espeak_backend, tmp_path):
    """The /v1 busy check polled `active < max` and raced; now it takes a place in the same
    line as every other surface."""
    config = EngineConfig(max_concurrent=1, max_queue=1)
    engine = RecordingEngine(PacedBackend(espeak_backend, 3.0), config)
    body = {"input": LONG, "voice": "alloy", "response_format": "pcm"}
    with serve(make_app(engine, tmp_path)) as url:
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=60) as first:
            chunks = first.iter_bytes()
            next(chunks)
            with httpx.stream(
                "POST", f"{url}/tts_stream/pcm", json={"text": LONG}, timeout=60
            ) as second:
                assert second.status_code == 200  # admitted: it waits in line
                wait_until(lambda: engine.waiting_requests == 1, HANG_S)
                third = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=10)
                assert assert_error(third, 503)["code"] == "engine_busy"
        wait_until(lambda: engine.active_requests + engine.waiting_requests == 0, HANG_S)


def test_closed_connection_while_waiting_gives_the_place_back(espeak_backend, tmp_path):
    config = EngineConfig(max_concurrent=1, max_queue=1)
    engine = RecordingEngine(PacedBackend(espeak_backend, 3.0), config)
    with serve(make_app(engine, tmp_path)) as url:
        host, port = url.removeprefix("http://").split(":")
        with httpx.stream("POST", f"{url}/tts_stream/pcm", json={"text": LONG}, timeout=60) as a:
            chunks = a.iter_bytes()  # kept referenced: a dropped iterator closes the stream
            next(chunks)
            body = json.dumps({"text": LONG}).encode()
            with socket.create_connection((host, int(port))) as raw:
                raw.sendall(
                    b"POST /tts_stream/pcm HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                wait_until(lambda: engine.waiting_requests == 1, HANG_S)
            wait_until(lambda: engine.waiting_requests == 0, HANG_S)  # the waiter left the line
        wait_until(lambda: engine.active_requests == 0, HANG_S)
    assert np.all([run["ended"] is not None for run in engine.runs])


def test_unwritable_voice_store_is_reported_at_start(engine, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level("WARNING"):
        make_app(engine, blocker / "voices")
    assert any("registering voices will fail" in r.getMessage() for r in caplog.records)
